"""Checks of what an agent is shown: a view of the history must be faithful to it.

:func:`check_view` holds one view (``info["messages"]``) to the whole history (``info["history"]``);
:func:`check_context_policy` checks a :class:`~agent_gym.core.context.ContextPolicy` on histories you
give it (e.g. :func:`agent_gym.testing.strategies.histories`). Both are re-exported by
:mod:`agent_gym.testing`, whose :func:`~agent_gym.testing.check_text_env` runs :func:`check_view` on
every step of real episodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agent_gym.core.context import ContextPolicy, turn_starts
from agent_gym.core.history import Message
from agent_gym.core.info import ChatMessage

__all__ = ["check_context_policy", "check_view"]


def check_view(view: Sequence[ChatMessage], history: Sequence[ChatMessage], *, where: str = "") -> None:
    """Assert that ``view`` is a faithful view of ``history`` (chat messages both); the messages name the broken rule.

    The rules every :class:`~agent_gym.core.context.ContextPolicy` keeps:

    * the task first: the view starts with the history's task (the messages
      before the first assistant message) verbatim, except that the task's
      last message may carry a note appended to its content (as ``"fold"`` does);
    * nothing invented: every later message of the view is a message of the
      history after the task, in history order (a policy drops or folds
      messages; it never writes turns or tool results of its own);
    * the latest message kept: once the agent has acted, the view ends with
      the history's last message (the result the agent must react to).

    Args:
        view: What the agent is shown (``info["messages"]``).
        history: The whole history (``info["history"]``).
        where: A prefix for the messages (e.g. ``"seed 0, step 3: "``).
    """
    starts = turn_starts([m["role"] for m in history])
    task = starts[0] if starts else len(history)
    assert len(view) >= task, (
        f"{where}the view has {len(view)} messages, fewer than the task's {task}: it drops the task"
    )
    for i in range(task):
        kept = view[i] == history[i] or (i == task - 1 and _extends(view[i], history[i]))
        assert kept, (
            f"{where}the view must start with the task (the messages before the first assistant message): "
            f"view[{i}] is {_brief(view[i])}, the task's message {i} is {_brief(history[i])}"
        )
    j = task
    for i in range(task, len(view)):
        while j < len(history) and history[j] != view[i]:
            j += 1
        assert j < len(history), (
            f"{where}view[{i}] {_brief(view[i])} is not a message of the history after the view's earlier ones: "
            "a context policy may drop or fold messages, never invent or reorder them"
        )
        j += 1
    if len(history) > task:
        assert view and view[-1] == history[-1], (
            f"{where}the view must end with the history's last message {_brief(history[-1])} (the latest result), "
            f"not {_brief(view[-1]) if view else 'nothing'}"
        )


def _extends(shown: ChatMessage, original: ChatMessage) -> bool:
    """``shown`` is ``original`` with text appended to its content (a context policy's note)."""
    content = shown.get("content")
    same_otherwise = {**shown, "content": original.get("content")} == original
    return same_otherwise and isinstance(content, str) and content.startswith(str(original.get("content")))


def _brief(message: ChatMessage) -> str:
    return f"({message.get('role')}: {str(message.get('content'))[:60]!r})"


def check_context_policy(policy: ContextPolicy, histories: Iterable[Sequence[Message]]) -> None:
    """Assert that ``policy`` views each of ``histories`` faithfully; the messages name the broken rule.

    For each history: ``policy.view(history)`` is a list of
    :class:`~agent_gym.core.history.Message`, leaves the history as it was,
    gives an equal view when called again, and keeps the rules of
    :func:`check_view`. To check a policy on real episodes instead, run
    :func:`check_text_env` on ``gymnasium.make(env_id, context=policy)``.

    Args:
        policy: The policy under test.
        histories: At least one history, each starting with its task (the
            system prompt and the question, as a ToolEnv's histories do).

    Raises:
        AssertionError: The policy broke a rule.
        ValueError: No history, or one that starts with an assistant message.

    Example:
        >>> from agent_gym.core.context import make_context
        >>> history = [Message.system("Use tools."), Message.user("2+2?"), Message.assistant("<answer>4</answer>")]
        >>> check_context_policy(make_context("window", context_turns=1), [history])
    """
    assert isinstance(policy, ContextPolicy), (
        f"a context policy needs a name and a view(history) method; {type(policy).__name__} lacks one"
    )
    count = 0
    for i, history in enumerate(histories):
        before = list(history)
        if before and before[0].role == "assistant":
            raise ValueError(f"history {i} starts with an assistant message; a history starts with its task")
        where = f"context policy {policy.name!r}, history {i}: "
        view = policy.view(history)
        assert isinstance(view, list) and all(isinstance(m, Message) for m in view), (
            f"{where}view() must return a list of Message, got {type(view).__name__}"
        )
        assert list(history) == before, f"{where}view() must leave the history as it was"
        assert policy.view(history) == view, f"{where}view() must be deterministic: a second call gave another view"
        check_view([m.to_chat() for m in view], [m.to_chat() for m in before], where=where)
        count += 1
    if not count:
        raise ValueError("check_context_policy needs at least one history")

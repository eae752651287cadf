"""Context policies: what the agent sees next (the step-level MDP of Agent-R1 v0.1.0).

The episode's :class:`~agent_gym.core.history.History` records everything and
is never rewritten. A :class:`ContextPolicy` maps that full history to the
messages the agent is shown next: a :class:`~agent_gym.core.env.ToolEnv`'s
observation text and ``info["messages"]`` are the policy's view, while
``info["history"]`` is always the full history. The built-ins, chosen by name
with ``gymnasium.make(env_id, context=..., context_turns=K)``:

* ``"append"`` (:class:`Append`, the default): the whole history, the paper's MDP;
* ``"window"`` (:class:`Window`): the task and the last ``K`` turns;
* ``"fold"`` (:class:`Fold`): the task with one line per older turn, then the last ``K`` turns.

Two words used throughout:

* the **task** is every message before the first assistant message: in a
  ``ToolEnv`` history, the system prompt and the question;
* a **turn** is one assistant message with the messages that follow it up to
  the next assistant message (its tool results, and the format-error note a
  malformed action gets).

Any object with a ``name`` and a ``view(history)`` method is a policy too
(:func:`make_context` passes it through); check yours with
:func:`agent_gym.testing.check_context_policy`.

Example:
    >>> history = [Message.system("Use tools."), Message.user("2+2?"),
    ...            Message.assistant("It is 5."), Message.user("Format error: no answer."),
    ...            Message.assistant("<answer>4</answer>")]
    >>> [m.content for m in make_context("window", context_turns=1).view(history)]
    ['Use tools.', '2+2?', '<answer>4</answer>']
    >>> print(make_context("fold", context_turns=1).view(history)[1].content)
    2+2?
    <BLANKLINE>
    Earlier turns, one line each (action -> result):
    turn 1: It is 5. -> Format error: no answer.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from itertools import chain, pairwise
from typing import ClassVar, Protocol, runtime_checkable

from agent_gym.core.history import Message, Role, ToolCall, render_message
from agent_gym.core.validation import positive_int

__all__ = [
    "DEFAULT_DIGEST_CHARS",
    "FOLD_HEADER",
    "Append",
    "ContextName",
    "ContextPolicy",
    "Fold",
    "Window",
    "call_text",
    "digest",
    "make_context",
    "render_view",
    "require_append",
    "split_turns",
    "turn_starts",
]

DEFAULT_DIGEST_CHARS = 120
"""How many characters of an older turn's action, and of its result, a fold line keeps by default."""

FOLD_HEADER = "Earlier turns, one line each (action -> result):"
"""The first line of the note in which :class:`Fold` folds the older turns."""


@runtime_checkable
class ContextPolicy(Protocol):
    """What the agent sees next, given the full history: ``view(history) -> messages``.

    A policy is deterministic (the same history gives an equal view) and
    leaves the history as it is. Its view keeps the task first, ends with the
    history's last message, and otherwise only drops or folds messages: every
    message after the task is one of the history's, in history order, and a
    note about what was dropped joins the task's last message (the question)
    rather than becoming a message of its own. :func:`agent_gym.testing.check_context_policy`
    asserts exactly these rules.
    """

    @property
    def name(self) -> str:
        """A short name for logs (the built-ins: ``"append"``, ``"window"``, ``"fold"``)."""
        ...

    def view(self, history: Sequence[Message]) -> list[Message]:
        """The messages the agent sees next, given every message of the episode so far."""
        ...


class ContextName(StrEnum):
    """The built-in policies' names (the values of ``context=``)."""

    APPEND = "append"
    """:class:`Append`: the whole history."""
    WINDOW = "window"
    """:class:`Window`: the task and the last ``context_turns`` turns."""
    FOLD = "fold"
    """:class:`Fold`: the task with one line per older turn, then the last ``context_turns`` turns."""


def turn_starts(roles: Sequence[str]) -> list[int]:
    """The indices at which turns start (the assistant messages); the task is everything before the first.

    Example:
        >>> turn_starts(["system", "user", "assistant", "tool", "assistant"])
        [2, 4]
    """
    return [i for i, role in enumerate(roles) if role == Role.ASSISTANT]


def split_turns(history: Sequence[Message]) -> tuple[list[Message], list[list[Message]]]:
    """``history`` as its task and its turns (which, in order, make up the whole history again)."""
    bounds = [*turn_starts([m.role for m in history]), len(history)]
    return list(history[: bounds[0]]), [list(history[a:b]) for a, b in pairwise(bounds)]


def _flatten(turns: Iterable[list[Message]]) -> list[Message]:
    return list(chain.from_iterable(turns))


@dataclass(frozen=True)
class Append:
    """The whole history: the paper's MDP, and the default."""

    name: ClassVar[str] = ContextName.APPEND.value

    def view(self, history: Sequence[Message]) -> list[Message]:
        """Every message of ``history``, in order."""
        return list(history)


@dataclass(frozen=True)
class Window:
    """The task and the last ``turns`` turns, verbatim; older turns are dropped.

    With ``turns`` or fewer turns so far the view is the whole history. The
    view alternates as the history does: the task ends with the question and
    a turn starts with the assistant.

    Attributes:
        turns: How many of the latest turns to keep (``context_turns``, >= 1).

    Raises:
        ValueError: ``turns`` is not a positive int.
    """

    turns: int
    name: ClassVar[str] = ContextName.WINDOW.value

    def __post_init__(self) -> None:
        object.__setattr__(self, "turns", positive_int("context_turns", self.turns))

    def view(self, history: Sequence[Message]) -> list[Message]:
        """The task, then the last ``turns`` turns."""
        task, turns = split_turns(history)
        return [*task, *_flatten(turns[-self.turns :])]


def digest(text: str, limit: int) -> str:
    """``text`` on one line (whitespace runs collapsed to one space), cut to ``limit`` characters with a note.

    Empty text (or only whitespace) is ``(nothing)``, never cut.

    Example:
        >>> digest("a  b\\nc", 10), digest("abcdefgh", 3), digest("", 3)
        ('a b c', 'abc [... 5 characters cut]', '(nothing)')
    """
    line = " ".join(text.split())
    if not line:
        return "(nothing)"
    return line if len(line) <= limit else f"{line[:limit]} [... {len(line) - limit} characters cut]"


def call_text(call: ToolCall) -> str:
    """A call as ``name(key=<JSON value>, ...)``, its arguments in the order written.

    Example:
        >>> call_text(ToolCall("search", {"query": "x", "k": 2}))
        'search(query="x", k=2)'
    """
    args = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in call.arguments.items())
    return f"{call.name}({args})"


@dataclass(frozen=True)
class Fold:
    """The task with one line per turn older than the last ``turns``, then the last ``turns`` turns verbatim.

    Turn ``n`` (counted from 1) folds into the line ``turn n: <action> -> <result>``:
    the action is the turn's calls as :func:`call_text` joined by ``"; "``, or
    the assistant's raw text when it made no call; the result is the contents
    of the turn's other messages (tool results, a format-error note) joined
    by ``" | "``. Each side is a :func:`digest` of ``digest_chars`` characters,
    so a line is one line of bounded length. The lines, under
    :data:`FOLD_HEADER`, make one note, the same text for the same history.

    Where the note goes: it joins the task's last message (the question) after
    a blank line, instead of following it as a user message of its own. Two user
    messages in a row break chat templates that insist on alternating roles
    (Llama 2's, Mistral's and Gemma's raise on them), so merging keeps the view
    alternating exactly as the history does; the question itself is kept
    verbatim at the start of that message. A history without a task (it starts
    with an assistant message) gets the note as a user message of its own.

    With ``turns`` or fewer turns so far the view is the whole history.

    Each turn's line is computed once: a turn folds only once a later turn
    exists, and the history is append-only, so its messages never change. The
    policy keeps the line of the ``n``-th turn together with that turn's
    messages (the objects themselves, compared by identity) and reuses it while
    the ``n``-th turn of the history it is shown is made of the same objects;
    a step therefore costs time in proportion to what is new, not to the whole
    history (digesting every older turn again made a 40-turn episode of 1 MB
    actions quadratic: about 1.4 s a step at turn 40). A history the policy has
    not seen (another episode, another env sharing the policy, a copy) simply
    misses and is digested afresh, so the view is the same either way.

    Attributes:
        turns: How many of the latest turns to show verbatim (``context_turns``, >= 1).
        digest_chars: How many characters of each folded action and result to
            keep (``context_digest_chars``, >= 1).

    Raises:
        ValueError: A setting is not a positive int.
    """

    turns: int
    digest_chars: int = DEFAULT_DIGEST_CHARS
    name: ClassVar[str] = ContextName.FOLD.value
    _lines: list[tuple[tuple[Message, ...], str]] = field(default_factory=list, init=False, repr=False, compare=False)
    """Per turn number (from 0): the turn's messages and its fold line, as last computed."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "turns", positive_int("context_turns", self.turns))
        object.__setattr__(self, "digest_chars", positive_int("context_digest_chars", self.digest_chars))

    def view(self, history: Sequence[Message]) -> list[Message]:
        """The task carrying the folded older turns, then the last ``turns`` turns."""
        task, turns = split_turns(history)
        older, recent = turns[: -self.turns], turns[-self.turns :]
        if not older:
            return list(history)
        note = "\n".join([FOLD_HEADER, *(self._cached_line(n, turn) for n, turn in enumerate(older))])
        if task:
            task[-1] = replace(task[-1], content=f"{task[-1].content}\n\n{note}")
        else:
            task = [Message.user(note)]
        return [*task, *_flatten(recent)]

    def _cached_line(self, index: int, turn: list[Message]) -> str:
        """The line of the turn at ``index`` (from 0), reused while that turn is made of the same messages."""
        lines = self._lines
        if index < len(lines):
            seen, line = lines[index]
            if len(seen) == len(turn) and all(a is b for a, b in zip(seen, turn, strict=True)):
                return line
        line = self._line(index + 1, turn)
        if index < len(lines):
            lines[index] = (tuple(turn), line)
        elif index == len(lines):
            lines.append((tuple(turn), line))
        return line

    def _line(self, number: int, turn: list[Message]) -> str:
        action, *replies = turn
        did = "; ".join(call_text(c) for c in action.tool_calls) or action.content
        got = " | ".join(m.content for m in replies)
        return f"turn {number}: {digest(did, self.digest_chars)} -> {digest(got, self.digest_chars)}"


def make_context(
    context: str | ContextPolicy = ContextName.APPEND,
    *,
    context_turns: int | None = None,
    context_digest_chars: int | None = None,
) -> ContextPolicy:
    """The context policy named ``context`` with its settings, or the user's own policy as it is.

    Args:
        context: A :class:`ContextName` (``"append"``, ``"window"``, ``"fold"``)
            or any :class:`ContextPolicy` object.
        context_turns: ``"window"`` and ``"fold"`` (required there): how many
            of the latest turns to show verbatim.
        context_digest_chars: ``"fold"`` only: characters kept of each folded
            action and result (default :data:`DEFAULT_DIGEST_CHARS`).

    Raises:
        ValueError: An unknown name (the message lists the choices), a
            setting the policy does not take, a missing ``context_turns``, or
            a setting that is not a positive int.
        TypeError: ``context`` is neither a name nor a :class:`ContextPolicy`.

    Example:
        >>> make_context("fold", context_turns=2)
        Fold(turns=2, digest_chars=120)
        >>> make_context("windows", context_turns=2)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: unknown context 'windows' (did you mean 'window'?); choose one of ['append', 'window', 'fold'] ...
    """
    if isinstance(context, str):
        return _builtin(context, context_turns, context_digest_chars)
    if not isinstance(context, ContextPolicy):
        raise TypeError(
            "context must be a policy name ('append', 'window', 'fold') or a ContextPolicy (an object with a name "
            f"and a view(history) method), got {type(context).__name__}"
        )
    if context_turns is not None or context_digest_chars is not None:
        raise ValueError(
            "context_turns and context_digest_chars configure the built-in policies; a ContextPolicy object "
            f"carries its own settings (got context_turns={context_turns!r}, "
            f"context_digest_chars={context_digest_chars!r})"
        )
    return context


def _builtin(name: str, turns: int | None, digest_chars: int | None) -> ContextPolicy:
    """The built-in policy ``name``; every setting it does not take must be ``None``."""
    choices = [c.value for c in ContextName]
    if name not in choices:
        close = difflib.get_close_matches(name, choices, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown context {name!r}{hint}; choose one of {choices} or pass a ContextPolicy object")
    kind = ContextName(name)
    if digest_chars is not None and kind is not ContextName.FOLD:
        raise ValueError(f"context_digest_chars only applies to context='fold' (got context={name!r})")
    if kind is ContextName.APPEND:
        if turns is not None:
            raise ValueError(
                f"context_turns only applies to 'window' and 'fold' (got context='append', context_turns={turns!r})"
            )
        return Append()
    if turns is None:
        raise ValueError(f"context={name!r} needs context_turns=K: how many of the latest turns to keep (K >= 1)")
    if kind is ContextName.WINDOW:
        return Window(turns)
    return Fold(turns, DEFAULT_DIGEST_CHARS if digest_chars is None else digest_chars)


def render_view(messages: Sequence[Message], limit: int) -> str:
    """A view as observation text of at most ``limit`` characters.

    The text is every message as :func:`~agent_gym.core.history.render_message`
    writes it. A longer text keeps the start of the first two messages (the
    task), a marker, and the latest part; when even that does not fit, only
    the last ``limit`` characters.
    """
    text = "".join(render_message(m) for m in messages)
    if len(text) <= limit:
        return text
    head = "".join(render_message(m) for m in messages[:2])[: limit // 4]
    marker = f"[... {len(text)} characters of history, middle elided ...]\n"
    tail_len = limit - len(head) - len(marker)
    if tail_len < 1:  # too small for head + marker: the latest part only
        return text[-limit:]
    return head + marker + text[-tail_len:]


def require_append(context: object, who: str) -> None:
    """Refuse a context policy other than ``append`` for ``who``, a consumer that concatenates the history.

    ``context`` is an env's ``context`` attribute, or the ``context=`` setting it is built with (a name or a
    policy). Such consumers (the token rollout engine, the framework adapters) build one growing
    conversation from ``info["new_messages"]``; under another policy the agent would be shown that whole
    history while the env and the trajectory record the policy's view.

    Raises:
        ValueError: The policy is not ``append`` (the message names it and ``who``).
    """
    name = context if isinstance(context, str) else getattr(context, "name", ContextName.APPEND.value)
    if name != ContextName.APPEND:
        raise ValueError(
            f"{who} plays the whole history as one conversation (context='append'), but this env's context is "
            f"{name!r}: training on per-step views is not implemented yet; use context='append'"
        )

"""A Hypothesis strategy of episode histories shaped like a ToolEnv's, for testing context policies.

:func:`histories` feeds :func:`agent_gym.testing.check_context_policy`; it is re-exported by
:mod:`agent_gym.testing.strategies`.

Example:
    >>> from hypothesis import given
    >>> from agent_gym.core.context import make_context
    >>> from agent_gym.testing import check_context_policy
    >>> @given(histories())
    ... def test_window_policy(history):
    ...     check_context_policy(make_context("window", context_turns=2), [history])
"""

from __future__ import annotations

try:
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - exercised only without the testing extra
    raise ImportError("agent_gym.testing.histories needs hypothesis: pip install 'agent-r1-gym[testing]'") from exc

from agent_gym.core.history import Message, ToolCall, ToolResult

__all__ = ["histories"]


@st.composite
def _turn(draw: st.DrawFn, number: int, text: st.SearchStrategy[str]) -> list[Message]:
    """Turn ``number``: an assistant message with 0-2 calls, their results, and sometimes a format-error note."""
    calls = tuple(
        ToolCall(draw(st.sampled_from(["search", "lookup"])), {"query": draw(text)}, id=f"call_{number}_{i}")
        for i in range(draw(st.integers(0, 2)))
    )
    turn = [Message.assistant(draw(text), calls)]
    turn += [Message.tool(call, ToolResult(draw(text), ok=draw(st.booleans()))) for call in calls]
    if draw(st.booleans()):
        turn.append(Message.user(f"Format error: {draw(text)}"))
    return turn


@st.composite
def histories(draw: st.DrawFn, max_turns: int = 8, max_text: int = 200) -> list[Message]:
    """Histories shaped like a ToolEnv's: 1-2 system messages and a question, then 0-``max_turns`` turns.

    A turn is an assistant message with 0-2 calls, one tool message per call,
    and sometimes a format-error user message. Texts are arbitrary (empty,
    multi-line, any whitespace) or drawn from a few words, so equal messages
    and whole equal turns occur.
    """
    text = st.text(max_size=max_text) | st.sampled_from(["", "x", "same answer"])
    task = [Message.system(draw(text)) for _ in range(draw(st.integers(1, 2)))] + [Message.user(draw(text))]
    turns = [draw(_turn(n, text)) for n in range(1, draw(st.integers(0, max_turns)) + 1)]
    return task + [m for turn in turns for m in turn]

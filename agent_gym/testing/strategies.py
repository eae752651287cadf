"""Hypothesis strategies for adversarial agent actions (reuse them on your envs).

Example:
    >>> from hypothesis import given
    >>> from agent_gym.testing.strategies import actions
    >>> @given(actions(tool_names=["search"]))
    ... def test_never_crashes(action): ...
"""

from __future__ import annotations

import json
from collections.abc import Sequence

try:
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - exercised only without the test extra
    raise ImportError("agent_gym.testing.strategies needs hypothesis: pip install 'agent-r1-gym[test]'") from exc

__all__ = ["actions", "json_values", "tool_call_actions"]

_TAGS = ["<tool_call>", "</tool_call>", "<answer>", "</answer>", "<search>", "</search>", "<think>", "</think>"]


def json_values(max_leaves: int = 8) -> st.SearchStrategy[object]:
    """Arbitrary JSON values (nested lists and objects)."""
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
    return st.recursive(
        scalars,
        lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
        max_leaves=max_leaves,
    )


def tool_call_actions(tool_names: Sequence[str] = ("search",)) -> st.SearchStrategy[str]:
    """``<tool_call>`` blocks with valid or invalid names and arguments."""
    names = st.sampled_from(list(tool_names)) | st.text(max_size=12)
    arguments = st.dictionaries(st.text(max_size=10), json_values(), max_size=3) | json_values()
    payload = st.builds(lambda n, a: json.dumps({"name": n, "arguments": a}), names, arguments)
    broken = payload.map(lambda s: s[: max(1, len(s) // 2)])
    block = st.builds(lambda p: f"<tool_call>{p}</tool_call>", payload | broken | st.text(max_size=30))
    return st.lists(block, min_size=1, max_size=6).map("".join)


def actions(tool_names: Sequence[str] = ("search",), max_size: int = 400) -> st.SearchStrategy[str]:
    """Any string an agent could write: empty, huge, binary-looking, broken JSON,
    several calls, nested or unclosed tags, answers mixed with calls."""
    fragments = st.sampled_from(_TAGS) | st.text(max_size=30) | tool_call_actions(tool_names)
    mixed = st.lists(fragments, max_size=8).map("".join)
    tags = st.builds(
        lambda t, q: f"<{t}>{q}</{t}>", st.sampled_from(["search", "answer", *tool_names]), st.text(max_size=40)
    )
    binary = st.binary(max_size=200).map(lambda b: b.decode("latin-1"))
    huge = st.integers(min_value=10_000, max_value=40_000).map(lambda n: "<tool_call>" + "[" * n)
    return st.one_of(st.text(max_size=max_size), mixed, tags, binary, tool_call_actions(tool_names), huge, st.just(""))

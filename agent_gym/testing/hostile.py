"""Hypothesis strategies of hostile actions: each class once crashed or stalled a parser (reuse them on your envs).

:func:`huge_number_actions`, :func:`deep_json_actions`, :func:`repeated_tag_actions`, :func:`megabyte_actions`,
:func:`mixed_call_actions` and :func:`odd_argument_actions`; :func:`hostile_actions` draws from all of them.
:mod:`agent_gym.testing.strategies` re-exports them beside the strategies that reach the whole MDP.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

try:
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - exercised only without the testing extra
    raise ImportError("agent_gym.testing.hostile needs hypothesis: pip install 'agent-r1-gym[testing]'") from exc

from agent_gym.core.tool import Tool
from agent_gym.testing.arguments import odd_arguments, odd_values

__all__ = [
    "MIB",
    "deep_json_actions",
    "hostile_actions",
    "huge_number_actions",
    "json_values",
    "megabyte_actions",
    "mixed_call_actions",
    "odd_argument_actions",
    "repeated_tag_actions",
    "tool_call_actions",
]

MIB = 2**20
_TAGS = ["<tool_call>", "</tool_call>", "<answer>", "</answer>", "<search>", "</search>", "<think>", "</think>"]


def _call(name: str, arguments: str) -> str:
    """A ``<tool_call>`` block with ``arguments`` inserted verbatim (it may be any text)."""
    return f'<tool_call>{{"name": {json.dumps(name)}, "arguments": {arguments}}}</tool_call>'


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


# ----------------------------------------------------------------------------- hostile classes
def huge_number_actions(
    tool_names: Sequence[str] = ("search",), arg_names: Sequence[str] = ("query",)
) -> st.SearchStrategy[str]:
    """Calls whose arguments hold number literals no parser should choke on.

    Integer literals of 4,301-20,000 digits (past Python's int-string limit),
    long decimals, ``1e999`` (overflows to infinity), ``NaN`` and ``Infinity``;
    as a value, as a double-encoded ``arguments`` string, and as tag text.
    """
    digits = st.integers(4_301, 20_000)
    literal = st.one_of(
        digits.map(lambda n: "9" * n),
        digits.map(lambda n: "-" + "1" * n),
        digits.map(lambda n: "0." + "3" * n),
        digits.map(lambda n: "1" * n + "e5"),
        st.sampled_from(["1e999", "-1e999", "1" + "0" * 400 + "e-999", "NaN", "Infinity", "-Infinity"]),
    )
    name, key = st.sampled_from(list(tool_names)), st.sampled_from(list(arg_names))
    as_value = st.builds(lambda n, k, lit: _call(n, f"{{{json.dumps(k)}: {lit}}}"), name, key, literal)
    as_string = st.builds(lambda n, k, lit: _call(n, json.dumps(f'{{"{k}": {lit}}}')), name, key, literal)
    as_tag = st.builds(lambda n, lit: f"<{n}>{lit}</{n}>", name, literal)
    return st.one_of(as_value, as_string, as_tag)


def _nest(shape: str, depth: int, key: str) -> str:
    """``arguments`` text nested ``depth`` deep in one of several shapes."""
    if shape == "array_value":
        return f'{{"{key}": ' + "[" * depth + "]" * depth + "}"
    if shape == "object":
        return '{"a": ' * depth + "1" + "}" * depth
    if shape == "string":  # double-encoded: the arguments are a JSON string holding deep JSON
        return json.dumps(f'{{"{key}": ' + "[" * depth + "]" * depth + "}")
    if shape == "array":
        return "[" * depth + "]" * depth
    return "[" * depth  # unclosed


def deep_json_actions(
    tool_names: Sequence[str] = ("search",), arg_names: Sequence[str] = ("query",)
) -> st.SearchStrategy[str]:
    """Calls whose arguments nest 33-100,000 deep (around 980-1,000 often: parse, then break the history)."""
    depth = st.one_of(st.integers(33, 100_000), st.sampled_from([33, 64, 500, 979, 980, 990, 999, 1_000, 1_001]))
    shape = st.sampled_from(["array_value", "object", "string", "array", "unclosed"])
    name, key = st.sampled_from(list(tool_names)), st.sampled_from(list(arg_names))
    return st.builds(lambda n, s, d, k: _call(n, _nest(s, d, k)), name, shape, depth, key)


def repeated_tag_actions(tags: Sequence[str] = ()) -> st.SearchStrategy[str]:
    """One tag or tag pattern repeated 1-20,000 times (``"<tool_call>" * 16_000`` once took 28 s)."""
    pieces = [*_TAGS, *tags, "<tool_call>{", "<tool_call><answer>", "<answer></answer>", "<tool_call></tool_call>"]
    return st.builds(lambda p, n: p * n, st.sampled_from(pieces), st.integers(1, 20_000))


def megabyte_actions(tags: Sequence[str] = (), size: int = MIB) -> st.SearchStrategy[str]:
    """``size`` characters (1 MiB by default) of one repeated shape: tags, brackets, quotes, calls, answers."""
    shapes = [
        *_TAGS,
        *tags,
        "a",
        "[",
        "{",
        '{"a": ',
        "\\",
        '"',
        "<answer>x</answer>",
        '<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>',
        "\u2603",
    ]
    return st.sampled_from(shapes).map(lambda s: (s * (size // len(s) + 1))[:size])


def _broken_blocks(tool_names: Sequence[str], arg_names: Sequence[str]) -> st.SearchStrategy[str]:
    name = st.sampled_from(list(tool_names))
    return st.one_of(
        st.just("<tool_call>{oops</tool_call>"),
        st.just('<tool_call>{"arguments": {}}</tool_call>'),
        name.map(lambda n: _call(n, "[1, 2]")),
        name.map(lambda n: _call(n, '"not an object"')),
        name.map(lambda n: _call(n, _nest("array_value", 40, arg_names[0]))),
        name.map(lambda n: _call(n, f'{{"{arg_names[0]}": {"7" * 5000}}}')),
        st.just("<tool_call>"),
    )


def mixed_call_actions(
    tool_names: Sequence[str] = ("search",),
    arg_names: Sequence[str] = ("query",),
    valid: st.SearchStrategy[str] | None = None,
) -> st.SearchStrategy[str]:
    """1-7 calls in one action, each well-formed (``valid``, default simple string calls) or malformed."""
    if valid is None:
        valid = st.builds(
            lambda n, k, v: _call(n, json.dumps({k: v})),
            st.sampled_from(list(tool_names)),
            st.sampled_from(list(arg_names)),
            st.text(max_size=20),
        )
    block = st.one_of(valid, _broken_blocks(tool_names, arg_names))
    return st.lists(block, min_size=1, max_size=7).map("".join)


def odd_argument_actions(
    tool_names: Sequence[str] = ("search",), arg_names: Sequence[str] = ("query",), *, tools: Iterable[Tool] = ()
) -> st.SearchStrategy[str]:
    """Calls whose arguments an agent gets wrong: empty, whitespace-only, missing or of the wrong type.

    By name: calls to ``tool_names`` with no arguments, or with one of ``arg_names`` empty, whitespace-only,
    of another JSON type (a number, ``null``, a list, ...) or misnamed. With ``tools`` (your env's
    :class:`~agent_gym.core.tool.Tool` objects, e.g. ``env.unwrapped.tools.values()``), also every case of
    :func:`agent_gym.testing.arguments.odd_arguments` for each: one argument wrong and the others valid, so
    that an empty or whitespace-only string reaches the tool itself (and any reward term that reads the
    call) even when the tool takes several arguments.
    """
    name, key = st.sampled_from(list(tool_names)), st.sampled_from(list(arg_names))
    value = st.sampled_from(odd_values({"type": "string"}))
    one_odd = st.builds(lambda n, k, v: _call(n, json.dumps({k: v})), name, key, value)
    misnamed = st.builds(lambda n, k: _call(n, json.dumps({f"{k}_": "x"})), name, key)
    by_name = st.one_of(name.map(lambda n: _call(n, "{}")), one_odd, misnamed)
    cases = [_call(t.name, json.dumps(arguments)) for t in tools for _, arguments in odd_arguments(t)]
    return st.sampled_from(cases) | by_name if cases else by_name


def hostile_actions(
    tool_names: Sequence[str] = ("search",), arg_names: Sequence[str] = ("query",), *, tools: Iterable[Tool] = ()
) -> st.SearchStrategy[str]:
    """Any of the hostile classes above; ``tools`` (your env's Tool objects) reach :func:`odd_argument_actions`."""
    tags = [f"<{n}>" for n in tool_names]
    return st.one_of(
        huge_number_actions(tool_names, arg_names),
        deep_json_actions(tool_names, arg_names),
        repeated_tag_actions(tags),
        megabyte_actions(tags),
        mixed_call_actions(tool_names, arg_names),
        odd_argument_actions(tool_names, arg_names, tools=tools),
    )

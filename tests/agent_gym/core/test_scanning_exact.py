"""Scanning edges: number-literal limits on the hooked path, lone surrogates (agent_gym.core.scanning)."""

import pytest

from agent_gym.core.parsing import ToolCallParser
from agent_gym.core.scanning import JsonLimits, decode_json, json_depth


def test_a_number_literal_of_exactly_the_limit_is_accepted_when_the_hooks_run():
    limits = JsonLimits(max_number_length=5)
    # a 3-digit exponent switches the checking number hooks on for the whole text
    assert decode_json("[12345, 1e123]", limits) == ([12345, 1e123], None)
    assert decode_json("[123456]", limits) == (None, "a number literal of 6 characters (the limit is 5)")
    # a long digit run inside a string switches them on too
    assert decode_json('{"s": "123456", "n": 12.34}', limits) == ({"s": "123456", "n": 12.34}, None)


def test_lone_surrogates_are_measured_not_raised():
    text = '["\ud800", [[{"a": "\udfff"}]]]'
    assert json_depth(text) == 4
    call = '<tool_call>{"name": "s", "arguments": {"q": "\ud800", "z": ' + "[" * 40 + "]" * 40 + "}}</tool_call>"
    assert ToolCallParser().parse(call).errors == ("tool call 1: JSON nested more than 32 deep",)


@pytest.mark.parametrize(("text", "depth"), [('\\"[', 1), ('"\\\\"', 0), ('["\\\\", ["\\"["]]', 2), ('"\\\\\\"["', 0)])
def test_escaped_backslashes_before_quotes(text, depth):
    assert json_depth(text) == depth

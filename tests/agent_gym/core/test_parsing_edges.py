"""Parser edges that mutation testing found untested: the smallest call budget, the tags parser's budget and
refusal, non-ASCII text kept readable, ParsedAction's invariants."""

from __future__ import annotations

import json

import pytest

from agent_gym.core.history import ToolCall
from agent_gym.core.parsing import ParsedAction, TagParser, ToolCallParser, make_parser
from agent_gym.core.scanning import JsonLimits, decode_json
from tests.conftest import LookupTool


class NoArgTool(LookupTool):
    name = "now"
    parameters = {"type": "object"}  # no "properties" at all


def test_one_call_per_action_is_a_valid_budget():
    call = '<tool_call>{"name": "lookup", "arguments": {"country": "France"}}</tool_call>'
    parsed = ToolCallParser(max_calls=1).parse(call * 2)
    assert len(parsed.tool_calls) == 1 and parsed.calls_written == 2 and not parsed.well_formed
    tags = TagParser(tags={"lookup": ("lookup", "country")}, max_calls=1)
    assert len(tags.parse("<lookup>France</lookup>").tool_calls) == 1


def test_make_parser_passes_the_budget_and_refuses_tools_without_one_argument():
    parser = make_parser("tags", [LookupTool()], max_calls=2)
    assert isinstance(parser, TagParser) and parser.max_calls == 2
    assert make_parser("tool_call", max_calls=3).max_calls == 3
    with pytest.raises(ValueError, match=r"^action_format='tags' needs at least one tool with exactly one argument$"):
        make_parser("tags", [NoArgTool()])  # a schema without "properties" is no one-argument tool


def test_non_ascii_stays_readable_in_calls_and_instructions():
    parser = ToolCallParser()
    text = parser.format_call("lookup", {"country": "Österreich"})
    assert "Österreich" in text and "\\u" not in text
    assert parser.parse(text).tool_calls[0].arguments == {"country": "Österreich"}

    class Umlaut(LookupTool):
        description = "Schlägt die Hauptstadt nach."

    instructions = parser.instructions([Umlaut(), LookupTool()])
    schemas = instructions.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].split("\n")
    assert schemas == [json.dumps(Umlaut().schema(), ensure_ascii=False), json.dumps(LookupTool().schema())]
    assert "Schlägt" in instructions


def test_parsed_action_invariants():
    calls = (ToolCall("lookup", {"country": "France"}), ToolCall("lookup", {"country": "Peru"}))
    parsed = ParsedAction(raw="x", tool_calls=calls)
    assert parsed.call_positions == (1, 2) and parsed.calls_written == 2  # at least the calls it holds
    assert ParsedAction(raw="x", tool_calls=calls, calls_written=5).calls_written == 5
    with pytest.raises(ValueError, match=r"^call_positions needs one position per tool call$"):
        ParsedAction(raw="x", tool_calls=calls, call_positions=(1,))


def test_the_parsers_json_limits_apply_to_both_decodes():
    limits = JsonLimits(max_length=40, max_depth=2)
    parser = ToolCallParser(json_limits=limits)
    short = '<tool_call>{"name": "lookup", "arguments": {"country": "Peru"}}</tool_call>'
    assert parser.parse(short).errors == ("tool call 1: 52 characters of JSON (the limit is 40)",)
    assert not ToolCallParser(json_limits=JsonLimits(max_length=51)).parse(short).well_formed
    assert ToolCallParser(json_limits=JsonLimits(max_length=52)).parse(short).well_formed  # the limit is inclusive
    nested = '<tool_call>{"name": "lookup", "arguments": "{\\"country\\": [[\\"Peru\\"]]}"}</tool_call>'
    deep = ToolCallParser(json_limits=JsonLimits(max_depth=2))
    parsed = deep.parse(nested)  # arguments as a JSON string: decoded again, under the same limits
    assert parsed.errors and "nested more than 2 deep" in " ".join(parsed.errors)
    assert ToolCallParser().parse(nested).tool_calls[0].arguments == {"country": [["Peru"]]}  # depth 3: fine
    assert decode_json("[1]", JsonLimits(max_length=3)) == ([1], None)
    assert decode_json("[1] ", JsonLimits(max_length=3)) == (None, "4 characters of JSON (the limit is 3)")

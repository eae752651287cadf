"""Parsers: exact errors, call ids, boundaries and the prompt text (issue 16: numbers where they are known).

The instructions are part of every observation an agent trains on, so their text is fixed here: changing it
changes the environment (bump the ids' ``-vN``).
"""

import json

import pytest

from agent_gym.core.history import ToolCall
from agent_gym.core.parsing import ParsedAction, TagParser, ToolCallParser
from tests.conftest import LookupTool

TWO_TAGS = {"search": ("search", "query"), "lookup": ("lookup", "country")}
ANSWER_HINT = "When you know the answer, write it inside <answer></answer> tags, e.g. <answer>Paris</answer>"


def test_tag_instructions_text():
    assert TagParser(tags=TWO_TAGS).instructions([LookupTool()]) == (
        "You may use these actions, each written inside its tags:\n"
        "- <search>query</search>: search\n"  # no such tool given: its name stands in for a description
        "- <lookup>country</lookup>: Look up the capital city of a country.\n"
        f"Results come back in the next message. {ANSWER_HINT}."
    )


def test_tool_call_instructions_text():
    schema = LookupTool().schema()
    assert ToolCallParser().instructions([LookupTool()]) == (
        "You may call tools. Their signatures, as JSON schemas, are:\n"
        f"<tools>\n{json.dumps(schema, ensure_ascii=False)}\n</tools>\n"
        "To call a tool, write a JSON object inside <tool_call></tool_call> tags:\n"
        '<tool_call>\n{"name": <tool-name>, "arguments": <args-json-object>}\n</tool_call>\n'
        f"Tool results come back in the next message. {ANSWER_HINT}, with no tool call in that message."
    )


@pytest.mark.parametrize("parser", [ToolCallParser(), TagParser()])
def test_call_ids_count_from_turn_zero(parser):
    text = parser.format_call("search", {"query": "a"}) + parser.format_call("search", {"query": "b"})
    assert [c.id for c in parser.parse(text).tool_calls] == ["call_0_0", "call_0_1"]
    assert [c.id for c in parser.parse(text, turn=7).tool_calls] == ["call_7_0", "call_7_1"]


@pytest.mark.parametrize("parser", [ToolCallParser(), TagParser()])
def test_a_non_string_action_is_named(parser):
    parsed = parser.parse(12)  # type: ignore[arg-type]
    assert parsed == ParsedAction("<a int, not a str>", errors=("an action must be a str, got int",))


@pytest.mark.parametrize("parser", [ToolCallParser(), TagParser()])
def test_exactly_max_calls_calls_are_well_formed(parser):
    text = "".join(parser.format_call("search", {"query": f"q{i}"}) for i in range(4))
    parsed = parser.parse(text)
    assert parsed.well_formed and len(parsed.tool_calls) == 4 and parsed.refused_positions == ()


@pytest.mark.parametrize(
    ("text", "errors"),
    [
        (
            "<answer>a</answer><search>q</search>",
            ("give either a tool call or a final <answer>, not both (the answer was not taken)",),
        ),
        ("just words", ("no <search>, <lookup> and no <answer> found",)),
        ("<answer>a", ("<answer> is not closed with </answer>",)),  # one error: the action has a problem already
        ("<lookup>Peru", ("<lookup> is not closed with </lookup>",)),
    ],
)
def test_tag_parser_errors_are_exact(text, errors):
    assert TagParser(tags=TWO_TAGS).parse(text).errors == errors


@pytest.mark.parametrize(
    ("text", "errors"),
    [
        ("just words", ("no <tool_call> and no <answer> found",)),
        ("<answer>a", ("<answer> is not closed with </answer>",)),
        ("<tool_call>[1]</tool_call>", ("tool call 1: expected a JSON object with 'name' and 'arguments'",)),
        ('<tool_call>{"name": ""}</tool_call>', ("tool call 1: missing string field 'name'",)),
        ('<tool_call>{"name": "s", "arguments": 1}</tool_call>', ("tool call 1: 'arguments' must be a JSON object",)),
        (
            '<tool_call>{"name": "s", "arguments": "[1"}</tool_call>',
            ("tool call 1: 'arguments' is a string that is not a JSON object: invalid JSON (Expecting ',' delimiter)",),
        ),
    ],
)
def test_tool_call_parser_errors_are_exact(text, errors):
    assert ToolCallParser().parse(text).errors == errors


def test_parameters_stand_in_for_arguments_and_missing_arguments_are_empty():
    parsed = ToolCallParser().parse('<tool_call>{"name": "s", "parameters": {"q": 1}}</tool_call>')
    assert parsed.tool_calls[0].arguments == {"q": 1}
    assert ToolCallParser().parse('<tool_call>{"name": "s"}</tool_call>').tool_calls[0].arguments == {}


def test_format_call_of_an_unmapped_tool_names_it():
    with pytest.raises(KeyError) as caught:
        TagParser().format_call("lookup", {"country": "Peru"})
    assert caught.value.args == ("no tag maps to tool 'lookup'",)


def test_format_call_writes_unicode_as_is():
    assert ToolCallParser().format_call("search", {"query": "日本 café"}) == (
        '<tool_call>\n{"name": "search", "arguments": {"query": "日本 café"}}\n</tool_call>'
    )


@pytest.mark.parametrize(
    ("positions", "written", "ran", "refused"),
    [
        ((), 2, [], [(1, 2)]),  # nothing ran: every call written was refused
        ((1, 3), 3, [(1, 1), (3, 3)], [(2, 2)]),  # the last call written ran: no tail
        ((2, 3), 6, [(2, 3)], [(1, 1), (4, 6)]),
        ((), 0, [], []),
    ],
)
def test_ran_and_refused_ranges(positions, written, ran, refused):
    calls = tuple(ToolCall("s", {}, id=f"call_0_{i}") for i in range(len(positions)))
    parsed = ParsedAction("x", calls, call_positions=positions, calls_written=written)
    assert parsed.ran_ranges() == ran and parsed.refused_ranges() == refused
    assert parsed.refused_positions == tuple(i for a, b in refused for i in range(a, b + 1))

import pytest
from hypothesis import given

from agent_gym.core.parsing import ActionFormat, TagParser, ToolCallParser, make_parser
from agent_gym.testing.strategies import actions
from tests.conftest import LookupTool


def test_tool_call_round_trip():
    p = ToolCallParser()
    text = p.format_call("search", {"query": 'a "quoted" 日本'})
    parsed = p.parse(text, turn=3)
    assert parsed.well_formed and not parsed.is_final
    assert parsed.tool_calls[0].arguments == {"query": 'a "quoted" 日本'}
    assert parsed.tool_calls[0].id == "call_3_0"


def test_answer_and_thinking():
    parsed = ToolCallParser().parse("<think>easy</think> <answer> Paris </answer>")
    assert parsed.is_final and parsed.answer == "Paris"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "no <tool_call>"),
        ("just words", "no <tool_call>"),
        ("<tool_call>{oops</tool_call>", "invalid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', "'name'"),
        ('<tool_call>{"name": "s", "arguments": [1]}</tool_call>', "JSON object"),
        ('<tool_call>{"name": "s", "arguments": {}}', "closed"),
        ("<answer>a</answer><answer>b</answer>", "exactly one"),
        ('<answer>a</answer><tool_call>{"name": "s", "arguments": {}}</tool_call>', "not both"),
        ("<tool_call>" + "[" * 100000 + "</tool_call>", "JSON"),
    ],
)
def test_malformed_actions_are_errors_not_exceptions(text, fragment):
    parsed = ToolCallParser().parse(text)
    assert not parsed.well_formed
    assert any(fragment in e for e in parsed.errors), parsed.errors


def test_double_encoded_arguments_accepted():
    parsed = ToolCallParser().parse('<tool_call>{"name": "s", "arguments": "{\\"q\\": 1}"}</tool_call>')
    assert parsed.tool_calls[0].arguments == {"q": 1}


def test_max_calls():
    p = ToolCallParser(max_calls=2)
    parsed = p.parse("".join(p.format_call("s", {"i": i}) for i in range(3)))
    assert len(parsed.tool_calls) == 2 and not parsed.well_formed


def test_tag_parser():
    p = TagParser()
    parsed = p.parse("<think>x</think><search> Who directed Jaws? </search>")
    assert parsed.tool_calls[0].name == "search"
    assert parsed.tool_calls[0].arguments == {"query": "Who directed Jaws?"}
    assert p.parse(p.format_answer("Spielberg")).answer == "Spielberg"
    assert not p.parse("<search>unclosed").well_formed


def test_make_parser_tags_from_tools():
    p = make_parser("tags", [LookupTool()])
    assert p.format is ActionFormat.TAGS
    assert p.parse("<lookup>Peru</lookup>").tool_calls[0].arguments == {"country": "Peru"}
    assert "<lookup>" in p.instructions([LookupTool()])
    with pytest.raises(ValueError):
        make_parser("xml")


@given(actions(tool_names=["search", "lookup"]))
def test_parsers_never_raise(text):
    for p in (ToolCallParser(), TagParser()):
        parsed = p.parse(text)
        assert parsed.well_formed == (not parsed.errors)
        assert parsed.raw == text

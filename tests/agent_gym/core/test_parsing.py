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


# ------------------------------------------------------------- issue 10: inputs that once escaped step()
HUGE_INT = '<tool_call>{"name": "search", "arguments": {"query": "x", "n": ' + "9" * 4_301 + "}}</tool_call>"
DEEP_STRING = '<tool_call>{"name": "search", "arguments": "' + "[" * 100_000 + '"}</tool_call>'
DEEP_ARRAY = '<tool_call>{"name": "search", "arguments": ' + "[" * 100_000 + "}</tool_call>"
DEEP_STRING_40 = '<tool_call>{"name": "search", "arguments": "' + "[" * 40 + '"}</tool_call>'
DEEP_ARRAY_40 = '<tool_call>{"name": "search", "arguments": ' + "[" * 40 + "]" * 40 + "}</tool_call>"
DEEP_980 = '<tool_call>{"name": "search", "arguments": {"query": "x", "z": ' + "[" * 980 + "]" * 980 + "}}</tool_call>"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (HUGE_INT, "tool call 1: a number literal of 4301 characters (the limit is 100)"),
        (DEEP_STRING, "tool call 1: 100035 characters of JSON (the limit is 65536)"),
        (DEEP_ARRAY, "tool call 1: 100033 characters of JSON (the limit is 65536)"),
        (DEEP_980, "tool call 1: JSON nested more than 32 deep"),
        (DEEP_STRING_40, "tool call 1: 'arguments' is a string that is not a JSON object: JSON nested more than 32"),
        (DEEP_ARRAY_40, "tool call 1: JSON nested more than 32 deep"),
    ],
)
def test_issue_inputs_are_format_errors(text, fragment):
    parsed = ToolCallParser().parse(text)
    assert not parsed.well_formed and parsed.tool_calls == ()
    assert fragment in parsed.errors[0], parsed.errors


def test_nesting_at_the_limit_is_accepted():
    args = '{"query": "x", "z": ' + "[" * 31 + "]" * 31 + "}"  # the call object + arguments + 31 = 33 > 32
    assert not ToolCallParser().parse(f'<tool_call>{{"name": "s", "arguments": {args}}}</tool_call>').well_formed
    args = '{"query": "x", "z": ' + "[" * 30 + "]" * 30 + "}"  # 32: accepted
    assert ToolCallParser().parse(f'<tool_call>{{"name": "s", "arguments": {args}}}</tool_call>').well_formed


def _call(i: int) -> str:
    return ToolCallParser().format_call("search", {"query": f"q{i}"})


def test_mixed_valid_and_malformed_calls_keep_the_valid_ones_with_their_positions():
    parsed = ToolCallParser().parse(_call(0) + "<tool_call>{oops</tool_call>" + _call(2))
    assert [c.arguments["query"] for c in parsed.tool_calls] == ["q0", "q2"]
    assert parsed.call_positions == (1, 3) and parsed.calls_written == 3 and parsed.refused_positions == (2,)
    assert not parsed.well_formed and parsed.errors[0].startswith("tool call 2: invalid JSON")
    assert [c.id for c in parsed.tool_calls] == ["call_0_0", "call_0_1"]


def test_calls_beyond_max_calls_are_refused_unread():
    parsed = ToolCallParser().parse("".join(_call(i) for i in range(4)) + "<tool_call>{oops</tool_call>" + _call(5))
    assert [c.arguments["query"] for c in parsed.tool_calls] == ["q0", "q1", "q2", "q3"]
    assert parsed.refused_positions == (5, 6)
    assert parsed.errors == ("tool calls 5-6: over the limit of 4 calls per action, not read",)


def test_tag_parser_max_calls_and_unclosed_tail():
    p = TagParser()
    parsed = p.parse("".join(f"<search>q{i}</search>" for i in range(5)) + "<search>tail")
    assert [c.arguments["query"] for c in parsed.tool_calls] == ["q0", "q1", "q2", "q3"]
    assert parsed.calls_written == 5 and parsed.refused_positions == (5,)
    assert "<search> is not closed with </search>" in parsed.errors
    assert "tool call 5: over the limit of 4 calls per action, not read" in parsed.errors


def test_tag_parser_runs_the_first_four_calls_across_tags_in_order():
    p = TagParser(tags={"search": ("search", "query"), "lookup": ("lookup", "country")})
    tags = ["lookup", "search", "search", "lookup", "lookup", "search"]
    text = "".join(f"<{t}>{v}</{t}>" for t, v in zip(tags, "abcdef", strict=True))
    parsed = p.parse(text, turn=2)
    assert [(c.name, *c.arguments.values()) for c in parsed.tool_calls] == [
        ("lookup", "a"),
        ("search", "b"),
        ("search", "c"),
        ("lookup", "d"),
    ]
    assert [c.id for c in parsed.tool_calls] == ["call_2_0", "call_2_1", "call_2_2", "call_2_3"]
    assert parsed.calls_written == 6
    assert parsed.errors == ("tool calls 5-6: over the limit of 4 calls per action, not read",)


@pytest.mark.parametrize(
    ("text", "errors"),
    [
        ("<tool_call>" * 16_000, ("every <tool_call> must be closed with </tool_call>",)),
        ("<answer>" * 16_000, ("<answer> is not closed with </answer>",)),
        ("<answer>a</answer>" * 3, ("give exactly one <answer>...</answer>, found 3",)),
    ],
)
def test_repeated_tags_give_one_error_each(text, errors):
    assert ToolCallParser().parse(text).errors == errors


def test_answer_with_a_call_runs_the_call_and_says_the_answer_was_not_taken():
    parsed = ToolCallParser().parse("<answer>a</answer>" + _call(0))
    assert parsed.answer == "a" and not parsed.is_final and len(parsed.tool_calls) == 1
    assert parsed.errors == ("give either tool calls or a final <answer>, not both (the answer was not taken)",)


@pytest.mark.parametrize("bad", [0, -1, True, 2.0])
def test_max_calls_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="max_calls"):
        ToolCallParser(max_calls=bad)
    with pytest.raises(ValueError, match="max_calls"):
        TagParser(max_calls=bad)


def test_a_non_string_action_is_named_not_rendered():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    parsed = ToolCallParser().parse(deep)  # type: ignore[arg-type]
    assert parsed.errors == ("an action must be a str, got list",) and parsed.raw == "<a list, not a str>"

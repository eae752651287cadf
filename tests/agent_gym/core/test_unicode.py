"""Any text an agent writes becomes well-formed Unicode where it enters an episode (agent_gym.core.parsing).

Valid JSON may spell a lone UTF-16 surrogate (``"\\ud800"``, six ASCII characters) that ``json.loads`` turns
into a ``str`` no UTF-8 encoder accepts; the history, ``info``, observations and files must still encode.
"""

from __future__ import annotations

import json

import pytest

from agent_gym.core.history import ToolCall
from agent_gym.core.parsing import ParsedAction, TagParser, ToolCallParser
from agent_gym.core.scanning import well_formed_text, well_formed_value
from tests.conftest import LookupEnv

LONE = "\ud800"
BAD_CALL = '<tool_call>{"name": "lookup", "arguments": {"country": "Fr\\ud800ance"}}</tool_call>'
"""A call whose JSON is valid and decodes to a lone surrogate (the escape, not the code point, is in the text)."""


def encodes(value: object) -> bool:
    """``value`` as JSON (non-ASCII kept, as every writer here does) is valid UTF-8."""
    json.dumps(value, ensure_ascii=False).encode("utf-8")
    return True


def test_lone_surrogates_become_the_replacement_character_and_pairs_their_character():
    assert well_formed_text("a\ud800b\udc00") == "a\ufffdb\ufffd"
    assert well_formed_text("\ud83d\ude00 \ude00\ud83d") == "\U0001f600 \ufffd\ufffd"  # a pair, then a reversed one
    clean = {"q": ["x", ("y",)]}
    assert well_formed_value(clean) is clean  # nothing to replace: the same object
    assert well_formed_value({LONE: [1, ("z\udfff",)], "n": None}) == {"\ufffd": [1, ("z\ufffd",)], "n": None}


def test_the_tool_call_parser_replaces_surrogate_escapes_in_arguments_and_names():
    text = (
        '<tool_call>{"name": "s\\udc00", "arguments": {"q\\ud800": ["\\ud83d\\ude00", "\\ud83d", {"k": "\\udfff"}]}}'
        "</tool_call>"
    )
    (call,) = ToolCallParser().parse(text).tool_calls
    assert call.name == "s\ufffd" and call.arguments == {"q\ufffd": ["\U0001f600", "\ufffd", {"k": "\ufffd"}]}
    doubled = '<tool_call>{"name": "s", "arguments": "{\\"q\\": \\"\\\\ud800\\"}"}</tool_call>'  # arguments as a string
    assert ToolCallParser().parse(doubled).tool_calls[0].arguments == {"q": "\ufffd"}


def test_every_string_of_a_parsed_action_is_well_formed_whoever_built_it():
    tags = TagParser(tags={"lookup": ("lookup", "country")}).parse(f"<lookup>Fr{LONE}</lookup>")
    assert tags.raw == "<lookup>Fr\ufffd</lookup>" and tags.tool_calls[0].arguments == {"country": "Fr\ufffd"}
    answer = ToolCallParser().parse(f"<answer>{LONE}Paris</answer>")
    assert answer.answer == "\ufffdParis" and answer.is_final
    direct = ParsedAction(
        raw=LONE, tool_calls=(ToolCall("a" + LONE, {"k": [LONE]}, id=LONE),), answer=LONE, errors=(LONE,)
    )
    (call,) = direct.tool_calls
    assert (direct.raw, direct.answer, direct.errors) == ("\ufffd", "\ufffd", ("\ufffd",))
    assert (call.name, call.arguments, call.id) == ("a\ufffd", {"k": ["\ufffd"]}, "\ufffd")


@pytest.mark.parametrize(
    "context", [{}, {"context": "window", "context_turns": 1}, {"context": "fold", "context_turns": 1}], ids=str
)
def test_a_surrogate_escape_in_a_call_leaves_every_observation_and_info_encodable(context):
    env = LookupEnv(**context)
    env.reset(seed=0, options={"task_index": 0})
    steps = [env.step(BAD_CALL), env.step(BAD_CALL), env.step(f"<answer>{LONE}</answer>")]
    for obs, _reward, _terminated, _truncated, info in steps:
        assert obs.encode("utf-8") and encodes(info)  # messages, history, new_messages, tool_calls
    call_info = steps[0][4]["tool_calls"][0]
    assert call_info["arguments"] == {"country": "Fr\ufffdance"}  # the tool got the replaced text too
    assert call_info["content"] == "Error: no country named 'Fr\ufffdance'"
    assert steps[2][2] and env.state.answer == "\ufffd"
    if context.get("context") == "fold":  # the fold note digests the call: the tokenizer gets well-formed text
        assert 'turn 1: lookup(country="Fr\ufffdance")' in steps[2][4]["messages"][1]["content"]

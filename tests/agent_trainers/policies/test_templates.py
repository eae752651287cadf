"""The shipped ChatML tool template renders every message and is prefix-stable."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from agent_trainers.policies import tool_chat_template
from agent_trainers.rollout import check_prefix_stable

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "d", "parameters": {"type": "object"}}}]
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)


@st.composite
def message(draw):
    role = draw(st.sampled_from(["user", "assistant", "tool"]))
    msg = {"role": role, "content": draw(text)}
    if role == "assistant" and draw(st.booleans()):
        msg["tool_calls"] = [{"type": "function", "function": {"name": "lookup", "arguments": {"country": draw(text)}}}]
    if role == "tool":
        msg |= {"tool_call_id": "call_1_0", "name": "lookup"}
    return msg


conversations = st.lists(message(), max_size=6).map(lambda ms: [{"role": "system", "content": "Be brief."}, *ms])


def render(tok, messages, **kw):
    return tok.apply_chat_template(messages, tokenize=False, **kw)


def test_template_file_is_what_the_tokenizer_uses(smollm2_tokenizer):
    assert smollm2_tokenizer.chat_template == tool_chat_template()


def test_renders_each_role_in_chatml(smollm2_tokenizer):
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "<tool_call>x</tool_call>"},
        {"role": "tool", "content": "R", "tool_call_id": "c", "name": "lookup"},
    ]
    out = render(smollm2_tokenizer, msgs, add_generation_prompt=True)
    assert out == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>x</tool_call><|im_end|>\n<|im_start|>tool\nR<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_tools_go_into_the_system_prompt(smollm2_tokenizer):
    out = render(smollm2_tokenizer, [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}], tools=TOOLS)
    system = out.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nS\n\n")
    assert json.dumps(TOOLS[0]) in system
    no_system = render(smollm2_tokenizer, [{"role": "user", "content": "Q"}], tools=TOOLS)
    assert no_system.startswith("<|im_start|>system\n") and json.dumps(TOOLS[0]) in no_system


def test_assistant_tool_calls_render_only_without_content(smollm2_tokenizer):
    call = {"type": "function", "function": {"name": "lookup", "arguments": '{"country": "Peru"}'}}
    empty = render(smollm2_tokenizer, [{"role": "assistant", "content": None, "tool_calls": [call]}])
    expected_call = '<tool_call>\n{"name": "lookup", "arguments": {"country": "Peru"}}\n</tool_call>'
    assert empty == f"<|im_start|>assistant\n{expected_call}<|im_end|>\n"
    verbatim = render(smollm2_tokenizer, [{"role": "assistant", "content": " raw  text ", "tool_calls": [call]}])
    assert verbatim == "<|im_start|>assistant\n raw  text <|im_end|>\n"


@given(conversations, st.booleans())
def test_every_message_is_rendered_and_prefix_stable(smollm2_tokenizer, messages, with_tools):
    tools = TOOLS if with_tools else None
    out = render(smollm2_tokenizer, messages, tools=tools)
    for m in messages:
        body = m["content"] if m["content"] or not m.get("tool_calls") else "<tool_call>"
        assert f"<|im_start|>{m['role']}\n{body}" in out
    assert out.count("<|im_start|>") == len(messages) + (0 if messages[0]["role"] == "system" or not tools else 1)
    check_prefix_stable(smollm2_tokenizer, messages, tools)

"""The incremental tokenizer: same ids as one whole render, assistant masks, drift detection, no re-rendering."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_trainers.policies import ScriptedPolicy
from agent_trainers.rollout import ChatTokenizer, TemplateDriftError, check_trajectory, rollout, tokenize_chat
from tests.agent_trainers.conftest import LOOKUP_ID

# text the tokenizer round-trips (unassigned code points decode to <|endoftext|> bytes)
text = st.text(
    st.characters(max_codepoint=0x2FFF, blacklist_categories=("Cs", "Cn", "Co", "Cc"), blacklist_characters="<>"),
    max_size=25,
)


@st.composite
def chats(draw):
    """system, user, then 1-4 assistant turns each followed by 0-2 tool/user messages. A reply does not start with
    whitespace: one that does is tokenised as generated, apart from the generation prompt's newline (the test
    below), where a whole render merges the two."""
    msgs = [{"role": "system", "content": draw(text)}, {"role": "user", "content": draw(text)}]
    for _ in range(draw(st.integers(1, 4))):
        msgs.append({"role": "assistant", "content": draw(text.filter(lambda t: not t[:1].isspace()))})
        for _ in range(draw(st.integers(0, 2))):
            msgs.append({"role": draw(st.sampled_from(["tool", "user"])), "content": draw(text)})
    return msgs


@given(msgs=chats())
def test_incremental_ids_equal_one_whole_render(smollm2_tokenizer, msgs):
    tok = smollm2_tokenizer
    row = tokenize_chat(ChatTokenizer(tok), msgs)
    whole = tok.apply_chat_template(msgs, tokenize=True, return_dict=True)["input_ids"]
    assert row.input_ids == whole
    taught = [i for i, m in zip(row.input_ids, row.assistant_masks, strict=True) if m]
    expected = []
    for m in msgs:
        if m["role"] == "assistant":
            expected += tok(m["content"], add_special_tokens=False)["input_ids"] + [
                tok.convert_tokens_to_ids("<|im_end|>")
            ]
    assert taught == expected


def test_a_reply_that_starts_with_a_space_keeps_the_generation_prompts_newline(smollm2_tokenizer):
    r"""The model saw the prompt's ``\n`` (198) and wrote `` `` (216): those are the rollout's ids; a whole render of
    the same messages tokenises ``"\n "`` as one token (3805), which no model generated."""
    tok = smollm2_tokenizer
    msgs = [{"role": "system", "content": ""}, {"role": "user", "content": ""}, {"role": "assistant", "content": " "}]
    row = tokenize_chat(ChatTokenizer(tok), msgs)
    whole = tok.apply_chat_template(msgs, tokenize=True, return_dict=True)["input_ids"]
    assert whole[13:] == [3805, 2, 198]
    assert row.input_ids == [*whole[:13], 198, 216, 2, 198]
    assert [i for i, m in zip(row.input_ids, row.assistant_masks, strict=True) if m] == [216, 2]


def test_env_text_closes_the_turn_only_when_the_model_did_not(smollm2_tokenizer):
    chat = ChatTokenizer(smollm2_tokenizer)
    tool = [{"role": "tool", "content": "R"}]
    assert chat.env_text("x", "x", tool, generation_prompt=True) == (
        "<|im_end|>\n<|im_start|>tool\nR<|im_end|>\n<|im_start|>assistant\n"
    )
    assert chat.env_text("x<|im_end|>", "x", tool, generation_prompt=False) == "\n<|im_start|>tool\nR<|im_end|>\n"
    assert chat.split_turn(chat.encode("x<|im_end|>")) == ("x", "x<|im_end|>")


def test_context_dependent_template_is_refused(smollm2_tokenizer):
    tok = copy.deepcopy(smollm2_tokenizer)
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ loop.index }} {{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(TemplateDriftError, match="not context-free"):
        ChatTokenizer(tok)
    ChatTokenizer(tok, check=False)  # the checker builds one to re-render whole chats


def test_a_template_that_rewrites_the_model_turn_is_refused(smollm2_tokenizer):
    tok = copy.deepcopy(smollm2_tokenizer)
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    chat = ChatTokenizer(tok)  # context-free on the sample chat ...
    with pytest.raises(TemplateDriftError, match="does not render the assistant turn as the model wrote it"):
        chat.env_text(" padded ", " padded ", [], generation_prompt=False)  # ... but trims what the model wrote


def test_the_engine_never_re_renders_the_history(smollm2_tokenizer, monkeypatch):
    sizes = []
    render = ChatTokenizer.render

    def spy(self, messages, **kw):
        sizes.append(len(messages))
        return render(self, messages, **kw)

    monkeypatch.setattr(ChatTokenizer, "render", spy)
    call = '<tool_call>\n{"name": "lookup", "arguments": {"country": "Peru"}}\n</tool_call>'
    script = [call, "no tags here", call, call, "<answer>Lima</answer>"]
    (traj,) = rollout(ScriptedPolicy(smollm2_tokenizer, script), LOOKUP_ID, task_indices=[3])
    monkeypatch.undo()
    assert len(traj.turns) == 4 and len(traj.messages) >= 9  # the history grew ...
    assert max(sizes) <= 5  # ... but no render ever saw more than the anchor, one turn and its env messages
    check_trajectory(traj, smollm2_tokenizer)


def test_tool_schemas_and_exact_mask_values(smollm2_tokenizer):
    tok = smollm2_tokenizer
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A"},
        {"role": "tool", "content": "R"},
        {"role": "assistant", "content": "B"},
    ]
    row = tokenize_chat(ChatTokenizer(tok), msgs, tools)
    whole = tok.apply_chat_template(msgs, tools=tools, tokenize=True, return_dict=True)["input_ids"]
    assert row.input_ids == whole and len(whole) > len(tokenize_chat(ChatTokenizer(tok), msgs).input_ids)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    a, b = tok("A", add_special_tokens=False)["input_ids"], tok("B", add_special_tokens=False)["input_ids"]
    taught = [i for i, m in enumerate(row.assistant_masks) if m]
    first, second = taught[0], taught[len(a) + 1]  # two runs of model ids: content + <|im_end|>
    mask = [0] * len(row.input_ids)
    mask[first : first + len(a) + 1] = [1] * (len(a) + 1)
    mask[second : second + len(b) + 1] = [1] * (len(b) + 1)
    assert row.assistant_masks == mask and second > first + len(a) + 1  # 1 and 0 exactly, env ids between
    assert row.input_ids[first : first + len(a) + 1] == [*a, end]
    assert row.input_ids[second : second + len(b) + 1] == [*b, end]
    with pytest.raises(ValueError, match="the chat has no assistant message to learn from"):
        tokenize_chat(ChatTokenizer(tok), msgs[:2])

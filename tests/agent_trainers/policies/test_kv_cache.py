"""KV-cache reuse across turns: token-exact with re-prefilling, per-session bookkeeping, freeing, fallback."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import DynamicCache, MistralConfig, MistralForCausalLM

from agent_trainers.policies import SamplingParams, SessionPolicy, TransformersPolicy, load_model
from agent_trainers.policies.kv_cache import EpisodeKVCache, GrowingLayer, supports_kv_reuse
from agent_trainers.rollout import RolloutConfig, check_trajectory, rollout
from tests.agent_trainers.conftest import UNEVEN_ID

GREEDY = SamplingParams(max_new_tokens=6, temperature=0.0)


def chat_ids(tok, text: str) -> list[int]:
    rendered = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    return tok(rendered, add_special_tokens=False)["input_ids"]


def env_ids(tok, text: str) -> list[int]:
    return tok(f"<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)[
        "input_ids"
    ]


@pytest.fixture(scope="module")
def tiny64(tiny_model):
    """The tiny model in float64: cached and plain decoding then agree far below 1e-5."""
    model, tok = tiny_model
    return copy.deepcopy(model).double(), tok


def assert_same(cached, plain, atol):
    for c, p in zip(cached, plain, strict=True):
        assert c.token_ids == p.token_ids
        assert c.finish_reason == p.finish_reason
        assert max((abs(a - b) for a, b in zip(c.logprobs, p.logprobs, strict=True)), default=0.0) <= atol


def test_sessions_over_turns_match_plain_decoding(one_thread, tiny64):
    """Four episodes of different lengths, batches of 3, env text of different lengths, one episode ending."""
    model, tok = tiny64
    cached = TransformersPolicy(model, tok, batch_size=3)
    plain = TransformersPolicy(model, tok, batch_size=3, reuse_kv_cache=False)
    prompts = [chat_ids(tok, q) for q in ("hi", "what is the capital of a long named country?", "hi", "x y z")]
    keys = ["a", "b", "c", "d"]
    for turn in range(3):
        got = cached.generate(prompts, GREEDY, sessions=keys)
        assert_same(got, plain.generate(prompts, GREEDY), atol=1e-9)
        assert set(cached._kv.entries) == set(keys)
        for key, prompt, gen in zip(keys, prompts, got, strict=True):  # the entry holds all but the last token
            assert cached._kv.entries[key].tokens == prompt + gen.token_ids[:-1]
        pairs = enumerate(zip(prompts, got, strict=True))
        prompts = [p + g.token_ids + env_ids(tok, "ok " * (turn + k)) for k, (p, g) in pairs]
        if turn == 0:
            cached.end_sessions(["d"])
            keys, prompts = keys[:3], prompts[:3]
    stats = cached.cache_stats
    # turn 0: "a" computes its 10 prompt ids but the last, "c" shares them; turns 1-2 reuse every cached id
    assert stats.shared == len(chat_ids(tok, "hi")) - 1
    assert stats.reused > stats.prefilled > 0


def test_a_diverging_prompt_reuses_only_the_common_prefix(one_thread, tiny64):
    model, tok = tiny64
    cached = TransformersPolicy(model, tok)
    first = chat_ids(tok, "what is the capital of France?")
    gen = cached.generate([first], GREEDY, sessions=[0])[0]
    other = first[:5] + chat_ids(tok, "something else entirely")  # shares exactly 5 ids with the entry
    before = cached.cache_stats.reused
    got = cached.generate([other], GREEDY, sessions=[0])
    assert cached.cache_stats.reused - before == 5
    assert cached._kv.entries[0].tokens == other + got[0].token_ids[:-1]
    assert_same(got, TransformersPolicy(model, tok, reuse_kv_cache=False).generate([other], GREEDY), atol=1e-9)
    assert gen.token_ids  # the first call generated


def test_kept_keys_and_values_equal_a_fresh_forward(one_thread, tiny64):
    """Each session's cut-out cache equals the cache of one forward over its tokens (catches off-by-one cuts)."""
    model, tok = tiny64
    policy = TransformersPolicy(model, tok)
    prompts = [chat_ids(tok, "a short one"), chat_ids(tok, "a noticeably longer prompt than the other")]
    policy.generate(prompts, SamplingParams(max_new_tokens=5, temperature=0.0), sessions=[0, 1])
    for key in (0, 1):
        entry = policy._kv.entries[key]
        fresh = DynamicCache()
        with torch.no_grad():
            model(input_ids=torch.tensor([entry.tokens]), past_key_values=fresh, use_cache=True)
        for (k, v), layer in zip(entry.layers, fresh.layers, strict=True):
            assert k.shape == layer.keys.shape and torch.allclose(k, layer.keys, atol=1e-9)
            assert torch.allclose(v, layer.values, atol=1e-9)


def test_stack_left_pads_each_entry_to_the_batch_width(tiny64):
    model, tok = tiny64
    kv = EpisodeKVCache(model)
    kv.prepare(["s", "l"], [[5, 6, 7], [1, 2, 3, 4, 5, 6]])
    assert kv.entries["s"].tokens == [5, 6] and kv.entries["l"].tokens == [1, 2, 3, 4, 5]
    cache = kv.stack(["s", "l"], width=6)
    keys = cache.layers[0].keys
    assert keys.shape[0] == 2 and keys.shape[2] == 5
    assert torch.equal(keys[0, :, :3], torch.zeros_like(keys[0, :, :3]))  # 3 padded slots, then "s"'s 2 ids
    assert torch.equal(keys[0, :, 3:], kv.entries["s"].layers[0][0][0])
    assert torch.equal(keys[1], kv.entries["l"].layers[0][0][0])
    # with room for 3 more tokens the layer's buffer holds 8 positions; its keys still show the 5 filled ones
    roomy = kv.stack(["s", "l"], width=6, room=3).layers[0]
    assert isinstance(roomy, GrowingLayer) and roomy.keys.shape[2] == 5 and roomy._k.shape[2] == 8
    assert torch.equal(roomy.keys, keys)


def test_growing_layer_appends_in_place_like_a_dynamic_layer_and_copies_past_its_room():
    g = torch.Generator().manual_seed(0)
    start, steps = torch.randn(2, 3, 4, 8, generator=g), [torch.randn(2, 3, 1, 8, generator=g) for _ in range(3)]
    buffer = torch.zeros(2, 3, 6, 8)
    buffer[:, :, :4] = start
    growing, plain = GrowingLayer(buffer, buffer.clone(), 4), DynamicCache(ddp_cache_data=[(start, start)]).layers[0]
    for i, step in enumerate(steps):
        keys, _ = growing.update(step, step)
        want, _ = plain.update(step, step)
        assert torch.equal(keys, want) and growing.get_seq_length() == 5 + i
        # the first two appends fit in the buffer (written in place); the third (length 7 > 6) is a copy
        assert (keys.data_ptr() == buffer.data_ptr()) == (i < 2)


def test_fp32_cached_and_plain_greedy_agree(one_thread, tiny_model):
    model, tok = tiny_model
    prompts = [chat_ids(tok, "hello"), chat_ids(tok, "a longer question about capitals")]
    cached = TransformersPolicy(model, tok).generate(prompts, GREEDY, sessions=[0, 1])
    assert_same(cached, TransformersPolicy(model, tok, reuse_kv_cache=False).generate(prompts, GREEDY), atol=1e-5)


class LiveCheckingPolicy(TransformersPolicy):
    """Asserts at every call that the cache holds no finished episode (the engine's keys are its episodes)."""

    calls_seen = 0

    def generate(self, prompts, params, *, sessions=None):
        assert sessions is not None and all(not ep.done for ep in sessions)
        assert all(not ep.done for ep in self._kv.entries)
        self.calls_seen += 1
        return super().generate(prompts, params, sessions=sessions)


def test_engine_rollout_with_cache_equals_without_and_frees_ended_episodes(one_thread, tiny64):
    model, tok = tiny64
    cfg = RolloutConfig(max_new_tokens_per_turn=8, max_total_tokens=600, temperature=0.0, max_turns=4)
    policy = LiveCheckingPolicy(model, tok, batch_size=3)
    assert isinstance(policy, SessionPolicy)
    cached = rollout(policy, UNEVEN_ID, task_indices=[2, 0, 1], group_size=2, config=cfg)
    plain = rollout(TransformersPolicy(model, tok, reuse_kv_cache=False), UNEVEN_ID, task_indices=[2, 0, 1],
                    group_size=2, config=cfg)  # fmt: skip
    assert len(policy._kv) == 0 and policy.calls_seen == 3
    assert [len(t.turns) for t in cached] == [3, 3, 1, 1, 2, 2]  # episodes ended at different turns
    for c, p in zip(cached, plain, strict=True):
        assert c.completion_ids == p.completion_ids and c.loss_mask == p.loss_mask
        assert c.logprobs == pytest.approx(p.logprobs, abs=1e-9)
        check_trajectory(c, tok)
    assert policy.cache_stats.reused > policy.cache_stats.prefilled


def test_unsupported_cache_layout_falls_back_with_a_warning(one_thread, smollm2_tokenizer):
    tok = smollm2_tokenizer
    config = MistralConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2, num_key_value_heads=1, sliding_window=4)  # fmt: skip
    model = MistralForCausalLM(config).eval()
    assert not supports_kv_reuse(model)
    with pytest.warns(UserWarning, match="not supported for reuse"):
        policy = TransformersPolicy(model, tok)
    assert not policy.reuses_kv_cache and policy.cache_stats is None
    gens = policy.generate([chat_ids(tok, "hi")], GREEDY, sessions=[0])
    assert len(gens[0].token_ids) == 6


def test_session_count_must_match_prompts(tiny_model):
    with pytest.raises(ValueError, match="got 1 sessions for 2 prompts"):
        TransformersPolicy(*tiny_model).generate([[1], [2]], GREEDY, sessions=[0])


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_smollm2_multi_turn_rollout_is_token_exact_with_cache(one_thread):
    """SmolLM2 in float64, 4 episodes x 3 turns, greedy: identical ids, log-probs within 1e-5.

    (In float32 both paths differ by up to ~1e-5 from batching alone: plain decoding of the same prompts
    alone vs in a batch of 4 differs by up to 2e-5; ``benchmarks/rollout.py --cache-check`` reports float32.)
    """
    model, tok = load_model("smollm2", device="cpu")
    model = model.double()
    cfg = RolloutConfig(max_new_tokens_per_turn=16, max_total_tokens=2048, temperature=0.0, max_turns=3)
    runs = []
    for reuse in (True, False):
        policy = TransformersPolicy(model, tok, reuse_kv_cache=reuse)
        runs.append(rollout(policy, "AgentR1/HotpotQA-v0", task_indices=[0, 1], group_size=2, config=cfg))
    assert max(len(t.turns) for t in runs[0]) >= 2
    for c, p in zip(*runs, strict=True):
        assert c.completion_ids == p.completion_ids
        assert c.logprobs == pytest.approx(p.logprobs, abs=1e-5)
        check_trajectory(c, tok)


def test_other_backends_are_not_session_policies(smollm2_tokenizer):
    """vLLM finds shared prefixes itself; only TransformersPolicy gets session keys from the engine."""
    from agent_trainers.policies import OpenAIPolicy, ScriptedPolicy, VLLMPolicy

    assert not isinstance(ScriptedPolicy(smollm2_tokenizer, ["x"]), SessionPolicy)
    assert not any(hasattr(cls, "end_sessions") for cls in (VLLMPolicy, OpenAIPolicy, ScriptedPolicy))
    assert hasattr(TransformersPolicy, "end_sessions")


def test_new_episodes_share_the_prefix_another_one_computed(one_thread, tiny64):
    """Distinct prompts with a common system prompt: the first is prefilled whole, the others from its shared
    prefix on; the generations equal plain decoding."""
    model, tok = tiny64
    system = "You may call tools. " * 6

    def prompt(question: str) -> list[int]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tok(rendered, add_special_tokens=False)["input_ids"]

    prompts = [prompt(q) for q in ("capital of France?", "capital of Peru?", "two plus two")]

    def lcp(a, b):
        return next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)

    second, third = lcp(prompts[0], prompts[1]), max(lcp(prompts[0], prompts[2]), lcp(prompts[1], prompts[2]))
    assert second > third >= 30  # the system prompt, and "capital of" for the second
    cached = TransformersPolicy(model, tok, batch_size=3)
    got = cached.generate(prompts, GREEDY, sessions=["a", "b", "c"])
    assert_same(got, TransformersPolicy(model, tok, reuse_kv_cache=False).generate(prompts, GREEDY), atol=1e-9)
    stats = cached.cache_stats
    assert stats.shared == second + third and stats.reused == 0
    assert stats.prefilled == sum(len(p) - 1 for p in prompts) - second - third

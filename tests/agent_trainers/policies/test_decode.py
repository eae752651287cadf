"""The decode loop: its sampler, its argmax, its stop check, and exactness against ``model.generate``."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_trainers.policies import SamplingParams, TransformersPolicy
from agent_trainers.policies.decode import BLOCK, StopStrings, decode, first_argmax, sample_from
from agent_trainers.policies.sampling import cut_at_stop, stop_window


def chat_ids(tok, text: str) -> list[int]:
    rendered = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    return tok(rendered, add_special_tokens=False)["input_ids"]


# ------------------------------------------------------------------ sampler
def test_the_sampler_draws_each_token_at_its_probability_and_never_one_without_mass():
    """20,000 rows of one 600-token distribution (three blocks: mass in the first, the middle of the second, and the
    last token): the frequencies are the probabilities to within 0.015, a token of mass 0 never comes."""
    probs = torch.zeros(600)
    probs[[3, 300, 599]] = torch.tensor([0.2, 0.5, 0.3])
    torch.manual_seed(0)
    drawn = sample_from(probs.expand(20_000, -1).contiguous() * 7.0)  # rows need not sum to 1
    counts = torch.bincount(drawn, minlength=600).float() / 20_000
    assert set(drawn.unique().tolist()) == {3, 300, 599}
    assert counts[[3, 300, 599]].tolist() == pytest.approx([0.2, 0.5, 0.3], abs=0.015)


def test_a_uniform_number_at_the_rows_end_still_draws_a_token_with_mass(monkeypatch):
    """``u`` rounded onto the row's total lands past its last block: the token is the last one with mass."""
    probs = torch.zeros(2, 2 * BLOCK + 10)
    probs[0, 5] = 1.0
    probs[1, [7, BLOCK + 1]] = 0.5
    monkeypatch.setattr(torch, "rand", lambda shape, **kw: torch.ones(shape, dtype=kw.get("dtype")))
    assert sample_from(probs).tolist() == [5, BLOCK + 1]


def test_one_uniform_number_per_row_sets_the_token():
    """Inverse CDF by hand: u = 0.25, 0.5, 0.95 of [0.2, 0.3, 0.5] are tokens 1, 1... and 2 (right-closed bins)."""
    probs = torch.tensor([[0.2, 0.3, 0.5]] * 4)
    fixed = torch.tensor([[0.1], [0.25], [0.5], [0.95]])
    real = torch.rand
    try:
        torch.rand = lambda shape, **kw: fixed.to(kw.get("dtype"))
        assert sample_from(probs).tolist() == [0, 1, 2, 2]
    finally:
        torch.rand = real


@given(st.lists(st.integers(-3, 3), min_size=1, max_size=3 * BLOCK + 5), st.integers(1, 3))
@settings(max_examples=60, deadline=None)
def test_the_block_argmax_is_torch_argmax_ties_included(values, rows):
    x = torch.tensor([values] * rows, dtype=torch.float32)
    x[0] = x[0].flip(0)
    assert first_argmax(x).tolist() == x.argmax(dim=-1).tolist()


# --------------------------------------------------------------- stop check
PIECES = ["</tool_call>", "</", "tool", "_call", ">", "é", "日本", " a", "\n", "ok"]


@given(st.lists(st.sampled_from(PIECES), max_size=12))
@settings(max_examples=80, deadline=None)
def test_the_stop_check_ends_a_row_where_a_decode_of_every_tail_ends_it(smollm2_tokenizer, pieces):
    """The step where StopStrings (which decodes only rows whose new token can end a stop string) first marks a row
    is the step where decoding its tail at every step first shows a stop string (None: neither ever does)."""
    tok = smollm2_tokenizer
    stop = ("</tool_call>", "</answer>")
    check = StopStrings(tok, stop)
    ids = tok("".join(pieces), add_special_tokens=False)["input_ids"]
    window = stop_window(stop)
    decoded = checked = None
    for t in range(1, len(ids) + 1):
        tail = tok.decode(ids[max(0, t - window) : t], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if decoded is None and any(s in tail for s in stop):
            decoded = t
        if checked is None and bool(check(torch.tensor([ids[:t]]), torch.tensor([True]))[0]):
            checked = t
    assert checked == decoded, (ids, checked, decoded)
    ends = {tok.convert_tokens_to_ids("<|im_end|>")}
    for length in range(len(ids) + 1):  # the end of a finished generation, as cut_at_stop finds it
        with_end = ids[:length] + list(ends) + ids[length:]
        assert check.cut(with_end, ends) == cut_at_stop(with_end, tok, stop, ends)


# -------------------------------------------------- exactness with generate
@pytest.mark.parametrize("reuse", [False, True])
def test_greedy_tokens_and_logprobs_are_those_of_model_generate(one_thread, tiny_model, reuse):
    """Three turns of two sessions, a stop string: the loop's tokens equal ``model.generate``'s and its log-probs
    agree to float32 rounding (the loop takes them as log of its softmax, generate's recorder from log_softmax)."""
    model, tok = tiny_model
    params = SamplingParams(max_new_tokens=12, temperature=0.0, stop=(".", "</tool_call>"))
    runs = {}
    for decoder in ("loop", "generate"):
        policy = TransformersPolicy(model, tok, seed=1, reuse_kv_cache=reuse, decoder=decoder)
        prompts = [chat_ids(tok, "What is the capital of France?"), chat_ids(tok, "hi")]
        turns = []
        for turn in range(3):
            gens = policy.generate(prompts, params, sessions=["a", "b"])
            turns.append(gens)
            env = chat_ids(tok, f"observation {turn}")[1:]
            prompts = [p + g.token_ids + env for p, g in zip(prompts, gens, strict=True)]
        runs[decoder] = turns
    for loop_turn, gen_turn in zip(runs["loop"], runs["generate"], strict=True):
        for a, b in zip(loop_turn, gen_turn, strict=True):
            assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_sampling_reaches_past_the_models_default_top_50(one_thread, tiny_model):
    """The random tiny model is nearly uniform over 49k tokens: sampled at T=1, most tokens rank far past 50.
    ``model.generate`` used to apply the model's default ``top_k=50`` (never asked for), so no token ranked
    past 50 while the recorded log-probs were the full softmax's."""
    model, tok = tiny_model
    prompt = chat_ids(tok, "hello")
    for decoder in ("loop", "generate"):
        (gen,) = TransformersPolicy(model, tok, seed=0, decoder=decoder).generate(
            [prompt], SamplingParams(max_new_tokens=8, temperature=1.0)
        )
        with torch.no_grad():
            logits = model(torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1 : -1]
        ranks = [int((row > row[t]).sum()) for row, t in zip(logits, gen.token_ids, strict=True)]
        assert max(ranks) > 50, (decoder, ranks)


def test_an_unknown_decoder_is_refused(tiny_model):
    with pytest.raises(ValueError, match="decoder must be one of"):
        TransformersPolicy(*tiny_model, decoder="vllm")


def test_the_loop_stops_when_every_row_has_ended(one_thread, tiny_model):
    """End ids are the tokens each row draws first: one step, not ``max_new_tokens``; a row that ended is fed the
    pad id while the other runs on as it would alone (it draws the same tokens: every row takes its uniform number
    at every step)."""
    model, tok = tiny_model
    prompts = [chat_ids(tok, "hi"), chat_ids(tok, "what is 2 + 2?")]
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = (torch.arange(width) >= torch.tensor([[width - len(p)] for p in prompts])).long()
    params = SamplingParams(max_new_tokens=10, temperature=1.0)

    def run(end_ids, pad_id=0):
        torch.manual_seed(0)
        return decode(model, ids, mask, params, end_ids=end_ids, pad_id=pad_id)[0]

    free = run({-1})
    assert free.shape == (2, 10)
    assert run(set(free[:, 0].tolist())).tolist() == free[:, :1].tolist()
    row0, row1 = free.tolist()
    s = next(i for i, t in enumerate(row0) if t not in row1 and t not in row0[:i])  # a token only row 0 draws
    one = run({row0[s]}, pad_id=7)
    assert one[0].tolist() == row0[: s + 1] + [7] * (9 - s)  # row 0 ended at step s + 1 and is fed the pad id
    assert one[1].tolist() == row1


@pytest.mark.parametrize("decoder", ["loop", "generate"])
def test_top_k_draws_only_from_the_k_most_likely_and_records_the_full_softmax(one_thread, tiny_model, decoder):
    model, tok = tiny_model
    prompt = chat_ids(tok, "hello")
    (gen,) = TransformersPolicy(model, tok, seed=0, decoder=decoder).generate(
        [prompt], SamplingParams(max_new_tokens=12, temperature=1.0, top_k=5)
    )
    with torch.no_grad():
        logits = model(torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1 : -1]
    ranks = [int((row > row[t]).sum()) for row, t in zip(logits, gen.token_ids, strict=True)]
    assert max(ranks) < 5 and len(set(ranks)) > 1, ranks
    full = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(gen.token_ids).view(-1, 1)).squeeze(1)
    assert torch.allclose(full, torch.tensor(gen.logprobs), atol=1e-4)


@pytest.mark.parametrize("bad", [-1, 2.5, True])
def test_a_bad_top_k_is_refused(bad):
    with pytest.raises(ValueError, match="top_k must be an int >= 0"):
        SamplingParams(top_k=bad)

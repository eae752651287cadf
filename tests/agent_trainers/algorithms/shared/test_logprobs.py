"""Scored log-probs: the LM head over the loss-mask positions only, equal to TRL's fused head and to plain logits."""

from __future__ import annotations

import copy

import pytest
import torch
from trl.trainer.utils import add_fused_lm_head

from agent_trainers.algorithms.shared.logprobs import (
    scored_token_logprobs,
    shared_prompt_token_logprobs,
    supports_scored_logprobs,
)
from agent_trainers.policies import tiny_random_model

P, C, T = 7, 9, 0.7  # prompt width, completion width, temperature


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(20, 5000, (3, P + C), generator=g)
    attention = torch.ones_like(ids)
    attention[0, :3] = 0  # a left-padded prompt
    attention[1, -2:] = 0  # a right-padded completion
    scored = torch.tensor([[1, 1, 0, 0, 0, 1, 1, 0, 1], [0, 1, 1, 1, 0, 0, 1, 0, 0], [0] * 9])
    return ids, attention, scored


def grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_equals_plain_log_softmax_of_the_logits_where_scored_and_zero_elsewhere(batch):
    model, _ = tiny_random_model(seed=1)
    ids, attention, scored = batch
    with torch.no_grad():
        logps, entropy = scored_token_logprobs(model, ids, attention, C, scored, temperature=T, compute_entropy=True)
        logits = model(input_ids=ids, attention_mask=attention).logits[:, P - 1 : -1] / T
    full = torch.log_softmax(logits.float(), -1)
    want = full.gather(-1, ids[:, P:].unsqueeze(-1)).squeeze(-1) * scored
    want_entropy = -(full.exp() * full).sum(-1) * scored
    assert logps.shape == entropy.shape == (3, C)
    assert torch.allclose(logps, want, atol=1e-5) and torch.allclose(entropy, want_entropy, atol=1e-5)
    assert torch.all(logps[scored == 0] == 0) and torch.all(entropy[2] == 0)


def test_loss_and_gradients_equal_trls_fused_head(batch):
    ours, _ = tiny_random_model(seed=1)
    theirs = copy.deepcopy(ours)
    add_fused_lm_head(theirs, temperature=T, outputs=("log_probs", "entropy"))
    ids, attention, scored = batch
    labels = ids.masked_fill(attention == 0, -100)
    labels[:, :P] = -100
    out = theirs(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
    (out.log_probs[:, -C:] * scored).sum().backward()
    logps, _ = scored_token_logprobs(ours, ids, attention, C, scored, temperature=T)
    (logps * scored).sum().backward()
    assert torch.allclose(logps, out.log_probs[:, -C:] * scored, atol=1e-5)
    assert torch.allclose(grads(ours), grads(theirs), atol=1e-5)


def test_models_it_cannot_score_are_left_to_trl():
    model, _ = tiny_random_model()
    assert supports_scored_logprobs(model)
    capped = copy.deepcopy(model)
    capped.config.final_logit_softcapping = 30.0
    assert not supports_scored_logprobs(capped)
    assert not supports_scored_logprobs(torch.nn.Sequential(model))  # wrapped (e.g. DDP): keep TRL's path


@pytest.fixture
def group():
    """Four rows: 0, 1 and 3 share a prompt, 2 has its own (left-padded); right-padded completions."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(20, 5000, (4, P + C), generator=g)
    ids[1, :P] = ids[3, :P] = ids[0, :P]
    attention = torch.ones_like(ids)
    attention[2, :3] = 0
    attention[1, -2:] = 0
    attention[3, -4:] = 0
    scored = torch.tensor(
        [
            [1, 1, 0, 0, 0, 1, 1, 0, 1],
            [0, 1, 1, 1, 0, 0, 1, 0, 0],
            [0, 0, 0, 0, 0, 0, 0, 0, 1],
            [1, 1, 0, 0, 0, 0, 0, 0, 0],
        ]
    )
    return ids, attention, scored


def tokens_run(model):
    """Count the positions the backbone runs over (a list filled by a forward pre-hook)."""
    seen: list[int] = []
    model.base_model.register_forward_pre_hook(lambda m, a, k: seen.append(k["input_ids"].shape[1]), with_kwargs=True)
    return seen


def test_shared_prompts_give_the_single_pass_log_probs_entropies_and_gradients(group):
    single, _ = tiny_random_model(seed=1)
    shared = copy.deepcopy(single)
    ids, attention, scored = group
    weights = torch.arange(1.0, C + 1)
    want, want_entropy = scored_token_logprobs(single, ids, attention, C, scored, temperature=T, compute_entropy=True)
    (want * weights).sum().backward()
    seen = tokens_run(shared)
    got, entropy = shared_prompt_token_logprobs(shared, ids, attention, C, scored, temperature=T, compute_entropy=True)
    (got * weights).sum().backward()
    assert torch.allclose(got, want, atol=1e-5) and torch.allclose(entropy, want_entropy, atol=1e-5)
    assert torch.all(got[scored == 0] == 0) and got[scored == 1].lt(0).all()
    assert torch.allclose(grads(shared), grads(single), atol=1e-5)
    # two distinct prompts of 7, each run once; each prompt's two completions in one pass, up to the token
    # before the last scored one of the longer: 8 (rows needing 8 and 6), 8 (rows needing 8 and 1)
    assert seen == [P, 8, P, 8]


def test_shared_prompts_with_nothing_scored_fall_back_to_the_single_pass(group):
    model, _ = tiny_random_model(seed=1)
    ids, attention, _ = group
    seen = tokens_run(model)
    logps, entropy = shared_prompt_token_logprobs(model, ids, attention, C, torch.zeros(4, C, dtype=torch.long))
    assert seen == [P + C] and entropy is None
    assert torch.equal(logps, torch.zeros(4, C)) and logps.requires_grad  # still attached to the graph


def saved_bytes(model, fn):
    """Bytes of the activations autograd keeps for the backward pass while ``fn`` runs (weights not counted)."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    total = [0]

    def pack(t):
        if t.untyped_storage().data_ptr() not in weights:
            total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, total[0]


def test_shared_prompts_under_gradient_checkpointing_keep_sharing_and_recompute_each_layer(group):
    single, _ = tiny_random_model(seed=1)
    single.train()
    checkpointed = copy.deepcopy(single)
    checkpointed.gradient_checkpointing_enable()  # transformers' default: use_reentrant=False
    ids, attention, scored = group
    weights = torch.arange(1.0, C + 1)
    (want, _), plain_bytes = saved_bytes(
        single, lambda: shared_prompt_token_logprobs(single, ids, attention, C, scored)
    )
    (want * weights).sum().backward()
    seen = tokens_run(checkpointed)
    layer_calls = []
    # On the attention, not the layer: from transformers 5.23 a layer's own hooks run outside its checkpoint and
    # miss the recompute; a submodule's run inside it (on every version), so a layer that is not recomputed fails.
    checkpointed.base_model.layers[0].self_attn.register_forward_pre_hook(lambda *_: layer_calls.append(1))
    (got, _), kept_bytes = saved_bytes(
        checkpointed, lambda: shared_prompt_token_logprobs(checkpointed, ids, attention, C, scored)
    )
    assert seen == [P, 8, P, 8] and len(layer_calls) == 4  # the prompts are still shared
    (got * weights).sum().backward()
    assert len(layer_calls) == 8  # each pass's layer ran again in the backward pass
    assert torch.allclose(got, want, atol=1e-5) and torch.allclose(grads(checkpointed), grads(single), atol=1e-5)
    assert kept_bytes < plain_bytes / 4, (kept_bytes, plain_bytes)
    assert all("_can_checkpoint_with_cache" not in m.__dict__ for m in checkpointed.modules())  # flags put back


def test_shared_prompts_under_reentrant_checkpointing_fall_back_to_the_single_pass(group):
    model, _ = tiny_random_model(seed=1)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model.train()
    ids, attention, scored = group
    seen = tokens_run(model)
    logps, _ = shared_prompt_token_logprobs(model, ids, attention, C, scored, temperature=T)
    assert seen == [P + C]
    with torch.no_grad():
        want, _ = scored_token_logprobs(model, ids, attention, C, scored, temperature=T)
    assert torch.allclose(logps, want, atol=1e-5)

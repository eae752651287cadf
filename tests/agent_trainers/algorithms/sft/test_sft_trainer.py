"""AgentSFTTrainer: TRL's SFT loss with the LM head on the taught positions only gives TRL's numbers (the fused
head's fields, the full-logits reference, the loss, its metrics and the trained weights) and is used only where
it applies."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import gymnasium as gym
import pytest
import torch
from trl.trainer.utils import add_fused_lm_head

from agent_trainers.algorithms.sft import (
    AgentSFTTrainer,
    TaughtPositionsPolicy,
    make_sft_config,
    oracle_episodes,
    run_sft,
)
from agent_trainers.algorithms.shared.logprobs import chunked_scores
from agent_trainers.policies import tiny_random_model
from tests.conftest import LookupEnv

ENV_ID = "Test/SFTTrainerLookup-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=LookupEnv, max_episode_steps=3)

IDS = torch.tensor([[5, 9, 14, 3, 7, 21, 2, 0], [4, 8, 15, 16, 23, 42, 11, 6]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1, 1]])  # row 0 right-padded
TAUGHT = torch.tensor([[0, 0, 0, 1, 1, 0, 1, 0], [0, 0, 0, 0, 1, 1, 1, 1]], dtype=torch.bool)  # as labels are


def labels_of(ids, taught):
    return torch.where(taught, ids, torch.full_like(ids, -100))


def full_logits_reference(model, ids, mask, labels):
    """Per-position log-prob, entropy and top-1 hit from the whole (B, L, V) logits."""
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    logp = torch.log_softmax(logits, -1)
    targets = labels[:, 1:]
    taught = targets != -100
    safe = targets.clamp(min=0)
    lp = logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) * taught
    ent = -(logp.exp() * logp).sum(-1) * taught
    top1 = (logits.argmax(-1) == safe) & taught
    return lp, ent, top1, taught


def test_the_policy_gives_the_fused_heads_fields_and_the_full_logits_numbers(one_thread):
    model, _ = tiny_random_model(seed=3)
    fused = copy.deepcopy(model)
    add_fused_lm_head(fused, outputs=("log_probs", "entropy", "is_top1"))
    labels = labels_of(IDS, TAUGHT)
    ours = TaughtPositionsPolicy(model)(
        input_ids=IDS, attention_mask=MASK, labels=labels, fused_lm_head=True, use_cache=False
    )
    trl = fused(input_ids=IDS, attention_mask=MASK, labels=labels, fused_lm_head=True, use_cache=False)
    lp, ent, top1, taught = full_logits_reference(model, IDS, MASK, labels)
    assert ours.label_mask.tolist() == trl.label_mask.tolist() == taught.tolist()
    assert int(ours.label_mask.sum()) == 7  # the taught tokens after position 0: 3 + 4
    for got in (ours, trl):
        torch.testing.assert_close(got.log_probs, lp, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.entropy, ent, atol=1e-5, rtol=1e-5)
        assert got.is_top1.tolist() == top1.tolist()
    torch.testing.assert_close(ours.loss, -lp.sum() / 7)
    assert float(ours.log_probs.detach()[~taught].abs().sum()) == 0.0 and not bool(ours.is_top1[~taught].any())


def test_its_gradient_is_the_full_logits_one(one_thread):
    model, _ = tiny_random_model(seed=4)
    reference = copy.deepcopy(model)
    labels = labels_of(IDS, TAUGHT)
    TaughtPositionsPolicy(model)(input_ids=IDS, attention_mask=MASK, labels=labels, fused_lm_head=True).loss.backward()
    lp, _, _, taught = full_logits_reference(reference, IDS, MASK, labels)
    (-lp.sum() / taught.sum()).backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-4, msg=name)


def test_top1_is_the_first_maximum_as_in_trls_token_accuracy():
    head = torch.nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]))  # tokens 0 and 1 always tie
    hidden = torch.tensor([[2.0, 1.0], [2.0, 1.0], [0.0, 3.0]])
    targets = torch.tensor([0, 1, 2])
    scores = chunked_scores(hidden, targets, head, temperature=1.0, entropy=True, top1=True)
    assert scores.top1.tolist() == [True, False, True]  # a tie counts for the earlier token only
    # logits (2, 2, 1): log-probs 2 - log(2e^2 + e); (0, 0, 3): 3 - log(2 + e^3)
    e = torch.tensor(1.0).exp()
    torch.testing.assert_close(scores.logprobs[0], 2 - torch.log(2 * e**2 + e))
    torch.testing.assert_close(scores.logprobs[2], 3 - torch.log(2 + e**3))


def test_a_batch_with_nothing_taught_gives_a_zero_loss_that_still_backpropagates(one_thread):
    model, _ = tiny_random_model(seed=5)
    out = TaughtPositionsPolicy(model)(
        input_ids=IDS, attention_mask=MASK, labels=torch.full_like(IDS, -100), fused_lm_head=True
    )
    assert float(out.loss.detach()) == 0.0 and int(out.label_mask.sum()) == 0
    out.loss.backward()  # attached to the graph: an all-masked micro-batch does not fail in backward
    assert all(p.grad is None or float(p.grad.abs().sum()) == 0.0 for p in model.parameters())


def test_other_calls_go_to_the_model(one_thread):
    model, _ = tiny_random_model(seed=6)
    direct = model(input_ids=IDS, attention_mask=MASK).logits
    via = TaughtPositionsPolicy(model)(input_ids=IDS, attention_mask=MASK, use_cache=False).logits
    assert torch.equal(direct, via)


def fake_trainer(**changes):
    """The attributes :meth:`AgentSFTTrainer.scores_taught_positions` reads, as a one-process CPU trainer has them."""
    fields = {
        "score_taught_positions_only": True, "accelerator": SimpleNamespace(num_processes=1),
        "compute_loss_func": None, "label_smoother": None, "aux_loss_enabled": False,
    }  # fmt: skip
    return SimpleNamespace(**(fields | changes))


@pytest.mark.parametrize(
    ("changes", "inputs_less", "expected"),
    [
        ({}, (), True),
        ({"score_taught_positions_only": False}, (), False),
        ({"accelerator": SimpleNamespace(num_processes=2)}, (), False),
        ({"compute_loss_func": len}, (), False),
        ({"label_smoother": len}, (), False),
        ({"aux_loss_enabled": True}, (), False),
        ({}, ("attention_mask",), False),
    ],
)
def test_it_applies_only_where_it_gives_trls_loss(changes, inputs_less, expected):
    model, _ = tiny_random_model()
    batch = {"input_ids": IDS, "attention_mask": MASK, "labels": IDS}
    inputs = {k: v for k, v in batch.items() if k not in inputs_less}
    assert AgentSFTTrainer.scores_taught_positions(fake_trainer(**changes), model, inputs) is expected
    packed = inputs | {"position_ids": IDS}
    assert AgentSFTTrainer.scores_taught_positions(fake_trainer(), model, packed) is False


@pytest.mark.slow  # two SFT runs of the tiny model, ~30 s on 2 cores; CI runs it after the default suite
def test_sft_trains_the_same_model_with_and_without_it(tmp_path, monkeypatch, one_thread):
    episodes = oracle_episodes(ENV_ID, [0, 1, 2, 3])
    calls = []
    real = TaughtPositionsPolicy.__call__

    def counted(self, *args, **kwargs):
        calls.append(kwargs.get("fused_lm_head"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(TaughtPositionsPolicy, "__call__", counted)
    runs = {}
    for own in (False, True):
        monkeypatch.setattr(AgentSFTTrainer, "score_taught_positions_only", own)
        model, tok = tiny_random_model()
        args = make_sft_config(
            device="cpu", output_dir=str(tmp_path / str(own)), max_steps=2, per_device_train_batch_size=2,
            learning_rate=3e-3, seed=0,
        )  # fmt: skip
        trainer = run_sft(model, tok, episodes, args, print_logs=False)
        logs = [r for r in trainer.state.log_history if "loss" in r]
        runs[own] = (logs, torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert calls == [True, True]  # one fused call per step, and only when it is on
    (trl_logs, trl_weights), (own_logs, own_weights) = runs[False], runs[True]
    assert len(trl_logs) == len(own_logs) == 2
    for a, b in zip(trl_logs, own_logs, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
        assert b["entropy"] == pytest.approx(a["entropy"], rel=1e-5)
        assert b["mean_token_accuracy"] == a["mean_token_accuracy"] and b["num_tokens"] == a["num_tokens"]
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
    # the same model up to rounding: Adam turns a rounding difference in a near-zero gradient into a visible step
    # (at most lr = 3e-3 a step), so the largest gap is a small share of one step and the typical one is none
    gap = (own_weights - trl_weights).abs()
    assert float(gap.max()) < 3e-4 and float(gap.mean()) < 1e-7

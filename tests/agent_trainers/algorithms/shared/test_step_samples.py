"""Per-step samples: each turn scored after its own step prompt. Under ``append`` they give the concatenated
log-probs, loss and gradients (within 1e-5); under ``window`` each turn is scored after the view it was fed."""

from __future__ import annotations

import pytest
import torch

from agent_trainers.algorithms.ppo.actor_critic import ActorCritic, pack_sequences, policy_scores
from agent_trainers.algorithms.shared.sequences import StepSpan, covered, step_spans, step_states
from agent_trainers.algorithms.shared.settings import RLConfig
from agent_trainers.policies import tiny_random_model
from agent_trainers.policies.scripted import ScriptedPolicy
from agent_trainers.rollout import RolloutConfig, rollout
from tests.agent_trainers.algorithms.trl_adapter.test_grpo import inputs_for, make_trainer, scripted
from tests.agent_trainers.rollout.test_view_rollouts import ORACLE


def _oracle(tok):
    """Task 0's next oracle action, read off the newest calculator result in the prompt (stateless)."""
    results = ["83.12", "116.88", "59.43", "57.45"]  # the results of calls 4, 3, 2, 1

    def respond(ids):
        text = tok.decode(ids)
        return next((ORACLE[4 - k] for k, r in enumerate(results) if r in text), ORACLE[0])

    return respond


def _episodes(tok, kwargs):
    cfg = RolloutConfig(max_new_tokens_per_turn=32, max_total_tokens=4096)
    policy = ScriptedPolicy(tok, _oracle(tok))
    return rollout(policy, "AgentR1/Calculator-v0", task_indices=[0], group_size=2, env_kwargs=kwargs, config=cfg)


def _loss_and_grad(model, trajs, steps):
    model.zero_grad()
    batch = pack_sequences([t.prompt_ids for t in trajs], [t.completion_ids for t in trajs], pad_id=0)
    mask = torch.tensor([t.loss_mask + [0] * (batch.valid.shape[1] - len(t.loss_mask)) for t in trajs]).bool()
    adv = torch.linspace(-1.0, 1.0, mask.numel()).reshape(mask.shape)  # any fixed per-token weights
    inputs = {k: getattr(batch, k) for k in ("input_ids", "attention_mask", "position_ids")}
    logp, _, _ = policy_scores(model, inputs, batch.prompt_width, mask, temperature=0.7, chunk=64, steps=steps)
    loss = -(adv * logp * mask).sum() / mask.sum()
    loss.backward()
    grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logp.detach(), loss.detach(), grad


def test_under_append_per_step_scoring_gives_the_concatenated_loss_and_gradients(one_thread):
    model, tok = tiny_random_model(seed=0)
    model.train()
    trajs = _episodes(tok, {"action_format": "tags"})
    assert all(len(t.turns) == 5 and not t.step_prompts for t in trajs)
    steps = [step_spans(t) for t in trajs]
    assert [len(s) for s in steps] == [5, 5] and steps[0][2].prompt == tuple(trajs[0].step_prompt(2))
    lp_a, loss_a, grad_a = _loss_and_grad(model, trajs, None)
    lp_b, loss_b, grad_b = _loss_and_grad(model, trajs, steps)
    assert loss_a != 0 and torch.allclose(lp_a, lp_b, atol=1e-5)
    assert torch.allclose(loss_a, loss_b, atol=1e-5)
    assert torch.allclose(grad_a, grad_b, atol=1e-5) and grad_a.abs().max() > 1e-4


def test_under_a_window_each_turn_is_scored_after_the_view_it_was_fed(one_thread):
    model, tok = tiny_random_model(seed=0)
    model.eval()
    trajs = _episodes(tok, {"action_format": "tags", "context": "window", "context_turns": 1})
    steps = [step_spans(t) for t in trajs]
    batch = pack_sequences([t.prompt_ids for t in trajs], [t.completion_ids for t in trajs], pad_id=0)
    mask = covered(steps, batch.valid.shape[1])
    inputs = {k: getattr(batch, k) for k in ("input_ids", "attention_mask", "position_ids")}
    with torch.no_grad():
        logp, _, _ = policy_scores(model, inputs, batch.prompt_width, mask, temperature=1.0, chunk=64, steps=steps)
        concatenated, _, _ = policy_scores(model, inputs, batch.prompt_width, mask, temperature=1.0, chunk=64)
        t, span = trajs[0], steps[0][3]  # turn 3: its view holds the task and turn 2 only
        ids = torch.tensor([list(span.prompt) + t.completion_ids[span.start : span.end]])
        direct = torch.log_softmax(model(ids).logits[0].float(), -1)
        n = span.end - span.start
        want = direct[len(span.prompt) - 1 : len(span.prompt) - 1 + n].gather(-1, ids[0, -n:, None]).squeeze(-1)
    assert torch.allclose(logp[0, span.start : span.end], want, atol=1e-5)
    assert not torch.allclose(logp[0, span.start : span.end], concatenated[0, span.start : span.end], atol=1e-3)
    assert bool((logp[~mask] == 0).all())  # env tokens are not part of any step sample


def test_the_critic_reads_step_states_and_env_tokens_are_refused():
    model, tok = tiny_random_model(seed=0)
    trajs = _episodes(tok, {"action_format": "tags", "context": "window", "context_turns": 1})
    steps = [step_spans(t) for t in trajs]
    agent = ActorCritic(model, "separate")
    torch.nn.init.normal_(agent.value_head.weight)
    batch = pack_sequences([t.prompt_ids for t in trajs], [t.completion_ids for t in trajs], pad_id=0)
    mask = covered(steps, batch.valid.shape[1])
    with torch.no_grad():
        _lp, values, _ = agent(**batch.model_inputs(), temperature=1.0, scored=mask, steps=steps)
        span = steps[1][2]
        ids = torch.tensor([list(span.prompt) + trajs[1].completion_ids[span.start : span.end]])
        hidden = agent.critic(input_ids=ids).last_hidden_state[0]
        p = len(span.prompt)
        want = agent.value_head(hidden[p - 1 : p - 1 + span.end - span.start]).squeeze(-1)
    assert torch.allclose(values[1, span.start : span.end], want, atol=1e-5)
    assert bool((values[~mask] == 0).all())
    with pytest.raises(ValueError, match="model's tokens only"):
        agent(**batch.model_inputs(), temperature=1.0, scored=batch.valid, steps=steps)


def test_step_states_checks_its_spans():
    model, _tok = tiny_random_model(seed=0)
    with pytest.raises(ValueError, match="outside its completion"):
        step_states(model.base_model, [[5, 6]], [[StepSpan((1, 2), 0, 3)]], 3, pad_id=0)
    with pytest.raises(ValueError, match="rows_per_pass"):
        step_states(model.base_model, [[5, 6]], [[StepSpan((1, 2), 0, 2)]], 2, pad_id=0, rows_per_pass=0)


def test_step_samples_need_the_loss_mask():
    with pytest.raises(ValueError, match=r"rl\.step_samples needs rl\.loss_mask"):
        RLConfig(step_samples=True, loss_mask=False)


def test_trl_loss_and_gradients_are_the_same_with_step_samples_under_append(tmp_path, one_thread):
    results = []
    for per_step in (False, True):
        trainer = make_trainer(tmp_path / str(per_step), "grpo", "turn", scripted, step_samples=per_step)
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1
        out = trainer._generate_and_score_completions(inputs_for(trainer, [0, 1]))
        assert ("step_spans" in out) == per_step
        loss = trainer._compute_loss(trainer.model, out)
        loss.backward()
        grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
        results.append((loss.detach(), grad))
    (loss_a, grad_a), (loss_b, grad_b) = results
    assert loss_a != 0 and torch.allclose(loss_a, loss_b, atol=1e-5)
    assert torch.allclose(grad_a, grad_b, atol=1e-5)


def test_trl_trains_a_windowed_env_by_step(tmp_path, one_thread):
    trainer = make_trainer(tmp_path, "grpo", "turn", scripted, env_kwargs={"context": "window", "context_turns": 1})
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    out = trainer._generate_and_score_completions(inputs_for(trainer, [0, 1]))
    assert len(out["step_spans"]) == out["completion_ids"].shape[0]
    assert all(len(row) >= 1 for row in out["step_spans"])
    loss = trainer._compute_loss(trainer.model, out)
    loss.backward()
    grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
    assert torch.isfinite(loss) and any(g.abs().sum() > 0 for g in grads)

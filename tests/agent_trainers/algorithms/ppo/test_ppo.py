"""The PPO trainer on a fixed scripted batch: masks and switches, whitening, GAE wiring, KL placement, one update's
direction, gradient accumulation, the task schedule and a real step with a real policy."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from agent_trainers.algorithms import PPOConfig, RLConfig
from agent_trainers.algorithms.ppo import PPOTrainer
from agent_trainers.algorithms.ppo.config import check_ppo_settings
from agent_trainers.algorithms.ppo.core import masked_gae, masked_whiten
from agent_trainers.algorithms.shared.batch import discounted_returns
from agent_trainers.algorithms.shared.settings import AsyncSettings
from agent_trainers.algorithms.trl_adapter.rollout_func import EnvRolloutFunc
from agent_trainers.policies import tiny_random_model
from agent_trainers.rollout import RolloutConfig
from agent_trainers.rollout.training import task_rows, task_schedule
from tests.agent_trainers.algorithms.trl_adapter.test_grpo import ENV_ID, scripted
from tests.conftest import CAPITALS


def make_trainer(tmp_path, factory=scripted, **overrides):
    model, tok = tiny_random_model(seed=0)
    rows = task_rows(ENV_ID, range(len(CAPITALS)))
    rollout = EnvRolloutFunc(
        rows, config=RolloutConfig(max_new_tokens_per_turn=8, max_total_tokens=1024), policy_factory=factory
    )
    return PPOTrainer(model, tok, rollout, *settings(**overrides), output_dir=tmp_path, device="cpu")


def settings(**overrides):
    """The shared RL settings and PPO's own, from one set of keywords (``beta`` is the KL coefficient)."""
    shared = {"steps": 2, "num_generations": 2, "prompts_per_step": 2, "learning_rate": 1e-3}
    fields, later = set(PPOConfig.model_fields), set(AsyncSettings.model_fields)
    rl = shared | {k: v for k, v in overrides.items() if k not in fields | later}
    if "async_rollouts" in overrides:
        rl["async_rollouts"] = {"enabled": overrides["async_rollouts"]} | {
            k: v for k, v in overrides.items() if k in later - {"enabled"}
        }
    return RLConfig(**rl), PPOConfig(**{k: v for k, v in overrides.items() if k in fields})


def play(trainer, tasks=(0, 1)):
    """The scripted episodes: look the capital up, then answer (right on even rows, wrong on odd rows)."""
    return trainer.rollout.play_step([(ENV_ID, t) for t in tasks], 2, trainer.model, trainer.tokenizer)


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    return play(make_trainer(tmp_path_factory.mktemp("episodes")))


def test_default_switches_mask_env_tokens_out_of_gae_loss_and_whitening(tmp_path, one_thread, episodes):
    batch = make_trainer(tmp_path).prepare(episodes)
    agent, valid = batch.model_mask, batch.valid
    env = valid & ~agent
    assert env.any() and torch.equal(batch.policy_mask, agent) and torch.equal(batch.advantage_mask, agent)
    adv = batch.advantages
    assert abs(float(adv[agent].mean())) < 1e-5 and abs(float(adv[agent].std()) - 1.0) < 1e-4  # whitened over agent
    assert not adv[~agent].any() and not batch.returns[~agent].any()
    assert not batch.old_logprobs[env].any() and (batch.old_logprobs[agent] < 0).all()  # env tokens never scored


def test_advantages_are_gae_of_the_turn_rewards(tmp_path, one_thread, episodes):
    """Values start at 0 (zero-initialised head), so with gamma = lam = 1 each agent token's advantage is its
    turn's return-to-go; the right answerer's look-up turn beats the wrong one's."""
    batch = make_trainer(tmp_path, norm_adv=False).prepare(episodes)
    agent = batch.model_mask
    to_go = discounted_returns(batch.token_rewards, batch.turn_index, 1.0)
    assert torch.equal(batch.values, torch.zeros_like(batch.values))
    assert torch.allclose(batch.advantages[agent], to_go[agent])
    first = [t.turns[0].start for t in episodes]
    assert batch.advantages[0, first[0]] - batch.advantages[1, first[1]] == pytest.approx(1.0)  # the answer's EM


def test_loss_mask_off_puts_env_tokens_into_the_policy_loss_and_nothing_else(tmp_path, one_thread, episodes):
    on = make_trainer(tmp_path / "on", norm_adv=False).prepare(episodes)
    off = make_trainer(tmp_path / "off", norm_adv=False, loss_mask=False).prepare(episodes)
    agent, valid = on.model_mask, on.valid
    env = valid & ~agent
    assert torch.equal(off.policy_mask, valid) and torch.equal(off.advantage_mask, agent)
    assert torch.equal(off.returns, on.returns) and torch.equal(off.advantages[agent], on.advantages[agent])
    assert (off.old_logprobs[env] < 0).all() and off.advantages[env].any()  # scored, and judged by what follows
    whitened = make_trainer(tmp_path / "w", loss_mask=False).prepare(episodes).advantages
    assert torch.allclose(whitened, masked_whiten(off.advantages, valid), atol=1e-6)


@pytest.mark.parametrize(("gamma", "lam"), [(0.9, 0.8), (1.0, 1.0)])
def test_advantage_mask_off_runs_gae_over_every_token(tmp_path, one_thread, episodes, gamma, lam):
    on = make_trainer(tmp_path / "on", norm_adv=False, gamma=gamma, lam=lam).prepare(episodes)
    off = make_trainer(tmp_path / "off", norm_adv=False, gamma=gamma, lam=lam, advantage_mask=False).prepare(episodes)
    agent, valid = on.model_mask, on.valid
    assert torch.equal(off.advantage_mask, valid) and torch.equal(off.policy_mask, agent)
    expected, returns = masked_gae(off.token_rewards, off.values, valid, gamma=gamma, lam=lam)
    assert torch.allclose(off.advantages, expected * agent) and torch.allclose(off.returns, returns)
    assert off.returns[valid & ~agent].any() and not on.returns[valid & ~agent].any()  # env tokens become targets
    same = torch.allclose(off.advantages[agent], on.advantages[agent], atol=1e-6)
    assert same == (gamma == lam == 1.0)  # discounting through env tokens matters only below 1


def test_one_update_raises_advantaged_tokens_and_fits_the_critic(tmp_path, one_thread, episodes):
    trainer = make_trainer(tmp_path, update_epochs=1, num_minibatches=1, vf_coef=1.0)
    batch = trainer.prepare(episodes)
    head = trainer.agent.value_head.weight.detach().clone()
    stats = trainer.update(batch)
    after = trainer.prepare(episodes)
    agent = batch.policy_mask
    change = (after.old_logprobs - batch.old_logprobs)[agent]
    assert float((batch.advantages[agent] * change).sum()) > 0  # positive-advantage tokens became likelier
    before_err = ((batch.values - batch.returns)[agent] ** 2).mean()
    after_err = ((after.values - batch.returns)[agent] ** 2).mean()
    assert after_err < before_err and not torch.equal(head, trainer.agent.value_head.weight)
    assert stats["policy_loss"] and stats["value_loss"][0] > 0 and stats["clipfrac"] == [0.0]  # first pass: ratio 1


def test_gradient_accumulation_over_micro_batches_equals_one_big_batch(tmp_path, one_thread, episodes):
    """Each micro-batch's loss is its token sum over the whole minibatch's token count: the gradients add up to
    the one-batch gradient (compared before Adam, which would magnify float noise on near-zero gradients)."""
    grads = []
    for size in (1, 4):
        trainer = make_trainer(tmp_path / str(size), update_epochs=1, num_minibatches=1, micro_batch_size=size)
        step = trainer.optimizer.step

        def record(*args, trainer=trainer, step=step, **kwargs):
            grads.append([p.grad.detach().clone() for p in trainer.agent.parameters() if p.grad is not None])
            return step(*args, **kwargs)

        trainer.optimizer.step = record
        trainer.update(trainer.prepare(episodes))
    assert len(grads[0]) == len(grads[1]) > 0
    for a, b in zip(*grads, strict=True):
        assert (a - b).abs().max() <= 1e-4 * b.abs().max() + 1e-9


def test_kl_goes_into_the_reward_or_into_the_loss(tmp_path, one_thread, episodes):
    for placement in ("reward", "loss"):
        trainer = make_trainer(tmp_path / placement, norm_adv=False, beta=0.5, kl_penalty=placement)
        assert (tmp_path / placement / "reference" / "config.json").is_file()
        with torch.no_grad():
            trainer.reference.lm_head.weight.add_(0.05 * torch.randn_like(trainer.reference.lm_head.weight))
        batch = trainer.prepare(episodes)
        agent = batch.model_mask
        kl = (batch.old_logprobs - batch.ref_logprobs) * agent
        assert kl.abs().sum() > 0 and not batch.ref_logprobs[~agent].any()
        rewards = batch.token_rewards - (0.5 * kl if placement == "reward" else 0.0)
        expected, _ = masked_gae(rewards, batch.values, agent, gamma=1.0, lam=1.0)
        assert torch.allclose(batch.advantages, expected * agent, atol=1e-5)
        stats = trainer.update(batch)
        assert ("kl_loss" in stats) == (placement == "loss")
    # GAE over every token: the KL penalty sits on agent tokens only, env tokens keep their (zero) reward
    trainer = make_trainer(tmp_path / "every", norm_adv=False, beta=0.5, advantage_mask=False, loss_mask=False)
    with torch.no_grad():
        trainer.reference.lm_head.weight.add_(0.05 * torch.randn_like(trainer.reference.lm_head.weight))
    batch = trainer.prepare(episodes)
    agent, valid = batch.model_mask, batch.valid
    kl = (batch.old_logprobs - batch.ref_logprobs) * agent
    expected, _ = masked_gae(batch.token_rewards - 0.5 * kl, batch.values, valid, gamma=1.0, lam=1.0)
    assert torch.isfinite(batch.advantages).all() and torch.allclose(batch.advantages, expected * valid, atol=1e-5)


def test_ppo_plays_the_task_schedule_every_trainer_plays(tmp_path):
    trainer = make_trainer(tmp_path, prompts_per_step=2, steps=4)  # 4 tasks, 2 a step: 2 steps an epoch
    tasks = [(ENV_ID, i) for i in range(len(CAPITALS))]
    assert [trainer._tasks_of_step(step) for step in range(4)] == task_schedule(tasks, 2, 4, seed=0)
    seen = [t for step in range(4) for t in trainer._tasks_of_step(step)]
    assert [sorted(i for _, i in seen[k : k + 4]) for k in (0, 4)] == [[0, 1, 2, 3]] * 2  # each task once an epoch


def test_real_steps_log_metrics_and_checkpoint(tmp_path, one_thread):
    trainer = make_trainer(tmp_path, factory=None, steps=2, save_steps=1, ent_coef=0.01)
    before = copy.deepcopy(trainer.model.state_dict())
    state = trainer.train()
    assert state.global_step == 2 and [r["step"] for r in state.log_history] == [1, 2]
    logged = state.log_history[0]
    for key in ("reward", "loss", "grad_norm", "learning_rate", "ppo/policy_loss", "ppo/value_loss", "ppo/entropy"):
        assert key in logged and logged[key] == logged[key], key  # present and not NaN
    assert "ppo/kl_ref" not in logged and "ppo/kl_loss" not in logged  # no reference: absent, not 0
    assert any(not torch.equal(v, trainer.model.state_dict()[k]) for k, v in before.items())
    for step in (1, 2):
        folder = tmp_path / f"checkpoint-{step}"
        assert {"model.safetensors", "optimizer.bin", "scheduler.bin", "trainer_state.json", "rollout_state.json"} <= {
            p.name for p in folder.iterdir()
        }


def test_bad_settings_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="num_minibatches must be <="):
        check_ppo_settings(*settings(num_generations=2, prompts_per_step=1, num_minibatches=3), RolloutConfig())
    model, tok = tiny_random_model(seed=0)
    rollout = EnvRolloutFunc(task_rows(ENV_ID, [0]), config=RolloutConfig(temperature=0.0))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        PPOTrainer(model, tok, rollout, RLConfig(), output_dir=tmp_path)


@pytest.mark.parametrize("switch", ["loss_mask", "advantage_mask"])
def test_the_loss_and_its_logged_parts_by_formula(tmp_path, one_thread, episodes, switch):
    """One micro-batch's loss, term by term: the three token counts differ (policy, value and agent tokens), the
    rollout-time log-probs and values are shifted so that both clips bite, and the KL sits in the loss."""
    trainer = make_trainer(
        tmp_path, norm_adv=False, beta=0.5, kl_penalty="loss", ent_coef=0.01, vf_coef=0.7, **{switch: False}
    )
    with torch.no_grad():
        trainer.reference.lm_head.weight.add_(0.05 * torch.randn_like(trainer.reference.lm_head.weight))
    batch = trainer.prepare(episodes)
    pol, val, agent = batch.policy_mask, batch.advantage_mask, batch.model_mask
    n_pol, n_val, n_agent = int(pol.sum()), int(val.sum()), int(agent.sum())
    assert n_agent < max(n_pol, n_val)  # one of the two switches widens one mask to every token
    rows = torch.arange(len(episodes))
    inputs = trainer._inputs(batch, rows)
    scored = (pol | agent)[rows]
    with torch.no_grad():
        logp, values, entropy = trainer.agent(**inputs, temperature=1.0, scored=scored, entropy=True)
    shift = 0.2 * ((torch.arange(pol.numel()) % 5) - 2).view_as(pol).float()  # ratios exp(-0.4) ... exp(0.4)
    batch.old_logprobs = logp - shift
    batch.values = values + 2 * shift  # the value moved by up to 0.8 against a clip of 0.2
    batch.returns = batch.returns + 0.3
    tokens = {"policy": pol.sum(), "value": val.sum(), "agent": agent.sum()}
    with torch.no_grad():
        loss, parts = trainer._micro_loss(batch, rows, tokens)

    ratio, adv = torch.exp(shift), batch.advantages
    surrogate = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    v_clipped = batch.values + (values - batch.values).clamp(-0.2, 0.2)
    v_loss = 0.5 * torch.maximum((values - batch.returns) ** 2, (v_clipped - batch.returns) ** 2)
    diff = batch.ref_logprobs - logp
    expected = {
        "policy_loss": float((surrogate * pol).sum()) / n_pol,
        "value_loss": float((v_loss * val).sum()) / n_val,
        "entropy": float((entropy * pol).sum()) / n_pol,
        "kl_loss": float(((diff.exp() - diff - 1) * agent).sum()) / n_agent,
        "clipfrac": float(((-adv * ratio.clamp(0.8, 1.2) > -adv * ratio) & pol).sum()) / n_pol,
        "value_clipfrac": float((((v_clipped - batch.returns) ** 2 > (values - batch.returns) ** 2) & val).sum())
        / n_val,
        "approx_kl": float(((ratio - 1 - shift) * pol).sum()) / n_pol,
    }
    expected["loss"] = (
        expected["policy_loss"] + 0.7 * expected["value_loss"] - 0.01 * expected["entropy"] + 0.5 * expected["kl_loss"]
    )
    assert set(parts) == set(expected)
    for name, value in expected.items():
        assert parts[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
    assert float(loss) == pytest.approx(expected["loss"], rel=1e-4, abs=1e-6)
    assert 0 < expected["clipfrac"] < 1 and 0 < expected["value_clipfrac"] < 1 and expected["kl_loss"] > 0
    wide = (pol | val) & ~agent  # the env tokens of the widened mask: clipping happens there too
    clipped = (
        (-adv * ratio.clamp(0.8, 1.2) > -adv * ratio)
        if switch == "loss_mask"
        else v_loss > 0.5 * (values - batch.returns) ** 2
    )
    assert (clipped & wide).any()
    # no entropy bonus: the entropy is still logged (a diagnostic) but leaves the loss; no value clipping: the plain
    # squared error
    trainer.ppo = trainer.ppo.model_copy(update={"ent_coef": 0.0, "clip_vloss": False})
    with torch.no_grad():
        loss, parts = trainer._micro_loss(batch, rows, tokens)
    plain = float((0.5 * (values - batch.returns) ** 2 * val).sum()) / n_val
    assert parts["entropy"] == pytest.approx(expected["entropy"], rel=1e-4) and parts["value_clipfrac"] == 0.0
    assert parts["value_loss"] == pytest.approx(plain, rel=1e-4) and plain < expected["value_loss"]
    assert float(loss) == pytest.approx(
        expected["policy_loss"] + 0.7 * plain + 0.5 * expected["kl_loss"], rel=1e-4, abs=1e-6
    )


def test_critic_warmup_trains_the_critic_alone_then_the_policy(tmp_path, one_thread):
    trainer = make_trainer(tmp_path, critic="separate", critic_warmup_steps=1, steps=2, update_epochs=1,
                           num_minibatches=1)  # fmt: skip
    agent = trainer.agent
    policy = [p.detach().clone() for p in agent.policy.parameters()]
    critic = [p.detach().clone() for p in agent.value_head.parameters()]  # zero-initialised: the head moves first
    trainer.step()  # step 1 of 2: warm-up
    trainer.state.global_step = 1
    assert all(torch.equal(a, b) for a, b in zip(policy, agent.policy.parameters(), strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(critic, agent.value_head.parameters(), strict=True))
    trainer.step()  # step 2: the policy trains too
    assert any(not torch.equal(a, b) for a, b in zip(policy, agent.policy.parameters(), strict=True))
    with pytest.raises(ValueError, match=r"critic_warmup_steps must be < the RL steps \(got 2 and 2\)"):
        check_ppo_settings(*settings(steps=2, critic_warmup_steps=2), RolloutConfig())


def test_a_stale_batch_weighs_each_token_s_policy_loss_by_its_truncated_ratio(tmp_path, one_thread, episodes):
    """rl.async_rollouts: a batch generated one step ago gets w = min(pi_old / pi_behaviour, cap) on each model
    token, which equals training on advantages times w. The behaviour log-probs are set to the trained policy's
    shifted by -0.6, 0 or +0.6, so the ratios are e^0.6 = 1.82 (capped to 1.5), 1 and e^-0.6 = 0.55."""
    trainer = make_trainer(tmp_path, async_rollouts=True, importance_cap=1.5, norm_adv=False)
    old = trainer.prepare(episodes).old_logprobs
    stale = copy.deepcopy(episodes)
    shift = 0.6 * ((torch.arange(old.shape[1]) % 3) - 1).float()
    for b, t in enumerate(stale):
        t.logprobs = [float(old[b, n] - shift[n]) if m else 0.0 for n, m in enumerate(t.loss_mask)]
    trainer.rollout.last_stats = {"async/staleness": 1.0}  # as the generation worker reports a stale call
    batch = trainer.prepare(stale)
    agent = batch.model_mask
    ones = torch.ones_like(batch.old_logprobs)
    expected = torch.where(agent, torch.exp(shift).clamp(max=1.5).expand_as(ones), ones)
    assert batch.is_weights is not None and torch.allclose(batch.is_weights, expected, atol=1e-5)
    capped = (shift > 0).expand_as(agent)[agent]
    assert trainer._is_stats["offpolicy/capped"] == pytest.approx(float(capped.float().mean()))
    assert trainer._is_stats["offpolicy/ratio_max"] == pytest.approx(math.exp(0.6), abs=1e-4)
    rows = torch.arange(len(episodes))
    tokens = {"policy": batch.policy_mask.sum(), "value": batch.advantage_mask.sum(), "agent": agent.sum()}
    with torch.no_grad():
        _, weighted = trainer._micro_loss(batch, rows, tokens)
        by_hand = copy.copy(batch)
        by_hand.advantages, by_hand.is_weights = batch.advantages * batch.is_weights, None
        _, manual = trainer._micro_loss(by_hand, rows, tokens)
        plain = copy.copy(batch)
        plain.is_weights = None
        _, unweighted = trainer._micro_loss(plain, rows, tokens)
    assert weighted["policy_loss"] == pytest.approx(manual["policy_loss"], abs=1e-6)
    assert weighted["policy_loss"] != pytest.approx(unweighted["policy_loss"], abs=1e-4)
    trainer.rollout.last_stats = {"async/staleness": 0.0}  # a fresh batch is not weighted, and says nothing
    fresh = trainer.prepare(stale)
    assert fresh.is_weights is None and trainer._is_stats == {}
    trainer.rollout.asynchronous.close()

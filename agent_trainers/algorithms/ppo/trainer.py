"""PPO for multi-turn tool agents - ours (TRL 1.16 has no PPO), read top to bottom like CleanRL's ``ppo.py``.

One step (:meth:`PPOTrainer.step`) is the algorithm:

1. **Rollout**: play ``G`` episodes of each of the step's tasks with the
   current policy (:class:`~agent_trainers.rollout.training.EnvRollouts`, the same
   engine, task order and seeds as every algorithm).
2. **Batch**: the episodes as the one batch type every trainer reads
   (:class:`~agent_trainers.algorithms.shared.batch.AgentBatch`): each turn's env reward (process terms, and the
   outcome at the end) sits on the last agent token of its turn; masks tell agent tokens from env tokens.
3. **Score before updating**: log-probs ``log pi_old`` and values ``V`` of every
   completion token, and reference log-probs when ``beta > 0``.
4. **KL in the reward** (``kl_penalty: reward``): ``r_t -= beta * (log pi_old - log pi_ref)``
   on agent tokens.
5. **GAE over agent tokens** (the paper's advantage alignment): env tokens are
   skipped and the value bootstraps across them (:func:`~agent_trainers.algorithms.ppo.core.masked_gae`);
   ``ppo.advantage_mask: false`` runs GAE over every token instead.
6. **Whiten** the advantages over the tokens in the policy loss.
7. **Update**: ``update_epochs`` passes; each shuffles the episodes into
   ``num_minibatches`` minibatches, accumulates gradients over micro-batches
   and takes one optimizer step on ``clipped surrogate + vf_coef * clipped value
   loss - ent_coef * entropy (+ beta * k3 KL for kl_penalty: loss)``, each a token mean
   over the minibatch. ``loss_mask: false`` puts env tokens into the policy loss.

Devices and processes go through ``accelerate`` (CPU here, the same code on a
GPU or under ``accelerate launch``: each process plays its own tasks; whitening
uses the process's batch). Checkpoints (``checkpoint-N/``) are accelerate's
``save_state`` - policy, value head and critic in one state dict, optimizer,
scheduler, RNG states - plus ``trainer_state.json`` and the rollout call
counter, written last (:mod:`agent_trainers.algorithms.shared.checkpoints`); a run
resumed from step ``k`` equals one that never stopped.

Callbacks: the trainer calls ``on_step_end``, ``on_log`` and ``on_save`` of
``transformers`` ``TrainerCallback`` s with a ``TrainerState``, so the
pipeline's callbacks work for PPO and the TRL path alike.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from accelerate import Accelerator
from transformers import PreTrainedModel, TrainerCallback, TrainerControl, TrainerState, get_scheduler

from agent_trainers.algorithms.ppo.actor_critic import ActorCritic, pack_sequences, policy_scores
from agent_trainers.algorithms.ppo.config import CriticKind, KLPlacement, PPOConfig, ValueLevel, check_ppo_settings
from agent_trainers.algorithms.ppo.core import (
    clipped_surrogate,
    clipped_value_loss,
    explained_variance,
    kl_k1,
    kl_k3,
    masked_gae,
    masked_mean,
    masked_whiten,
    step_gae,
)
from agent_trainers.algorithms.shared.batch import AgentBatch
from agent_trainers.algorithms.shared.checkpoints import RolloutStateCallback, load_rollout_state
from agent_trainers.algorithms.shared.reference import reference_policy
from agent_trainers.algorithms.shared.settings import RLConfig
from agent_trainers.policies.device import bf16_enabled
from agent_trainers.policies.loader import Device, load_model, resolve_device
from agent_trainers.rollout.training import EnvRollouts, Task, episode_metrics, task_schedule
from agent_trainers.rollout.types import Trajectory

__all__ = ["PPOTrainer"]


@dataclass
class _CallbackArgs:
    """What the trainer's callbacks read of "training arguments"."""

    output_dir: str


class PPOTrainer:
    """PPO with a critic on our rollouts.

    Args:
        model: The policy, a ``transformers`` causal LM (trained in place).
        tokenizer: Its tokenizer (from :func:`~agent_trainers.policies.load_model`).
        rollout: Plays the episodes; its ``rows`` are the training tasks and its
            ``config.temperature`` (> 0) is the temperature log-probs are scored at.
        rl: The shared RL settings (:class:`~agent_trainers.algorithms.shared.settings.RLConfig`; ``beta`` is the KL
            coefficient).
        ppo: PPO's own settings (:class:`~agent_trainers.algorithms.ppo.config.PPOConfig`).
        output_dir: Checkpoints (``checkpoint-N/``) and the KL reference (``reference/``) go here.
        seed: Seeds the task order and the minibatch shuffles (rollouts are seeded by the rollout function).
        device: ``auto``, ``cpu`` or ``cuda``.
        bf16: bf16 autocast (``None``: where the device supports it).
        callbacks: ``TrainerCallback`` s (``on_step_end``, ``on_log``, ``on_save`` are called).

    Raises:
        ValueError: A rule of :func:`~agent_trainers.algorithms.ppo.config.check_ppo_settings` is broken.

    Example:
        >>> rl = RLConfig(steps=2, num_generations=2)
        >>> trainer = PPOTrainer(model, tok, EnvRollouts(rows), rl, output_dir="runs/ppo")  # doctest: +SKIP
        >>> trainer.train()  # doctest: +SKIP
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        rollout: EnvRollouts,
        rl: RLConfig,
        ppo: PPOConfig | None = None,
        *,
        output_dir: str | Path,
        seed: int = 0,
        device: Device | str = Device.AUTO,
        bf16: bool | None = None,
        callbacks: Sequence[TrainerCallback] = (),
    ):
        self.rl, self.ppo = rl, ppo if ppo is not None else PPOConfig()
        check_ppo_settings(self.rl, self.ppo, rollout.config)
        self.rollout, self.tokenizer = rollout, tokenizer
        self.seed, self.device = seed, Device(device)
        self.output_dir = Path(output_dir)
        where = resolve_device(self.device)
        mixed = "bf16" if bf16_enabled(where.type, bf16) else "no"
        self.accelerator = Accelerator(cpu=where.type == "cpu", mixed_precision=mixed)
        tasks = [(str(r["env_id"]), int(r["task_index"])) for r in rollout.rows]
        per_step = rl.prompts_per_step * self.accelerator.num_processes
        self.task_schedule: list[list[Task]] = task_schedule(tasks, per_step, rl.steps, seed)
        """Every process's tasks of each step (each process plays its share)."""
        main = self.accelerator.is_main_process
        self.reference = reference_policy(model, self.output_dir, main_process=main) if rl.beta else None
        agent = ActorCritic(model, self.ppo.critic, critic_backbone=self._critic_backbone(), chunk=self.ppo.logit_chunk)
        optimizer = torch.optim.AdamW(self._param_groups(agent), lr=rl.learning_rate, weight_decay=0.0)
        updates = rl.steps * self.ppo.update_epochs * self.ppo.num_minibatches
        warmup = rl.warmup_steps * self.ppo.update_epochs * self.ppo.num_minibatches  # rl steps -> optimizer steps
        scheduler = get_scheduler("linear", optimizer, num_warmup_steps=warmup, num_training_steps=updates)
        self.agent, self.optimizer, self.scheduler = self.accelerator.prepare(agent, optimizer, scheduler)
        self.state = TrainerState(max_steps=rl.steps, is_world_process_zero=self.accelerator.is_main_process)
        self.control = TrainerControl()
        self.callbacks: list[TrainerCallback] = [RolloutStateCallback(rollout), *callbacks]
        self._owns_pool = rl.async_rollouts.enabled and rollout.asynchronous is None
        if self._owns_pool:
            rollout.asynchronous = rl.async_rollouts.worker(rollout, self.model, tokenizer)
        self._is_stats: dict[str, float] = {}

    # ------------------------------------------------------------------ set-up
    def _critic_backbone(self) -> torch.nn.Module | None:
        p = self.ppo
        if p.critic is not CriticKind.SEPARATE or p.critic_model is None:
            return None  # the value head sits on the policy, or the critic copies the policy's backbone
        critic, _ = load_model(p.critic_model, device=self.device)
        return critic.base_model

    def _param_groups(self, agent: ActorCritic) -> list[dict[str, Any]]:
        critic_lr = self.ppo.critic_learning_rate or self.rl.learning_rate
        critic = list(agent.value_head.parameters()) + (list(agent.critic.parameters()) if agent.critic else [])
        return [
            {"params": [p for p in agent.policy.parameters() if p.requires_grad], "lr": self.rl.learning_rate},
            {"params": critic, "lr": critic_lr},
        ]

    @property
    def model(self) -> Any:
        """The policy (unwrapped)."""
        return self.accelerator.unwrap_model(self.agent).policy

    def add_callback(self, callback: TrainerCallback) -> None:
        """Add a ``TrainerCallback``."""
        self.callbacks.append(callback)

    def _call(self, event: str, **kwargs: Any) -> None:
        args = _CallbackArgs(str(self.output_dir))
        for cb in self.callbacks:
            getattr(cb, event)(args, self.state, self.control, **kwargs)

    # ------------------------------------------------------------------- loop
    def train(self, resume_from_checkpoint: str | Path | None = None) -> TrainerState:
        """Run ``rl.steps`` steps (from a checkpoint's step when resuming); returns the trainer state."""
        if resume_from_checkpoint is not None:
            self._load(Path(resume_from_checkpoint))
        self._call("on_train_begin")
        try:
            self._train_steps()
        finally:
            if self._owns_pool:
                self.rollout.asynchronous.close()
        return self.state

    def _train_steps(self) -> None:
        while self.state.global_step < self.rl.steps:
            start = time.perf_counter()
            metrics = self.step()
            self.state.global_step += 1
            metrics["learning_rate"] = float(self.scheduler.get_last_lr()[0])
            metrics["step_time"] = time.perf_counter() - start
            self.state.log_history.append({**metrics, "step": self.state.global_step})
            self._call("on_step_end")
            self._call("on_log", logs=metrics)
            if self.state.global_step % self.rl.save_steps == 0 or self.state.global_step == self.rl.steps:
                self.save()

    def step(self) -> dict[str, float]:
        """One PPO iteration: rollout, score, GAE, whiten, update (see the module docstring)."""
        # 1. rollout with the current policy
        trajectories = self._play(self._tasks_of_step(self.state.global_step))
        # 2-6. tensors, old log-probs and values, rewards, GAE, whitening
        batch = self.prepare(trajectories)
        # 7. epochs of minibatch updates
        stats = self.update(batch)
        return self._metrics(trajectories, batch, stats)

    def prepare(self, trajectories: list[Trajectory]) -> AgentBatch:
        """Steps 2-6: the batch, log-probs and values before the update, KL in the reward, GAE, whitening."""
        p, a = self.ppo, self.rl.async_rollouts
        # 2. the batch: each turn's reward on its last agent token; agent / env / padding masks
        batch = AgentBatch.from_trajectories(
            trajectories,
            group_size=self.rl.num_generations,
            device=self.accelerator.device,
            loss_mask=self.rl.loss_mask,
            advantage_mask=p.advantage_mask,
            step_samples=self.rl.step_samples,
            staleness=int(self.rollout.last_stats.get("async/staleness", 0)),
        )
        # 3. score with the policy before the update
        batch.old_logprobs, batch.values = self._score(batch, self.agent, values=True)
        if self.reference is not None:
            batch.ref_logprobs, _ = self._score(batch, self.reference, values=False)
        # 4. KL in the reward
        rewards = batch.token_rewards
        if batch.ref_logprobs is not None and p.kl_penalty is KLPlacement.REWARD:
            kl = kl_k1(batch.old_logprobs, batch.ref_logprobs) * batch.model_mask
            rewards = rewards - self.rl.beta * kl
        # 5. GAE over the agent's tokens (or every token), bootstrapping across the rest; or over the steps
        if p.value is ValueLevel.STEP:  # the critic is then trained at the step positions only
            advantages, batch.returns, batch.advantage_mask = step_gae(
                rewards, batch.values, batch.turn_index, batch.turn_starts, gamma=p.gamma, lam=p.lam
            )
        else:
            advantages, batch.returns = masked_gae(
                rewards, batch.values, batch.advantage_mask, gamma=p.gamma, lam=p.lam
            )
        # 6. whiten over the tokens in the policy loss; the other tokens get 0
        batch.advantages = masked_whiten(advantages, batch.policy_mask) if p.norm_adv else advantages
        batch.advantages = batch.advantages * batch.policy_mask
        # off-policy correction of a batch generated by an older policy (rl.async_rollouts; offpolicy.py): the
        # ratio is taken against log pi_old, the policy before this step's update
        batch.is_weights, self._is_stats = batch.stale_weights(
            batch.old_logprobs, a.importance_sampling, a.importance_cap
        )
        return batch

    # ---------------------------------------------------------------- rollout
    def _tasks_of_step(self, step: int) -> list[Task]:
        """This process's tasks of step ``step`` (its share of :attr:`task_schedule`)."""
        world = self.accelerator.num_processes
        return self.task_schedule[step][self.accelerator.process_index :: world]

    def _play(self, tasks: list[Task]) -> list[Trajectory]:
        began = time.perf_counter()
        trajectories = self._play_now_or_ahead(tasks)
        self.rollout.last_stats["time/rollout"] = time.perf_counter() - began
        return trajectories

    def _play_now_or_ahead(self, tasks: list[Task]) -> list[Trajectory]:
        pool = self.rollout.asynchronous
        if pool is not None:  # played by the generation worker, maybe steps ago; the next steps' submitted
            step = self.state.global_step
            ahead = range(step + 1, min(step + 1 + pool.max_staleness, self.rl.steps))
            upcoming = [self._tasks_of_step(s) for s in ahead]
            trajectories, self.rollout.last_stats = pool.rollouts_for(
                self.rollout.calls,
                tasks,
                self.rl.num_generations,
                self.rollout.config,
                self.model,
                version=step,
                upcoming=upcoming,
            )
            self.rollout.calls += 1
            return trajectories
        policy = self.model
        training = policy.training
        policy.eval()
        try:
            return self.rollout.play_step(tasks, self.rl.num_generations, policy, self.tokenizer)
        finally:
            policy.train(training)

    def _micro_batches(self, rows: torch.Tensor) -> list[torch.Tensor]:
        size = self.ppo.micro_batch_size
        return [rows[i : i + size] for i in range(0, len(rows), size)]

    def _inputs(self, batch: AgentBatch, rows: torch.Tensor) -> dict[str, Any]:
        picked = rows.tolist()
        packed = pack_sequences(
            [batch.prompt_ids[r] for r in picked],
            [batch.completion_ids[r] for r in picked],
            pad_id=self.tokenizer.pad_token_id,
            device=self.accelerator.device,
        )
        steps = None if batch.steps is None else [batch.steps[r] for r in picked]
        return packed.model_inputs() | {"steps": steps}

    def _scored(self, batch: AgentBatch, rows: torch.Tensor, width: int) -> torch.Tensor:
        """Tokens whose log-probs PPO needs: those in the policy loss and the agent's (for the KL)."""
        return (batch.policy_mask | batch.model_mask)[rows, :width]

    @torch.no_grad()
    def _score(self, batch: AgentBatch, model: torch.nn.Module, *, values: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs (and values) of the completion tokens, micro-batch by micro-batch, without gradients."""
        shape = batch.valid.shape
        logprobs = torch.zeros(shape, device=self.accelerator.device)
        out_values = torch.zeros(shape, device=self.accelerator.device)
        temperature, chunk = self.rollout.config.temperature, self.ppo.logit_chunk
        model.eval()
        for rows in self._micro_batches(torch.arange(shape[0])):
            inputs = self._inputs(batch, rows)
            width = inputs["valid"].shape[1]
            scored = self._scored(batch, rows, width)
            if values:  # the actor-critic
                lp, v, _ = model(**inputs, temperature=temperature, scored=scored)
                out_values[rows, :width] = v.float()
            else:  # the frozen reference policy, on agent tokens
                seq = {k: inputs[k] for k in ("input_ids", "attention_mask", "position_ids")}
                agent = batch.model_mask[rows, :width]
                width_p = inputs["prompt_width"]
                reference = cast(PreTrainedModel, model)  # the reference is a copy of the causal LM policy
                lp, _, _ = policy_scores(
                    reference, seq, width_p, agent, temperature=temperature, chunk=chunk, steps=inputs["steps"]
                )
            logprobs[rows, :width] = lp.float()
        return logprobs, out_values

    # ----------------------------------------------------------------- update
    def update(self, batch: AgentBatch) -> dict[str, list[float]]:
        """Step 7: ``update_epochs`` passes of ``num_minibatches`` optimizer steps; returns per-minibatch statistics."""
        p, n = self.ppo, len(batch.prompt_ids)
        shuffle = torch.Generator().manual_seed(self.seed * 1_000_003 + self.state.global_step)
        size = math.ceil(n / p.num_minibatches)
        stats: dict[str, list[float]] = defaultdict(list)
        self.agent.train()
        for _epoch in range(p.update_epochs):
            order = torch.randperm(n, generator=shuffle)
            kls = [self._minibatch(batch, order[s : s + size], stats) for s in range(0, n, size)]
            stats["epochs"].append(1.0)
            if p.target_kl is not None and sum(kls) / len(kls) > p.target_kl:
                break
        return stats

    def _minibatch(self, batch: AgentBatch, rows: torch.Tensor, stats: dict[str, list[float]]) -> float:
        """One optimizer step over ``rows``; gradients accumulate over its micro-batches. Returns the approx KL."""
        tokens = {
            "policy": batch.policy_mask[rows].sum().clamp(min=1),
            "value": batch.advantage_mask[rows].sum().clamp(min=1),
            "agent": batch.model_mask[rows].sum().clamp(min=1),
        }
        sums: dict[str, float] = defaultdict(float)
        micro = self._micro_batches(rows)
        for k, mrows in enumerate(micro):
            last = k == len(micro) - 1
            with contextlib.nullcontext() if last else self.accelerator.no_sync(self.agent):
                loss, parts = self._micro_loss(batch, mrows, tokens)
                self.accelerator.backward(loss)
            for name, value in parts.items():
                sums[name] += value
        grad_norm = self.accelerator.clip_grad_norm_(self.agent.parameters(), self.ppo.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        for name, value in sums.items():
            stats[name].append(value)
        stats["grad_norm"].append(float(grad_norm))
        return sums["approx_kl"]

    def _micro_loss(
        self, batch: AgentBatch, rows: torch.Tensor, tokens: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """This micro-batch's share of the minibatch loss (token sums over the minibatch's token counts)."""
        p = self.ppo
        inputs = self._inputs(batch, rows)
        w = inputs["valid"].shape[1]
        logp, values, entropy = self.agent(
            **inputs,
            temperature=self.rollout.config.temperature,
            scored=self._scored(batch, rows, w),
            entropy=True,  # logged every step; a bonus only when ent_coef > 0
        )
        assert batch.old_logprobs is not None and batch.advantages is not None  # filled by prepare()
        assert batch.values is not None and batch.returns is not None
        old_logp, adv = batch.old_logprobs[rows, :w], batch.advantages[rows, :w]
        pol, val, agent = batch.policy_mask[rows, :w], batch.advantage_mask[rows, :w], batch.model_mask[rows, :w]
        pg, pg_clipped = clipped_surrogate(logp, old_logp, adv, p.clip_coef)
        vl, v_clipped = clipped_value_loss(
            values, batch.values[rows, :w], batch.returns[rows, :w], p.vf_clip if p.clip_vloss else None
        )
        if batch.is_weights is not None:  # truncated importance sampling of a stale batch
            pg = pg * batch.is_weights[rows, :w]
        policy_loss = (pg * pol).sum() / tokens["policy"]
        value_loss = (vl * val).sum() / tokens["value"]
        loss = policy_loss + p.vf_coef * value_loss
        log_ratio = (logp - old_logp).detach()
        parts = {
            "policy_loss": policy_loss.item(),
            "value_loss": value_loss.item(),
            "clipfrac": float((pg_clipped & pol).sum() / tokens["policy"]),
            "value_clipfrac": float((v_clipped & val).sum() / tokens["value"]),
            "approx_kl": float((((log_ratio.exp() - 1) - log_ratio) * pol).sum() / tokens["policy"]),
        }
        if entropy is not None:
            mean_entropy = (entropy * pol).sum() / tokens["policy"]
            if p.ent_coef > 0:
                loss = loss - p.ent_coef * mean_entropy
            parts["entropy"] = mean_entropy.item()
        if batch.ref_logprobs is not None and p.kl_penalty is KLPlacement.LOSS:
            kl = (kl_k3(logp, batch.ref_logprobs[rows, :w]) * agent).sum() / tokens["agent"]
            loss = loss + self.rl.beta * kl
            parts["kl_loss"] = kl.item()
        if self.state.global_step < p.critic_warmup_steps:  # critic warm-up: the value loss alone
            loss = p.vf_coef * value_loss
        parts["loss"] = loss.item()
        return loss, parts

    # ---------------------------------------------------------------- metrics
    def _metrics(self, trajectories: list[Trajectory], batch: AgentBatch, stats: dict[str, list[float]]) -> dict:
        scores = batch.scores
        assert batch.values is not None and batch.returns is not None and batch.old_logprobs is not None
        out: dict[str, float] = {
            "reward": float(scores.mean()),
            "reward_std": float(scores.std()) if scores.numel() > 1 else float("nan"),
            "loss": _mean(stats["loss"]),
            "grad_norm": _mean(stats["grad_norm"]),
            "ppo/epochs": float(len(stats["epochs"])),
            "ppo/explained_variance": explained_variance(batch.values, batch.returns, batch.advantage_mask),
            "ppo/values": float(masked_mean(batch.values, batch.advantage_mask)),
            "ppo/returns": float(masked_mean(batch.returns, batch.advantage_mask)),
        }
        for name in ("policy_loss", "value_loss", "clipfrac", "value_clipfrac", "approx_kl", "entropy", "kl_loss"):
            if stats.get(name):
                out[f"ppo/{name}"] = _mean(stats[name])
        if batch.ref_logprobs is not None:
            kl = kl_k1(batch.old_logprobs, batch.ref_logprobs)
            out["ppo/kl_ref"] = float(masked_mean(kl, batch.model_mask))
        return out | episode_metrics(trajectories) | self.rollout.last_stats | self._is_stats

    # ------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        """Write ``checkpoint-<step>/``; the rollout state (written last by its callback) marks it complete."""
        folder = self.output_dir / f"checkpoint-{self.state.global_step}"
        self.accelerator.save_state(str(folder))
        if self.accelerator.is_main_process:
            self.state.save_to_json(str(folder / "trainer_state.json"))
        self._call("on_save")
        return folder

    def _load(self, folder: Path) -> None:
        self.accelerator.load_state(str(folder))
        self.state = TrainerState.load_from_json(str(folder / "trainer_state.json"))
        self.state.max_steps = self.rl.steps
        load_rollout_state(folder, self.rollout)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")

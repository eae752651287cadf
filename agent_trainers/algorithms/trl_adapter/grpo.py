"""GRPO, RLOO, REINFORCE++, REINFORCE++-baseline and GiGPO on TRL's ``GRPOTrainer``, with our rollouts.

TRL does the optimisation (batching, loss, clipping, optimizer, checkpoints);
this adapter changes one thing: the advantages. TRL's
``_generate_and_score_completions`` is the smallest seam TRL 1.16 offers (it
has no public advantage hook): :class:`AgentGRPOTrainer` calls it, then
replaces its ``(B,)`` group-normalised advantages with ``(B, T)`` per-token
ones from the estimator registry (:mod:`agent_trainers.algorithms.shared.advantages`).
TRL's loss accepts ``(B, T)`` advantages as they are (it only unsqueezes
``(B,)`` ones) and its batch shuffling/splitting slices every tensor along dim 0.

The trajectories come in explicitly: :class:`~agent_trainers.algorithms.EnvRolloutFunc`
returns one ``trajectory`` per rollout, TRL merges that field into each input
row, and the override reads it from the rows it was given.

KL: for ``grpo`` and ``gigpo``, ``beta`` is TRL's KL term in the loss; TRL builds the
reference from a snapshot of the policy as the stage starts (``output_dir/reference``,
reused on resume). For the REINFORCE family, ``beta`` goes into the
reward instead: TRL gets ``beta = 0`` and this trainer keeps its own frozen
copy of the initial policy, scores the batch with it and hands
``KL_t = log pi_old - log pi_ref`` (sampling log-probs minus reference
log-probs, per model token) to the estimator.

Several processes (``accelerate launch``): TRL's ``RepeatSampler`` puts the
``G`` copies of a prompt next to each other and each process takes the next
``per_device_train_batch_size * steps_per_generation`` rows of the generation
batch, so a group stays on one process exactly when ``G`` divides that number;
the trainer checks it (:func:`check_groups_stay_local`), and group statistics
(``grpo``, ``rloo``, the ``-baseline`` mean, ``gigpo``'s anchor groups) are then
the same as in one process. Batch statistics (``reinforce_pp``'s whitening,
``scale_rewards: batch``) are taken over each process's batch, not the global one
(a warning says so).

Memory and time: the loss scores log-probs with
:func:`~agent_trainers.algorithms.shared.logprobs.shared_prompt_token_logprobs` (each
distinct prompt of the micro-batch run once, each completion up to its last
model token on top of it, the LM head in chunks over the model's own
tokens only: the log-prob engine PPO uses too) where the model allows it, else with TRL's fused LM head;
full-vocabulary logits are never built for the batch. A micro-batch of a whole
group (``micro_batch = G``) runs its shared prompt once. Train in micro-batches with
TRL's own knobs (``per_device_train_batch_size`` below the group,
``gradient_accumulation_steps = steps_per_generation``; see
:func:`~agent_trainers.algorithms.trl_adapter.trl_args.micro_batch_args`).
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import torch
from torch.utils.data import Sampler
from transformers import PreTrainedModel, TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import RepeatSampler, add_fused_lm_head

from agent_trainers.algorithms.shared.advantages import (
    ESTIMATORS,
    AdvantageMode,
    Algorithm,
    ScaleRewards,
    compute_advantages,
)
from agent_trainers.algorithms.shared.checkpoints import RolloutStateCallback
from agent_trainers.algorithms.shared.logprobs import (
    frozen_copy,
    project_scored,
    shared_prompt_token_logprobs,
    supports_scored_logprobs,
)
from agent_trainers.algorithms.shared.names import ISCorrection
from agent_trainers.algorithms.shared.offpolicy import importance_weights
from agent_trainers.algorithms.shared.sequences import StepSpan, batch_steps, covered, step_states
from agent_trainers.algorithms.shared.tensors import AnchorState, RewardBatch, reward_batch
from agent_trainers.algorithms.trl_adapter.rollout_func import EnvRolloutFunc
from agent_trainers.rollout.types import Trajectory

__all__ = ["AgentGRPOTrainer", "EpochSeededRepeatSampler", "check_groups_stay_local"]


def check_groups_stay_local(args: Any) -> None:
    """Refuse a ``GRPOConfig`` whose groups would straddle two processes (see the module docstring).

    Raises:
        ValueError: ``num_generations`` does not divide the rows one process gets per generation batch.
    """
    local = args.per_device_train_batch_size * args.steps_per_generation
    if local % args.num_generations:
        raise ValueError(
            "per_device_train_batch_size * steps_per_generation must be divisible by num_generations, so that "
            "every group of rollouts stays on one process (got "
            f"{args.per_device_train_batch_size} * {args.steps_per_generation} and {args.num_generations})"
        )


def _warn_batch_statistics(algorithm: Algorithm, args: Any) -> None:
    batch_stats = algorithm in (Algorithm.REINFORCE_PP, Algorithm.REINFORCE_PP_BASELINE) or (
        algorithm in (Algorithm.GRPO, Algorithm.GIGPO) and ScaleRewards(str(args.scale_rewards)) is ScaleRewards.BATCH
    )
    if batch_stats and args.world_size > 1:
        warnings.warn(
            f"{algorithm} with {args.world_size} processes normalises advantages over each process's batch "
            "(not the global batch); group baselines are unaffected",
            stacklevel=3,
        )


class EpochSeededRepeatSampler(RepeatSampler):
    """TRL's ``RepeatSampler`` whose order in epoch ``e`` depends only on ``(seed, e)``.

    TRL's sampler draws every epoch's permutation from one generator, so a run
    resumed in epoch 2 would replay epoch 1's order. The trainer calls
    :meth:`set_epoch` before each epoch (also when resuming), which reseeds it.
    """

    def set_epoch(self, epoch: int) -> None:
        """Reseed the shuffle for ``epoch`` (nothing to do without shuffling or a seed)."""
        if self.shuffle and self.seed is not None:
            self.generator.manual_seed(int(self.seed) * 1_000_003 + int(epoch))


def _snapshot_reference(model: Any, output_dir: str) -> None:
    """Point ``model.config._name_or_path`` (where TRL builds its reference from) at a snapshot of ``model``.

    The snapshot is the policy as the RL stage starts (e.g. after SFT, which the
    original path would miss); an existing one is kept, so a resumed run uses
    the same reference.
    """
    folder = Path(output_dir) / "reference"
    if not (folder / "config.json").is_file():
        model.save_pretrained(folder)
    model.config._name_or_path = str(folder)


class _DropSignalFreeUpdates(TrainerCallback):
    """An optimizer step none of whose micro-batches carried a non-zero advantage (every group tied, no KL in the
    loss) moves no weight: the zero gradients are dropped before the step, so Adam skips every parameter. Left in,
    a zero gradient still moves each weight by its first moment (about the learning rate per step for ~10 steps
    after the last real update: measured, the answer rate stayed at 0 after it fell). Logs ``update/skipped``
    (1 for a dropped update, 0 for a taken one)."""

    def __init__(self, trainer: AgentGRPOTrainer):
        self.trainer = trainer

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        t = self.trainer
        signal = t._signal_in_step
        if t.accelerator.num_processes > 1:  # the gradients are all-reduced: drop them everywhere or nowhere
            flag = torch.tensor([1.0 if signal else 0.0], device=t.accelerator.device)
            signal = bool(t.accelerator.reduce(flag, reduction="sum").item() > 0)
        if not signal:
            for p in t.model.parameters():
                p.grad = None
        t._metrics["train"]["update/skipped"].append(0.0 if signal else 1.0)
        t._signal_in_step = False


class AgentGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` with our rollouts and advantages from the estimator registry.

    Args:
        model: The policy (a ``PreTrainedModel``).
        reward_funcs: Usually ``[env_reward]``.
        args: A ``GRPOConfig`` (see :func:`~agent_trainers.algorithms.make_grpo_config`).
        algorithm: ``grpo``, ``rloo``, ``reinforce_pp``, ``reinforce_pp_baseline`` or ``gigpo``.
        advantage: ``outcome`` (one value per rollout) or ``turn`` (returns-to-go per turn).
        gamma: Per-turn discount of returns.
        gigpo_step_weight: ``gigpo``'s omega, the weight of its step advantage (``rl.gigpo_step_weight``).
        gigpo_anchor: Which tokens name ``gigpo``'s anchor states (``rl.gigpo_anchor``).
        step_samples: Score each turn after its own step prompt (``rl.step_samples``); always so for
            episodes played under a context other than ``append``.
        importance_sampling: How a batch generated by an older policy (``rl.async_rollouts``) reweights its
            policy loss (``rl.importance_sampling``; :mod:`~agent_trainers.algorithms.shared.offpolicy`).
        importance_cap: Its bound (``rl.importance_cap``).
        **kwargs: As for ``GRPOTrainer``; ``rollout_func`` must be an
            :class:`~agent_trainers.algorithms.EnvRolloutFunc`.

    Example:
        >>> trainer = AgentGRPOTrainer(model=model, reward_funcs=[env_reward], args=make_grpo_config(...),
        ...     processing_class=tok, train_dataset=ds, rollout_func=EnvRolloutFunc(rows),
        ...     algorithm="rloo", advantage="turn")  # doctest: +SKIP
    """

    # narrower than TRL declares them, as this trainer is built: with a model, GRPOConfig arguments, the
    # EnvRolloutFunc that __init__ requires, and a group size it checks against the estimator's minimum
    model: PreTrainedModel | torch.nn.Module
    args: GRPOConfig
    rollout_func: EnvRolloutFunc
    num_generations: int

    def __init__(
        self,
        model: Any,
        reward_funcs: Any,
        args: Any,
        *,
        algorithm: Algorithm | str = Algorithm.GRPO,
        advantage: AdvantageMode | str = AdvantageMode.OUTCOME,
        gamma: float = 1.0,
        gigpo_step_weight: float = 1.0,
        gigpo_anchor: AnchorState | str = AnchorState.OBSERVATION,
        step_samples: bool = False,
        importance_sampling: ISCorrection | str = ISCorrection.TOKEN_TRUNCATE,
        importance_cap: float = 2.0,
        **kwargs: Any,
    ):
        self.step_samples = bool(step_samples)
        self.importance_sampling = ISCorrection(importance_sampling)
        self.importance_cap = float(importance_cap)
        self.batch_staleness = 0  # set by an asynchronous rollout function: how old the batch's policy is
        self._is_inputs: dict[str, Any] | None = None  # the micro-batch whose advantages take importance weights
        self._task_rows: list[tuple[str, int]] | None = None
        self._order_epoch = 0
        self._batch_steps: list[list[StepSpan]] | None = None  # the generation batch's per-step samples
        self._loss_steps: list[list[StepSpan]] | None = None  # a loss micro-batch's
        self.algorithm = Algorithm(algorithm)
        self.advantage_mode = AdvantageMode(advantage)
        self.turn_gamma = float(gamma)
        self.gigpo_step_weight = float(gigpo_step_weight)
        self.gigpo_anchor = AnchorState(gigpo_anchor)
        estimator = ESTIMATORS[self.algorithm]
        if not isinstance(kwargs.get("rollout_func"), EnvRolloutFunc):
            raise TypeError(
                f"AgentGRPOTrainer needs an EnvRolloutFunc rollout_func (got {type(kwargs.get('rollout_func'))})"
            )
        if args.num_generations < estimator.min_group_size:
            raise ValueError(
                f"{self.algorithm} needs num_generations >= {estimator.min_group_size} (got {args.num_generations})"
            )
        check_groups_stay_local(args)
        _warn_batch_statistics(self.algorithm, args)
        self.kl_coef = float(args.beta) if estimator.kl_in_reward else 0.0
        reference = frozen_copy(model) if self.kl_coef else None
        if self.kl_coef:
            args = copy.copy(args)
            args.beta = 0.0  # the KL goes into the reward, not into TRL's loss
        elif args.beta:
            _snapshot_reference(model, args.output_dir)
        super().__init__(model=model, reward_funcs=reward_funcs, args=args, **kwargs)
        self.kl_reference = None
        if reference is not None:
            add_fused_lm_head(reference, temperature=self.temperature, cast_lm_head_to_fp32=args.cast_lm_head_to_fp32)
            self.kl_reference = self.accelerator.prepare_model(reference, evaluation_mode=True)
        self.add_callback(RolloutStateCallback(self.rollout_func))
        self._signal_in_step = False
        self.add_callback(_DropSignalFreeUpdates(self))

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """TRL's loss, with log-probs scored on the loss-mask positions only (see the module docstring)."""
        # with no KL in the loss, a micro-batch whose advantages are all 0 has an exactly zero gradient
        self._signal_in_step |= bool(self.beta) or bool(inputs["advantages"].abs().max() > 0)
        mask = inputs["completion_mask"]
        self._scored = mask * inputs["tool_mask"] if inputs.get("tool_mask") is not None else mask
        self._loss_steps = inputs.get("step_spans")
        stale = inputs.get("stale_rows")
        if stale is not None and bool(stale.any()):
            inputs = dict(inputs)  # the weighted advantages stay in this micro-batch's copy
            self._is_inputs = inputs
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._scored, self._loss_steps, self._is_inputs = None, None, None

    def _weigh_stale_rows(self, logps: torch.Tensor) -> None:
        """Truncated importance sampling for a stale micro-batch: its advantages times ``w = pi_train / pi_behaviour``
        (detached). TRL reads ``inputs["advantages"]`` after scoring the log-probs, and its clipped surrogate is
        positively homogeneous in the advantage, so this equals weighting each token's policy loss by ``w`` (as
        TRL's vLLM correction does); the KL term is not weighted, as in TRL."""
        inputs = self._is_inputs
        if inputs is None or self._scored is None:
            return
        old = inputs.get("old_per_token_logps")
        train = logps if old is None else old
        weights, stats = importance_weights(
            train,
            inputs["sampling_per_token_logps"],
            self._scored.bool(),
            inputs["stale_rows"],
            self.importance_sampling,
            self.importance_cap,
        )
        inputs["advantages"] = inputs["advantages"] * weights.to(inputs["advantages"].dtype)
        for name, value in stats.items():
            self._metrics["train"][name].append(value)
        self._is_inputs = None  # once per loss

    def on_trajectories(self, trajectories: list[Trajectory]) -> None:
        """Called by :class:`EnvRolloutFunc` with the generation batch: its per-step samples, if it is scored
        by step (``step_samples``, or episodes played under a context other than ``append``)."""
        rl = SimpleNamespace(step_samples=self.step_samples, loss_mask=self.rollout_func.loss_mask, advantage_mask=True)
        self._batch_steps = batch_steps(trajectories, rl)

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **multimodal: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        logps, entropies, aux = self._token_logps(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size,
            compute_entropy,
            compute_aux_loss,
            **multimodal,
        )
        self._weigh_stale_rows(logps)
        return logps, entropies, aux

    def _token_logps(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **multimodal: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        scored = getattr(self, "_scored", None)
        steps = self._loss_steps if scored is not None else getattr(self, "_batch_steps", None)
        if steps is not None:
            return self._step_logps(model, input_ids, attention_mask, logits_to_keep, steps, scored, compute_entropy)
        if (
            scored is None
            or compute_aux_loss
            or self.args.cast_lm_head_to_fp32
            or any(v is not None for v in multimodal.values())
            or not supports_scored_logprobs(model)
        ):
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **multimodal,
            )
        with self.accelerator.autocast():
            logps, entropies = shared_prompt_token_logprobs(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                scored,
                temperature=self.temperature,
                compute_entropy=compute_entropy,
            )
        return logps, entropies, None

    def _step_logps(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        steps: list[list[StepSpan]],
        scored: torch.Tensor | None,
        compute_entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None, None]:
        """Log-probs with each turn scored after its own step prompt (see ``shared.sequences``)."""
        if len(steps) != input_ids.shape[0]:
            raise RuntimeError(f"{len(steps)} rows of step samples for a batch of {input_ids.shape[0]} rows")
        if not supports_scored_logprobs(model):
            raise ValueError(
                f"per-step samples need a plain transformers causal LM (got {type(model).__name__}; PEFT and "
                "wrapped models are not supported with rl.step_samples or a context other than append)"
            )
        inside = covered(steps, logits_to_keep, input_ids.device)
        want = inside if scored is None else scored.bool()
        if bool((want & ~inside).any()):
            raise ValueError("per-step samples score the model's tokens only (rl.loss_mask must be true)")
        completions = input_ids[:, input_ids.shape[1] - logits_to_keep :]
        with self.accelerator.autocast():
            states = step_states(model.base_model, completions.tolist(), steps, logits_to_keep, pad_id=0)
            logps, entropies = project_scored(
                model, states, completions, want, temperature=self.temperature, compute_entropy=compute_entropy
            )
        return logps, entropies, None

    def _get_train_sampler(self, dataset: Any = None) -> Sampler:
        sampler = super()._get_train_sampler(dataset)
        sampler.__class__ = EpochSeededRepeatSampler  # same state, plus set_epoch
        return sampler

    def upcoming_tasks(self, tasks: list[tuple[str, int]], count: int) -> list[list[tuple[str, int]]]:
        """The tasks of the (at most ``count``) generation batches after the one of ``tasks``, as the train sampler
        will draw them (:class:`EpochSeededRepeatSampler`: epoch ``e``'s order depends only on the seed and ``e``),
        within ``max_steps``. Empty when ``tasks`` is not found among the next two epochs' batches (the
        asynchronous rollouts then generate the next call when it comes)."""
        left = int(self.state.max_steps) - int(self.state.global_step) - 1
        count = min(count, left)
        if count <= 0:
            return []
        if self._task_rows is None:
            rows = cast(Any, self.train_dataset)  # the rows the sampler indexes (a datasets.Dataset here)
            self._task_rows = [(str(r["env_id"]), int(r["task_index"])) for r in rows]
        per_batch = int(self.args.generation_batch_size or 0) // self.num_generations
        for epoch in (self._order_epoch, self._order_epoch + 1):
            batches = self._epoch_batches(epoch, per_batch)
            if list(tasks) not in batches:
                continue
            self._order_epoch = epoch
            later = batches[batches.index(list(tasks)) + 1 :]
            while len(later) < count:  # into the next epochs
                epoch += 1
                more = self._epoch_batches(epoch, per_batch)
                if not more:
                    break
                later += more
            return later[:count]
        return []

    def _epoch_batches(self, epoch: int, per_batch: int) -> list[list[tuple[str, int]]]:
        rows = self._task_rows or []
        if self.shuffle_dataset:
            generator = torch.Generator().manual_seed(int(self.args.seed) * 1_000_003 + epoch)
            order = torch.randperm(len(rows), generator=generator).tolist()
        else:
            order = list(range(len(rows)))
        return [[rows[i] for i in order[s : s + per_batch]] for s in range(0, len(order) - per_batch + 1, per_batch)]

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self._batch_steps = None
        try:
            return self._generate_and_score(inputs)
        finally:
            self._batch_steps = None

    def _generate_and_score(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self.batch_staleness = 0
        output = super()._generate_and_score_completions(inputs)
        if self._batch_steps is not None:
            output["step_spans"] = self._batch_steps  # a list: TRL shuffles and splits it with the tensors
        if not self.model.training:
            return output  # evaluation keeps TRL's scalar advantages
        completion_ids = output["completion_ids"]
        if self.batch_staleness > 0:  # generated by an older policy: the loss weighs it (_weigh_stale_rows)
            rows = completion_ids.shape[0]
            output["stale_rows"] = torch.ones(rows, dtype=torch.bool, device=completion_ids.device)
        batch = reward_batch(
            [row["trajectory"] for row in inputs],
            group_size=self.num_generations,
            length=completion_ids.shape[1],
            device=completion_ids.device,
            anchor=self.gigpo_anchor,
        )
        kl = self._token_kl(output, batch) if self.kl_coef else None
        output["advantages"] = compute_advantages(
            batch,
            self.algorithm,
            mode=self.advantage_mode,
            gamma=self.turn_gamma,
            kl_coef=self.kl_coef,
            kl=kl,
            scale=ScaleRewards(str(self.scale_rewards)),
            step_weight=self.gigpo_step_weight,
        )
        return output

    @torch.no_grad()
    def _token_kl(self, output: dict[str, Any], batch: RewardBatch) -> torch.Tensor:
        """``log pi_old - log pi_ref`` per model token (0 elsewhere), scored with TRL's own log-prob routine."""
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        ref, _, _ = self._get_per_token_logps_and_entropies(
            self.kl_reference,
            ids,
            mask,
            output["completion_ids"].shape[1],
            batch_size=self.args.per_device_train_batch_size,
        )
        kl = (batch.sampling_logprobs - ref.float()) * batch.model_mask
        tokens = batch.model_mask.sum().clamp(min=1)
        self._metrics["train"]["kl_reward/mean"].append(float(kl.sum() / tokens))
        return kl

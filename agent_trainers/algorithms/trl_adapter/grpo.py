"""GRPO, RLOO, REINFORCE++, REINFORCE++-baseline and GiGPO on TRL's ``GRPOTrainer``, with our rollouts.

TRL does the optimisation (batching, loss, clipping, optimizer, checkpoints). Our episodes reach its loss as
data: :class:`~agent_trainers.algorithms.EnvRolloutFunc` (TRL's ``rollout_func``) returns one ``trajectory`` per
rollout, which TRL merges into each input row; the generation batch becomes one
:class:`~agent_trainers.algorithms.shared.batch.AgentBatch`, and what TRL's loss reads of it goes into TRL's own
``inputs``, which TRL shuffles and splits into micro-batches with every other field. Two seams, each for one
reason:

* ``_generate_and_score_completions`` (TRL's, private: TRL 1.16 has no public advantage hook) - after TRL's own
  scoring, it builds the :class:`~agent_trainers.algorithms.shared.batch.AgentBatch` and replaces TRL's ``(B,)``
  group-normalised advantages with ``(B, T)`` per-token ones from the estimator registry
  (:mod:`agent_trainers.algorithms.shared.advantages`), with the per-step samples (``step_spans``) and a stale
  batch's rows (``stale_rows``) beside them. TRL's loss accepts ``(B, T)`` advantages as they are (it only
  unsqueezes ``(B,)`` ones) and its batch shuffling/splitting slices every field along dim 0.
* ``compute_loss`` (``transformers.Trainer``'s public seam) - hands TRL's loss, in the model's place, the policy
  as it scores this micro-batch (:class:`~agent_trainers.algorithms.trl_adapter.scoring.MicroBatchPolicy`: the
  loss-mask positions only, each turn after its step prompt where the batch says so, the importance weights of
  a stale batch), built from the micro-batch's own inputs.

Task order: the training rows are laid out in the order the steps play them
(:func:`~agent_trainers.rollout.training.task_schedule`, one seeded permutation per epoch) and TRL's sampler
reads them in order, so any step's tasks follow from the seed and the step alone (a run resumed in epoch 2 plays
what one that never stopped plays, and the asynchronous rollouts know the next steps' tasks ahead).

A step whose every advantage is 0 (every group tied) and whose loss has no KL term moves no weight: its gradient
is exactly 0, and ``training_step`` (``transformers.Trainer``'s public seam) drops it after the step's last
backward pass, so Adam skips every parameter (left in, Adam's first moment would still move every weight by about
the learning rate); ``update/skipped`` logs it. It reads only the gradients, which gradient accumulation and DDP
have made whole by then (the same on every process).

An idle micro-batch - every advantage in it exactly 0, and no loss term that does not go through the advantages
(no KL term in the loss, no entropy bonus, no auxiliary loss) - has a gradient of exactly 0, so in one process
``compute_loss`` does not run the model on it: the weights after the step are bit-identical, and a step whose
micro-batches are all idle costs no forward or backward pass at all (rejection sampling keeps few episodes; TRL
shuffles a step's rollouts before splitting them, so a tied group makes a micro-batch idle only by chance).
``update/idle_micro_batches`` counts them per step; TRL's ``entropy`` and ``clip_ratio`` are then over the
micro-batches that ran (absent when none did). Several processes run every micro-batch (a backward pass one process
left out would stall DDP's gradient exchange).

KL: for ``grpo`` and ``gigpo``, ``rl.beta`` is TRL's KL term in the loss; TRL builds the reference from a snapshot
of the policy as the stage starts (:mod:`~agent_trainers.algorithms.shared.reference`). For the REINFORCE family,
``beta`` goes into the reward instead: TRL gets ``beta = 0`` and this trainer scores the batch with the frozen
snapshot and hands ``KL_t = log pi_old - log pi_ref`` (sampling log-probs minus reference log-probs, per model
token) to the estimator. Either way the reference scores a training batch the way the loss scores the policy
(:meth:`AgentGRPOTrainer.reference_logps`): each group's prompt run once and the LM head on the loss-mask positions
only (TRL runs every padded row whole through it), or each turn after its step prompt; TRL's own reference pass is
switched off for it (its ``beta`` is 0 while it generates, so the reference runs once, not twice). Where the loss
goes through TRL's fused head (``cast_lm_head_to_fp32``, an auxiliary loss, a PEFT or wrapped model), TRL's
reference pass stays.

Several processes (``accelerate launch``): TRL's ``RepeatSampler`` puts the ``G`` copies of a prompt next to each
other and each process takes the next ``per_device_train_batch_size * steps_per_generation`` rows of the
generation batch, so a group stays on one process exactly when ``G`` divides that number; the trainer checks it
(:func:`check_groups_stay_local`), and group statistics (``grpo``, ``rloo``, the ``-baseline`` mean, ``gigpo``'s
anchor groups) are then the same as in one process. Batch statistics (``reinforce_pp``'s whitening,
``scale_rewards: batch``) are taken over each process's batch, not the global one (a warning says so).

Memory and time: micro-batches are TRL's own knobs (``per_device_train_batch_size`` below the group,
``gradient_accumulation_steps = steps_per_generation``; see
:func:`~agent_trainers.algorithms.trl_adapter.trl_args.micro_batch_args`); a micro-batch of a whole group runs
its shared prompt once.
"""

from __future__ import annotations

import copy
import math
import warnings
from typing import Any

import torch
from transformers import PreTrainedModel
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from agent_trainers.algorithms.shared.advantages import ESTIMATORS, compute_advantages
from agent_trainers.algorithms.shared.batch import AgentBatch
from agent_trainers.algorithms.shared.checkpoints import RolloutStateCallback
from agent_trainers.algorithms.shared.logprobs import shared_prompt_token_logprobs, supports_scored_logprobs
from agent_trainers.algorithms.shared.names import Algorithm, AnchorState, ISCorrection, ScaleRewards
from agent_trainers.algorithms.shared.reference import reference_policy, snapshot_reference
from agent_trainers.algorithms.shared.sections import TRLSettings
from agent_trainers.algorithms.trl_adapter.rollout_func import EnvRolloutFunc
from agent_trainers.algorithms.trl_adapter.scoring import MicroBatchPolicy, step_logprobs
from agent_trainers.rollout.training import Task, task_schedule

__all__ = ["AgentGRPOTrainer", "check_groups_stay_local"]

TRL_EOS_METRICS = (
    "completions/clipped_ratio",
    "completions/mean_terminated_length",
    "completions/min_terminated_length",
    "completions/max_terminated_length",
)
"""TRL's figures of completions that end on an EOS token, dropped from the logs: an episode's completion ends where
its env stopped it (an answer, the turn or token limit: ``rollout/stop/<reason>``), most often on a closing tag, so
TRL would count nearly every episode as clipped and log 0.0 as the terminated lengths."""


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


def _warn_batch_statistics(algorithm: Algorithm, settings: TRLSettings, args: Any) -> None:
    scale = getattr(settings, "scale_rewards", None)
    batch_stats = algorithm in (Algorithm.REINFORCE_PP, Algorithm.REINFORCE_PP_BASELINE) or (
        scale is ScaleRewards.BATCH
    )
    if batch_stats and args.world_size > 1:
        warnings.warn(
            f"{algorithm} with {args.world_size} processes normalises advantages over each process's batch "
            "(not the global batch); group baselines are unaffected",
            stacklevel=3,
        )


class AgentGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` with our rollouts and advantages from the estimator registry.

    Args:
        model: The policy (a ``PreTrainedModel``).
        reward_funcs: Usually ``[env_reward]``.
        args: A ``GRPOConfig`` (see :func:`~agent_trainers.algorithms.make_grpo_config`).
        algorithm: ``grpo``, ``rloo``, ``reinforce_pp``, ``reinforce_pp_baseline`` or ``gigpo``.
        settings: The algorithm's section (:mod:`~agent_trainers.algorithms.shared.sections`; None: its defaults):
            ``advantage``, ``gamma`` and what the estimator reads of it.
        step_samples: Score each turn after its own step prompt (``rl.step_samples``); always so for
            episodes played under a context other than ``append``.
        importance_sampling: How a batch generated by an older policy (``rl.async_rollouts``) reweights its
            policy loss (``rl.async_rollouts.importance_sampling``; :mod:`~agent_trainers.algorithms.shared.offpolicy`).
        importance_cap: Its bound (``rl.async_rollouts.importance_cap``).
        **kwargs: As for ``GRPOTrainer``; ``rollout_func`` must be an
            :class:`~agent_trainers.algorithms.EnvRolloutFunc` and ``train_dataset`` its rows (a ``datasets.Dataset``).

    Attributes:
        task_schedule: The tasks of each step, in order (read-only; the asynchronous rollouts read the next ones).
        tasks_in_generation: While TRL generates, the task of each of its prompts (from the rows' ``env_id`` and
            ``task_index``): the rollout function plays these (tasks may share a prompt); None otherwise.

    Example:
        >>> from agent_trainers.algorithms import RLOOSettings, env_reward, make_grpo_config
        >>> trainer = AgentGRPOTrainer(model=model, reward_funcs=[env_reward], args=make_grpo_config(...),
        ...     processing_class=tok, train_dataset=ds, rollout_func=EnvRolloutFunc(rows),
        ...     algorithm="rloo", settings=RLOOSettings(advantage="turn"))  # doctest: +SKIP
    """

    # narrower than TRL declares them, as this trainer is built: with a model, GRPOConfig arguments, the
    # EnvRolloutFunc that __init__ requires, and a group size it checks against the estimator's minimum
    model: PreTrainedModel | torch.nn.Module
    args: GRPOConfig
    rollout_func: EnvRolloutFunc
    num_generations: int

    skip_idle_micro_batches: bool = True
    """Do not run the model on a micro-batch whose gradient is exactly 0 (the module docstring); False runs every
    micro-batch (the same weights, a slower step)."""

    own_reference_scoring: bool = True
    """Score the KL reference of a training batch as the loss scores the policy (the module docstring); False keeps
    TRL's own reference pass (``benchmarks/kl_reference.py`` compares the two)."""

    def __init__(
        self,
        model: Any,
        reward_funcs: Any,
        args: Any,
        *,
        algorithm: Algorithm | str = Algorithm.GRPO,
        settings: TRLSettings | None = None,
        step_samples: bool = False,
        importance_sampling: ISCorrection | str = ISCorrection.TOKEN_TRUNCATE,
        importance_cap: float = 2.0,
        **kwargs: Any,
    ):
        self.algorithm = Algorithm(algorithm)
        estimator = ESTIMATORS[self.algorithm]
        self.settings = estimator.settings() if settings is None else settings
        self.step_samples = bool(step_samples)
        self.importance_sampling = ISCorrection(importance_sampling)
        self.importance_cap = float(importance_cap)
        if not isinstance(kwargs.get("rollout_func"), EnvRolloutFunc):
            raise TypeError(
                f"AgentGRPOTrainer needs an EnvRolloutFunc rollout_func (got {type(kwargs.get('rollout_func'))})"
            )
        if args.num_generations < estimator.min_group_size:
            raise ValueError(
                f"{self.algorithm} needs num_generations >= {estimator.min_group_size} (got {args.num_generations})"
            )
        check_groups_stay_local(args)
        _warn_batch_statistics(self.algorithm, self.settings, args)
        args = copy.copy(args)
        kwargs["train_dataset"], self.task_schedule = _in_step_order(kwargs.get("train_dataset"), args)
        args.shuffle_dataset = False  # the rows are in the order the steps play them
        self.kl_coef = float(args.beta) if estimator.kl_in_reward else 0.0
        main = args.process_index == 0
        reference = reference_policy(model, args.output_dir, main_process=main) if self.kl_coef else None
        if self.kl_coef:
            args.beta = 0.0  # the KL goes into the reward, not into TRL's loss
        elif args.beta:
            snapshot_reference(model, args.output_dir, main_process=main)
        super().__init__(model=model, reward_funcs=reward_funcs, args=args, **kwargs)
        self.kl_reference = None
        if reference is not None:
            add_fused_lm_head(reference, temperature=self.temperature, cast_lm_head_to_fp32=args.cast_lm_head_to_fp32)
            self.kl_reference = self.accelerator.prepare_model(reference, evaluation_mode=True)
        self.add_callback(RolloutStateCallback(self.rollout_func))
        self.tasks_in_generation: list[Task] | None = None
        self._window = _Window()

    def upcoming_tasks(self, tasks: list[Task], count: int) -> list[list[Task]]:
        """The tasks of the (at most ``count``) steps after the current one (:attr:`task_schedule`), when the current
        call plays this step's scheduled ``tasks``; else none (the asynchronous rollouts then generate the next
        call when it comes)."""
        step = int(self.state.global_step)
        if step >= len(self.task_schedule) or list(tasks) != self.task_schedule[step]:
            return []
        return self.task_schedule[step + 1 : step + 1 + max(count, 0)]

    def compute_loss(
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        """TRL's loss, scored by the micro-batch's own policy view (:class:`MicroBatchPolicy`); 0 without running the
        model for an idle micro-batch (the module docstring)."""
        if self.model.training:
            self._window.micro_batches += 1
            if self._idle(inputs):
                self._window.idle += 1
                return torch.zeros((), device=self.accelerator.device, requires_grad=True)
        inputs = dict(inputs)  # a stale micro-batch's weighted advantages stay in this copy
        mode = "train" if self.model.training else "eval"
        policy = MicroBatchPolicy(
            model,
            inputs,
            temperature=self.temperature,
            own_scoring=self._loss_scores_itself(),
            importance_sampling=self.importance_sampling,
            importance_cap=self.importance_cap,
            log_metric=lambda name, value: self._metrics[mode][name].append(value),
        )
        return super().compute_loss(policy, inputs, return_outputs, num_items_in_batch)

    def training_step(self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> torch.Tensor:
        """TRL's step; after the last micro-batch of an optimizer step, an update that carries no signal is dropped
        (the module docstring)."""
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.model.training and self.accelerator.sync_gradients:
            self._drop_signal_free_update()
            self._metrics["train"]["update/idle_micro_batches"].append(float(self._window.idle))
            self._window = _Window()
        return loss

    def _idle(self, inputs: dict[str, Any]) -> bool:
        """Whether this micro-batch's gradient is exactly 0 and this process may leave it out (the module
        docstring): every advantage 0 and no loss term outside them, in one process without DeepSpeed or FSDP."""
        return bool(
            self.skip_idle_micro_batches
            and self.accelerator.num_processes == 1
            and not (self.is_deepspeed_enabled or self.is_fsdp_enabled)
            and not self.beta
            and not self.aux_loss_enabled
            and not (self.args.entropy_coef or self.args.use_adaptive_entropy)
            and not inputs["advantages"].any()
        )

    def _drop_signal_free_update(self) -> None:
        """Set every gradient to None when the loss has no KL term and every gradient is exactly 0 (all advantages
        0: every group tied), so Adam skips every parameter; log ``update/skipped`` (1 dropped, 0 taken). No
        gradient at all is a dropped update when every micro-batch was idle; otherwise nothing is logged where the
        gradients cannot be seen (DeepSpeed keeps its own)."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if not grads:
            if self._window.micro_batches and self._window.idle == self._window.micro_batches:
                self._metrics["train"]["update/skipped"].append(1.0)
            return
        skip = not self.beta and not any(bool(g.any()) for g in grads)
        if skip:
            for p in self.model.parameters():
                p.grad = None
        self._metrics["train"]["update/skipped"].append(1.0 if skip else 0.0)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self.tasks_in_generation = [(str(row["env_id"]), int(row["task_index"])) for row in inputs]
        own_reference = bool(self.beta) and self.model.training and self._scores_like_the_loss(self.ref_model)
        beta = self.beta
        try:
            if own_reference:
                self.beta = 0.0  # TRL's reference pass is skipped; the reference is scored below
            output = super()._generate_and_score_completions(inputs)
        finally:
            self.beta = beta
            self.tasks_in_generation = None
        mode = "train" if self.model.training else "eval"
        for name in TRL_EOS_METRICS:  # an episode ends on its env's terms (rollout/stop/<reason>), not on EOS
            self._metrics[mode].pop(name, None)
        if not self.model.training:
            return output  # evaluation keeps TRL's scalar advantages
        completion_ids = output["completion_ids"]
        batch = AgentBatch.from_trajectories(
            [row["trajectory"] for row in inputs],
            group_size=self.num_generations,
            width=completion_ids.shape[1],
            device=completion_ids.device,
            loss_mask=self.rollout_func.loss_mask,
            step_samples=self.step_samples,
            anchor=getattr(self.settings, "anchor", AnchorState.OBSERVATION),
            staleness=int(inputs[0].get("staleness", 0)),
        )
        if own_reference or (batch.steps is not None and "ref_per_token_logps" in output):
            output["ref_per_token_logps"] = self.reference_logps(self.ref_model, output, batch)
        kl = self._token_kl(output, batch) if self.kl_coef else None
        batch.advantages = compute_advantages(batch, self.algorithm, self.settings, kl_coef=self.kl_coef, kl=kl)
        output["advantages"] = batch.advantages
        if batch.steps is not None:
            output["step_spans"] = batch.steps  # a list: TRL shuffles and splits it with the tensors
        if batch.staleness:  # generated by an older policy: the loss weighs it (MicroBatchPolicy)
            rows = completion_ids.shape[0]
            output["stale_rows"] = torch.ones(rows, dtype=torch.bool, device=completion_ids.device)
        return output

    def _loss_scores_itself(self) -> bool:
        """Whether the loss may score the policy by its own routine (:class:`MicroBatchPolicy`): not where TRL must
        cast the LM head to float32 or add a mixture-of-experts loss."""
        return not (self.args.cast_lm_head_to_fp32 or self.aux_loss_enabled)

    def _scores_like_the_loss(self, model: Any) -> bool:
        """Whether a reference of ``model``'s kind is scored as the loss scores the policy (by its own routine)."""
        return (
            self.own_reference_scoring
            and model is not None
            and self._loss_scores_itself()
            and supports_scored_logprobs(model)
        )

    @torch.no_grad()
    def reference_logps(self, reference: Any, output: dict[str, Any], batch: AgentBatch) -> torch.Tensor:
        """``log pi_ref`` of the completion tokens ``(B, T)``, scored as the loss scores the policy: by step when
        the batch is scored by step; else each group's prompt once and the LM head on the loss-mask positions only
        (0 elsewhere), ``per_device_train_batch_size`` rows at a time; else (a model that routine cannot score)
        with TRL's own routine."""
        completion_ids = output["completion_ids"]
        width = completion_ids.shape[1]
        if batch.steps is not None:
            with self.accelerator.autocast():
                logps, _ = step_logprobs(reference, completion_ids, batch.steps, None, temperature=self.temperature)
            return logps
        ids = torch.cat([output["prompt_ids"], completion_ids], dim=1)
        mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        rows = self.args.per_device_train_batch_size
        if not self._scores_like_the_loss(reference):
            logps, _, _ = self._get_per_token_logps_and_entropies(reference, ids, mask, width, batch_size=rows)
            return logps
        tool_mask = output.get("tool_mask")
        scored = output["completion_mask"] if tool_mask is None else output["completion_mask"] * tool_mask
        parts = []
        with self.accelerator.autocast():
            for start in range(0, ids.shape[0], rows):
                part = slice(start, start + rows)
                logps, _ = shared_prompt_token_logprobs(
                    reference, ids[part], mask[part], width, scored[part], temperature=self.temperature
                )
                parts.append(logps)
        return torch.cat(parts)

    def _token_kl(self, output: dict[str, Any], batch: AgentBatch) -> torch.Tensor:
        """``log pi_old - log pi_ref`` per model token (0 elsewhere) against the frozen reference."""
        ref = self.reference_logps(self.kl_reference, output, batch)
        kl = (batch.behaviour_logprobs - ref.float()) * batch.model_mask
        tokens = batch.model_mask.sum().clamp(min=1)
        self._metrics["train"]["kl_reward/mean"].append(float(kl.sum() / tokens))
        return kl


class _Window:
    """The micro-batches of the optimizer step under way: how many ran through ``compute_loss``, how many idle."""

    def __init__(self) -> None:
        self.micro_batches = 0
        self.idle = 0


def _in_step_order(dataset: Any, args: Any) -> tuple[Any, list[list[Task]]]:
    """The training rows laid out in the order the steps play them, and each step's tasks (the module docstring).

    With ``args.shuffle_dataset`` false the rows keep their given order, which TRL's sampler walks epoch after
    epoch (an epoch's last incomplete batch left out).
    """
    if dataset is None or not hasattr(dataset, "select"):
        raise TypeError("AgentGRPOTrainer needs the rollout rows as a datasets.Dataset train_dataset")
    n = len(dataset)
    per_step = args.generation_batch_size // args.num_generations  # tasks per step, over every process
    steps = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs) * (n // per_step)
    tasks = list(zip(map(str, dataset["env_id"]), map(int, dataset["task_index"]), strict=True))
    if args.shuffle_dataset:
        schedule = task_schedule(list(range(n)), per_step, steps, int(args.seed))
        dataset = dataset.select([i for step in schedule for i in step])
    else:
        batches = max(n // per_step, 1)
        schedule = [[(k % batches) * per_step + j for j in range(per_step)] for k in range(steps)]
    return dataset, [[tasks[i] for i in step] for step in schedule]

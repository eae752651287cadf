"""The generation worker's process side (``rl.async_rollouts``): what a job and its result hold, and the
process's main loop, which builds the policy on the trainer's device and plays each job with the weights of the
version it names. The trainer's side is :class:`~agent_trainers.rollout.async_worker.AsyncRollouts`.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agent_trainers.rollout.config import RolloutConfig
from agent_trainers.rollout.training import EnvRollouts, Task
from agent_trainers.rollout.types import Trajectory

__all__ = ["GenerationJob", "GenerationResult", "Task", "worker_main"]


@dataclass(frozen=True)
class GenerationJob:
    """One rollout call for the worker.

    Attributes:
        job: A number unique to this job (a call can be submitted again after a misprediction).
        call: The rollout call's index (it seeds the episodes, as in a synchronous run).
        tasks: ``(env_id, task_index)`` of each group.
        group: Rollouts per task.
        config: The rollout settings.
        version: The weight version (optimizer steps taken) the call must be generated with.
    """

    job: int
    call: int
    tasks: tuple[Task, ...]
    group: int
    config: RolloutConfig
    version: int


@dataclass
class GenerationResult:
    """What the worker sends back for a job.

    Attributes:
        call: The job's call.
        tasks: The job's tasks.
        version: The weights it was generated with.
        trajectories: The episodes (dynamic sampling's refills included).
        stats: Dynamic sampling's figures of the call (``EnvRollouts.last_stats``).
        seconds: Generation time in the worker.
        idle: Seconds the worker waited for this job after the previous one ended.
        rng_state: The worker's torch RNG state after the call. The trainer continues from it, as it would had
            it generated the call itself (sampling reseeds and draws from torch's global generator, and TRL
            shuffles a batch with it): so staleness 0 reproduces the synchronous run bit for bit.
        cuda_rng_state: The same for the CUDA generator of the worker's GPU (None on a CPU).
    """

    call: int
    tasks: tuple[Task, ...]
    version: int
    trajectories: list[Trajectory]
    stats: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    idle: float = 0.0
    rng_state: torch.Tensor | None = None
    cuda_rng_state: torch.Tensor | None = None


def worker_main(
    jobs: Any,
    results: Any,
    lock: Any,
    version: Any,
    shared: dict[str, torch.Tensor],
    spec: dict[str, Any],
) -> None:
    """The worker process: build the model, then play each job with the weights of the version it names."""
    try:
        torch.set_num_threads(int(spec["threads"]))
        _register(spec["env_specs"])
        model = _build_model(spec)
        rollouts: EnvRollouts = spec["rollouts"]
        tokenizer = spec["tokenizer"]
    except BaseException:  # reported to the trainer, which raises it
        results.put(("error", -1, traceback.format_exc()))
        return
    results.put(("ready", -1, None))
    ended = time.perf_counter()
    while True:
        job: GenerationJob | None = jobs.get()
        if job is None:
            return
        started = time.perf_counter()
        try:
            with lock:
                if int(version.value) != job.version:
                    raise RuntimeError(
                        f"call {job.call} must be generated with weights v{job.version}, the shared copy holds "
                        f"v{int(version.value)}"
                    )
                model.load_state_dict(shared, strict=True)
                synchronize(model_device(model))  # the copy is done before the trainer may write the next version
            results.put(("started", job.job, None))
            rollouts.calls = job.call
            trajectories = rollouts.play(list(job.tasks), job.group, rollouts._policy(model, tokenizer), job.config)
            result = GenerationResult(
                job.call,
                job.tasks,
                job.version,
                trajectories,
                dict(rollouts.last_stats),
                seconds=time.perf_counter() - started,
                idle=started - ended,
                rng_state=torch.get_rng_state(),
                cuda_rng_state=_cuda_rng_state(model),
            )
            results.put(("done", job.job, result))
        except BaseException:  # any failure of a job ends the worker; the trainer raises it
            results.put(("error", job.job, f"call {job.call}:\n{traceback.format_exc()}"))
            return
        ended = time.perf_counter()


def _register(specs: Sequence[Any]) -> None:
    """Register the trainer's env ids that this process does not know (ids a user registered in a script)."""
    import gymnasium as gym

    import agent_gym  # noqa: F401  (the built-in ids)

    for spec in specs:
        if spec.id not in gym.registry:
            gym.register(**{k: getattr(spec, k) for k in _SPEC_FIELDS})


_SPEC_FIELDS = (
    "id",
    "entry_point",
    "reward_threshold",
    "nondeterministic",
    "max_episode_steps",
    "order_enforce",
    "disable_env_checker",
    "additional_wrappers",
    "vector_entry_point",
    "kwargs",
)


def _build_model(spec: Mapping[str, Any]) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    with torch.device(spec["device"]):
        model = AutoModelForCausalLM.from_config(spec["config"], dtype=spec["dtype"])
    if spec.get("generation_config") is not None:
        model.generation_config = spec["generation_config"]
    model.eval().requires_grad_(False)
    return model


def synchronize(device: torch.device) -> None:
    """Wait for the copies queued on ``device`` if it is a GPU (copies there are asynchronous; a CPU copy has
    finished already)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _cuda_rng_state(model: torch.nn.Module) -> torch.Tensor | None:
    device = model_device(model)
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s (first) parameters."""
    return next(model.parameters()).device

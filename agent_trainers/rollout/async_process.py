"""The generation worker's process side (``rl.async_rollouts``): what a job and its result hold, and the
process's main loop, which builds the policy on the trainer's device and plays each job with the weights of the
version it names. The trainer's side is :class:`~agent_trainers.rollout.async_worker.AsyncRollouts`.

The process talks to its trainer through two one-way pipes (jobs in, results out) and reads the weights' version
from a shared tensor: no named semaphore (a ``multiprocessing`` queue, lock or value makes them in ``/dev/shm``,
where a kill of every process at once leaves them). It dies with its trainer: a thread reads the job pipe, whose
end-of-file means the trainer is gone (a ``kill -9`` closes its end too), and checks every second that its parent
is still the trainer (a forked child of the trainer may hold the pipe's end open); either ends the process at
once, whatever it is doing.
"""

from __future__ import annotations

import base64
import os
import queue
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agent_trainers.errors import EnvFailureError
from agent_trainers.rollout.config import RolloutConfig
from agent_trainers.rollout.export import trajectory_from_dict, trajectory_to_dict
from agent_trainers.rollout.training import EnvRollouts, Task
from agent_trainers.rollout.types import Trajectory

__all__ = ["ORPHAN_CHECK_S", "GenerationJob", "GenerationResult", "Task", "worker_main"]

ORPHAN_CHECK_S = 1.0
"""How often the worker checks that its parent is still the trainer that started it (seconds)."""


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
        rng_state: The worker's torch RNG state after the call (``torch.get_rng_state()``'s bytes). The trainer
            continues from it, as it would had it generated the call itself (sampling reseeds and draws from
            torch's global generator, and TRL shuffles a batch with it): so staleness 0 reproduces the synchronous
            run bit for bit.
        cuda_rng_state: The same for the CUDA generator of the worker's GPU (None on a CPU).
    """

    call: int
    tasks: tuple[Task, ...]
    version: int
    trajectories: list[Trajectory]
    stats: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    idle: float = 0.0
    rng_state: bytes | None = None
    cuda_rng_state: bytes | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (trajectories as :func:`~agent_trainers.rollout.export.trajectory_to_dict`, RNG
        states in base64): what a checkpoint keeps of a result not yet consumed."""
        return {
            "call": self.call,
            "tasks": [[env_id, index] for env_id, index in self.tasks],
            "version": self.version,
            "trajectories": [trajectory_to_dict(t) for t in self.trajectories],
            "stats": dict(self.stats),
            "seconds": self.seconds,
            "idle": self.idle,
            "rng_state": _b64(self.rng_state),
            "cuda_rng_state": _b64(self.cuda_rng_state),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GenerationResult:
        """Rebuild a result from :meth:`to_dict`.

        Raises:
            ValueError: A field is missing or of the wrong type (trajectories are checked by
                :func:`~agent_trainers.rollout.export.trajectory_from_dict`).
        """
        try:
            return cls(
                call=int(data["call"]),
                tasks=tuple((str(env_id), int(index)) for env_id, index in data["tasks"]),
                version=int(data["version"]),
                trajectories=[trajectory_from_dict(t) for t in data["trajectories"]],
                stats={str(k): float(v) for k, v in data["stats"].items()},
                seconds=float(data["seconds"]),
                idle=float(data["idle"]),
                rng_state=_unb64(data["rng_state"]),
                cuda_rng_state=_unb64(data["cuda_rng_state"]),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as error:
            raise ValueError(f"not a generation result ({type(error).__name__}: {error})") from None


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: Any) -> bytes | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"an RNG state is a base64 string (got {type(text).__name__})")
    return base64.b64decode(text, validate=True)


def rng_bytes(state: torch.Tensor) -> bytes:
    """A torch RNG state (a ``uint8`` tensor) as bytes."""
    return state.cpu().numpy().tobytes()


def rng_tensor(data: bytes) -> torch.Tensor:
    """The ``uint8`` tensor :func:`torch.set_rng_state` takes, from :func:`rng_bytes`' bytes."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def worker_main(
    jobs: Any,
    results: Any,
    version: torch.Tensor,
    shared: dict[str, torch.Tensor],
    spec: dict[str, Any],
) -> None:
    """The worker process: build the model, then play each job with the weights of the version it names.

    Args:
        jobs: The read end of the job pipe (a ``GenerationJob``, or ``None``: stop).
        results: The write end of the result pipe (``(kind, job, payload)`` messages).
        version: The shared one-element tensor naming the version the shared weights hold (-1 while the trainer
            writes them).
        shared: The shared copy of the state dict.
        spec: What the process needs to build its model and rollouts (and ``parent``: the trainer's pid).
    """
    inbox: queue.Queue[GenerationJob | None] = queue.Queue()
    threading.Thread(target=_watch_trainer, args=(jobs, inbox, int(spec["parent"])), daemon=True).start()
    _thread_lock_for_progress_bars()
    outbox = _Sender(results)
    try:
        _serve(inbox, outbox, version, shared, spec)
    finally:
        outbox.close()


def _serve(
    inbox: queue.Queue[GenerationJob | None],
    outbox: _Sender,
    version: torch.Tensor,
    shared: dict[str, torch.Tensor],
    spec: dict[str, Any],
) -> None:
    try:
        torch.set_num_threads(int(spec["threads"]))
        _register(spec["env_specs"])
        model = _build_model(spec)
        rollouts: EnvRollouts = spec["rollouts"]
        tokenizer = spec["tokenizer"]
    except BaseException as error:  # reported to the trainer, which raises it
        outbox.put(("error", -1, _failure(error)))
        return
    outbox.put(("ready", -1, None))
    ended = time.perf_counter()
    while True:
        job = inbox.get()
        if job is None:
            return
        started = time.perf_counter()
        try:
            _take_weights(model, version, shared, job)
            outbox.put(("started", job.job, None))
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
                rng_state=rng_bytes(torch.get_rng_state()),
                cuda_rng_state=_cuda_rng_state(model),
            )
            outbox.put(("done", job.job, result))
        except BaseException as error:  # any failure of a job ends the worker; the trainer raises it
            text, stop = _failure(error)
            outbox.put(("error", job.job, (f"call {job.call}:\n{text}", stop)))
            return
        ended = time.perf_counter()


def _take_weights(model: torch.nn.Module, version: torch.Tensor, shared: dict[str, torch.Tensor], job: Any) -> None:
    """Copy the shared weights into ``model``, checking they are the job's version before and after the copy (the
    trainer writes -1 while it writes a new version, and never while a job tagged older is waiting to start)."""
    before = int(version.item())
    if before != job.version:
        raise RuntimeError(
            f"call {job.call} must be generated with weights v{job.version}, the shared copy holds v{before}"
        )
    model.load_state_dict(shared, strict=True)
    synchronize(model_device(model))  # the copy is done before the trainer may write the next version
    after = int(version.item())
    if after != job.version:
        raise RuntimeError(f"the shared weights changed (v{job.version} -> v{after}) while call {job.call} read them")


def _failure(error: BaseException) -> tuple[str, BaseException | None]:
    """A failure as the trainer gets it: the traceback, and the error itself when the trainer raises it as is."""
    text = traceback.format_exc()
    return text, (error if isinstance(error, EnvFailureError) else None)


def _thread_lock_for_progress_bars() -> None:
    """tqdm makes a ``multiprocessing`` lock (a named semaphore in ``/dev/shm``) for its first bar (bm25s draws one
    while indexing, even hidden); this process starts no process of its own, so a thread lock does."""
    try:
        from tqdm import tqdm
    except ImportError:
        return
    tqdm.set_lock(threading.RLock())


def _watch_trainer(jobs: Any, inbox: queue.Queue[GenerationJob | None], parent: int) -> None:
    """Hand the jobs to the main loop; end the process as soon as the trainer is gone (see the module docstring)."""
    while True:
        try:
            if not jobs.poll(ORPHAN_CHECK_S):
                if os.getppid() != parent:
                    os._exit(0)  # the trainer died: nobody will read what this process makes
                continue
            job = jobs.recv()
        except (EOFError, OSError):  # the trainer's end closed without a stop: it died
            os._exit(0)
        inbox.put(job)
        if job is None:
            return


class _Sender:
    """Sends the worker's messages from a thread, so that a large result never blocks generation while the trainer
    trains (a pipe holds a few kilobytes); the messages keep their order."""

    def __init__(self, results: Any):
        self._results = results
        self._queue: queue.Queue[tuple[str, int, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def put(self, message: tuple[str, int, Any]) -> None:
        self._queue.put(message)

    def close(self) -> None:
        """Send what is queued, then stop."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (message := self._queue.get()) is not None:
            try:
                self._results.send(message)
            except (BrokenPipeError, EOFError, OSError):  # the trainer is gone
                os._exit(0)


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


def _cuda_rng_state(model: torch.nn.Module) -> bytes | None:
    device = model_device(model)
    return rng_bytes(torch.cuda.get_rng_state(device)) if device.type == "cuda" else None


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s (first) parameters."""
    return next(model.parameters()).device

"""Rollouts generated while the trainer trains: a generation worker process and :class:`AsyncRollouts`.

With ``rl.async_rollouts`` the episodes of step ``t + 1`` are played while step ``t`` trains, by a separate
process that holds its own copy of the policy (``generation_threads`` torch threads; the trainer keeps
``threads``), on the trainer's device. Weights travel through one shared copy of the state dict: in shared
memory on a CPU; on a GPU a second copy on the same GPU, which the worker maps through CUDA IPC (torch's
``multiprocessing`` hands CUDA tensors over without a host round trip), so a weight sync is two device-to-device
copies:

* the trainer **publishes** version ``v`` (the weights after ``v`` optimizer steps) into it at the start of
  the rollout call of step ``v``;
* every job names the version it must be generated with (the one current when it was submitted); the worker
  copies the shared weights into its private model as it starts a job, after checking the version, and
  acknowledges; the trainer publishes a newer version only once every job tagged with an older one has started.
  So which weights generate which batch never depends on timing: a run is as reproducible as a synchronous one.

At the rollout call of step ``t`` the trainer publishes ``v = t``, submits the jobs of the next
``max_staleness`` calls (tagged ``t``), then takes call ``t``'s result (tagged ``t - max_staleness`` once the
pipeline is full: that is its *staleness*). ``max_staleness: 0`` submits nothing ahead: each call is generated
with the current weights, in the worker, and the run equals the synchronous one. The tasks of later calls come
from the trainer (``upcoming``); a job whose tasks turn out not to be the call's (a different order after a
resume, say) is dropped and the call generated afresh (``async/mispredicted``).

Faults: a worker that exits, raises or sends nothing for ``generation_timeout`` seconds is a
:class:`GenerationWorkerError` naming what happened; the worker is stopped, nothing of the step is saved (the last
checkpoint stays as it was) and ``--resume`` continues from it. A trainer that dies (``kill -9``, ``SIGTERM``)
takes its worker with it within a second, and leaves nothing in ``/dev/shm`` (the worker's side:
:mod:`~agent_trainers.rollout.async_process`). For an exact resume a checkpoint also holds the results of the
jobs in flight (:meth:`AsyncRollouts.save`, waited for; JSON, read back without unpickling anything): the resumed
run trains on the same stale batches as one that never stopped.

The process's own side (the job and result types, its main loop) is
:mod:`~agent_trainers.rollout.async_process`.

What was reused from TRL 1.16: the importance-sampling modes and their names (see
:mod:`agent_trainers.algorithms.shared.offpolicy`). Not reused: ``trl.experimental.async_grpo`` (its rollout worker
drives a vLLM server over HTTP and syncs weights with NCCL, and it generates single-turn completions, not our env
episodes). The worker generates with ``transformers`` (our rollout engine); overlapping vLLM generation (a
section's ``vllm``) is not implemented.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from agent_gym.core.files import write_atomic
from agent_trainers.errors import EnvFailureError, GenerationWorkerError
from agent_trainers.rollout.async_process import (
    GenerationJob,
    GenerationResult,
    model_device,
    rng_tensor,
    synchronize,
    worker_main,
)
from agent_trainers.rollout.config import RolloutConfig
from agent_trainers.rollout.training import EnvRollouts, Task
from agent_trainers.rollout.types import Trajectory

__all__ = [
    "ASYNC_PENDING",
    "AsyncRollouts",
    "GenerationJob",
    "GenerationResult",
    "GenerationWorkerError",
    "read_pending",
]

ASYNC_PENDING = "async_pending.json"
"""The file of a checkpoint that holds the results of the jobs in flight when it was saved (JSON)."""

_OLD_PENDING = "async_pending.pkl"
"""Where checkpoints kept them before (a pickle, which a resume no longer reads: unpickling runs code)."""

# ---------------------------------------------------------------------------------------------- the trainer


def _env_specs(rollouts: EnvRollouts) -> list[Any]:
    import gymnasium as gym

    ids = dict.fromkeys(str(row["env_id"]) for row in rollouts.rows)
    # a "module:Name-v0" id registers itself in the worker when gym.make imports its module
    return [gym.spec(env_id) for env_id in ids if ":" not in env_id]


@dataclass
class _Submitted:
    call: int
    tasks: tuple[Task, ...]
    version: int
    started: bool = False
    discard: bool = False


class AsyncRollouts:
    """The trainer's side: publishes weights, submits calls ahead, hands each call its (possibly stale) episodes.

    Args:
        rollouts: The trainer's rollout player; the worker gets a plain
            :class:`~agent_trainers.rollout.training.EnvRollouts` copy of its fields (its
            ``policy_factory``, if any, must pickle).
        model: The policy being trained (its config, dtype and weights are copied).
        tokenizer: Its tokenizer.
        max_staleness: Calls generated ahead (``rl.async_rollouts.max_staleness``): 0 generates each call with the
            current weights.
        threads: torch threads of the worker (``rl.async_rollouts.generation_threads``).
        timeout: Seconds without word from the worker before :class:`GenerationWorkerError`
            (``rl.async_rollouts.generation_timeout``).

    Example:
        >>> pool = AsyncRollouts(rollouts, model, tokenizer, max_staleness=1)  # doctest: +SKIP
        >>> episodes, stats = pool.rollouts_for(  # doctest: +SKIP
        ...     0, tasks, 8, config, model, version=0, upcoming=[next_tasks])
        >>> pool.close()  # doctest: +SKIP
    """

    def __init__(
        self,
        rollouts: EnvRollouts,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        max_staleness: int = 1,
        threads: int = 1,
        timeout: float = 600.0,
    ):
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0 (got {max_staleness})")
        if not timeout > 0:
            raise ValueError(f"the generation timeout must be > 0 seconds (got {timeout})")
        self.max_staleness, self.timeout = int(max_staleness), float(timeout)
        self._device = device = model_device(model)
        if device.type == "cpu":  # shared memory the worker maps
            self._state = {k: v.detach().to("cpu", copy=True).share_memory_() for k, v in model.state_dict().items()}
        elif device.type == "cuda":  # a second copy on the same GPU, which the worker maps through CUDA IPC
            self._state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            synchronize(device)
        else:
            raise ValueError(f"asynchronous rollouts run on a CPU or a CUDA GPU; the model is on {device}")
        base = {f.name: getattr(rollouts, f.name) for f in fields(EnvRollouts) if f.init and f.name != "asynchronous"}
        self._spec = {
            "env_specs": _env_specs(rollouts),
            "rollouts": EnvRollouts(**base),
            "tokenizer": tokenizer,
            "config": model.config,
            "dtype": next(model.parameters()).dtype,
            "generation_config": getattr(model, "generation_config", None),
            "threads": int(threads),
            "device": str(device),
        }
        self._ctx = torch.multiprocessing.get_context("spawn")
        self._process: Any = None
        self._jobs: Any = None
        self._results: Any = None
        self._version = torch.full((), -1, dtype=torch.int64).share_memory_()  # -1: being written
        self._published = -1
        self._jobs_made = 0
        self._submitted: dict[int, _Submitted] = {}  # by job number
        self._done: dict[int, GenerationResult] = {}

    # ------------------------------------------------------------------ the process
    def start(self) -> None:
        """Start the worker (done by the first call); waits until its model is built."""
        if self._process is not None:
            return
        ctx = self._ctx
        jobs_end, self._jobs = ctx.Pipe(duplex=False)  # pipes, not queues: no named semaphore in /dev/shm
        self._results, results_end = ctx.Pipe(duplex=False)
        self._version.fill_(-1)
        self._process = ctx.Process(
            target=worker_main,
            args=(jobs_end, results_end, self._version, self._state, {**self._spec, "parent": os.getpid()}),
            name="agent-r1-generation",
            daemon=True,
        )
        try:
            self._process.start()
        except BaseException as error:
            self._process = None
            for end in (jobs_end, results_end, self._jobs, self._results):
                end.close()
            if not isinstance(error, AttributeError | TypeError | pickle.PicklingError):  # what spawn's pickling raises
                raise
            raise ValueError(
                "rl.async_rollouts starts its generation worker with everything it needs pickled (the rollout "
                f"settings, the tokenizer, a policy_factory if one is set; a lambda or a local function is not): "
                f"{error}"
            ) from error
        finally:  # the worker's ends: held here too, they would hide its death (and the trainer's, from it)
            if self._process is not None:
                jobs_end.close()
                results_end.close()
        kind, _, _ = self._receive("to build its model")
        if kind != "ready":
            raise GenerationWorkerError(f"the generation worker sent {kind!r} before it was ready")

    def close(self, *, kill: bool = False) -> None:
        """Stop the worker (jobs in flight are abandoned): asked to end, or at once with ``kill``."""
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(Exception):
            self._jobs.send(None)
        if not kill:
            process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)
        for end in (self._jobs, self._results):
            end.close()
        self._submitted.clear()
        self._published = -1  # a restarted worker gets the weights published again

    def __enter__(self) -> AsyncRollouts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """The worker's process id (None before it starts)."""
        return None if self._process is None else int(self._process.pid)

    # ------------------------------------------------------------------ the protocol
    def rollouts_for(
        self,
        call: int,
        tasks: Sequence[Task],
        group: int,
        config: RolloutConfig,
        model: torch.nn.Module,
        *,
        version: int,
        upcoming: Sequence[Sequence[Task]] = (),
    ) -> tuple[list[Trajectory], dict[str, float]]:
        """The episodes of rollout call ``call``, and its figures: dynamic sampling's and ``async/*``.

        Args:
            call: This call's index (``EnvRollouts.calls``).
            tasks: Its tasks.
            group: Rollouts per task.
            config: Rollout settings (the same for the calls submitted ahead).
            model: The policy as it is now (published as ``version``).
            version: Optimizer steps taken so far.
            upcoming: The tasks of the next calls, in order (at most ``max_staleness`` are submitted).

        Raises:
            GenerationWorkerError: The worker died, failed or hung (see the module docstring).
        """
        began = time.perf_counter()
        self.start()
        want = tuple((str(e), int(i)) for e, i in tasks)
        mispredicted = 0.0
        known = self._done.get(call) or self._pending(call)
        if known is not None and known.tasks != want:
            mispredicted = 1.0
            self._drop(call)
        self.publish(model, version)
        if self._done.get(call) is None and self._pending(call) is None:
            self._submit(call, want, group, config, version)
        for ahead, next_tasks in enumerate(list(upcoming)[: self.max_staleness], start=1):
            later = call + ahead
            if later not in self._done and self._pending(later) is None:
                self._submit(later, tuple((str(e), int(i)) for e, i in next_tasks), group, config, version)
        result = self._await(call)
        if result.rng_state is not None:
            torch.set_rng_state(rng_tensor(result.rng_state))
        if result.cuda_rng_state is not None:
            torch.cuda.set_rng_state(rng_tensor(result.cuda_rng_state), self._device)
        stats = {
            **result.stats,
            "async/staleness": float(version - result.version),
            "async/trainer_wait": time.perf_counter() - began,
            "async/generation_time": result.seconds,
            "async/worker_idle": result.idle,
            "async/mispredicted": mispredicted,
        }
        return result.trajectories, stats

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """Copy ``model``'s weights into the shared copy as ``version``, once every job tagged older has started."""
        if version == self._published:
            return
        if version < self._published:
            raise ValueError(f"weights v{version} published after v{self._published}")
        while any(not s.started and s.version < version for s in self._submitted.values()):
            self._handle(*self._receive("to start a job"))
        source = model.state_dict()
        with torch.no_grad():
            self._version.fill_(-1)  # a worker that read now would see it (it checks before and after its copy)
            for name, dst in self._state.items():
                dst.copy_(source[name].detach().to(dst.device, dst.dtype))
            synchronize(self._device)  # written before the worker may read it
            self._version.fill_(int(version))
        self._published = int(version)

    def _pending(self, call: int) -> _Submitted | None:
        """The job in flight for ``call`` that will be kept, if any."""
        return next((s for s in self._submitted.values() if s.call == call and not s.discard), None)

    def _submit(self, call: int, tasks: tuple[Task, ...], group: int, config: RolloutConfig, version: int) -> None:
        self._jobs_made += 1
        self._submitted[self._jobs_made] = _Submitted(call, tasks, version)
        with contextlib.suppress(OSError):  # a worker that died: the next _receive says so
            self._jobs.send(GenerationJob(self._jobs_made, call, tasks, group, config, version))

    def _drop(self, call: int) -> None:
        """Forget a call's result, and mark its job in flight to be thrown away when it comes."""
        self._done.pop(call, None)
        for s in self._submitted.values():
            if s.call == call:
                s.discard = True

    def _await(self, call: int) -> GenerationResult:
        while call not in self._done:
            self._handle(*self._receive(f"to finish rollout call {call}"))
        return self._done.pop(call)

    def _handle(self, kind: str, job: int, payload: Any) -> None:
        if kind == "started":
            self._submitted[job].started = True
        elif kind == "done":
            submitted = self._submitted.pop(job)
            if not submitted.discard:
                self._done[submitted.call] = payload
        else:
            self.close(kill=True)
            raise GenerationWorkerError(f"the generation worker sent {kind!r} for job {job}")

    def _receive(self, what: str) -> tuple[str, int, Any]:
        """The worker's next message; raises if it exits, fails or stays silent past the timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            process = self._process
            if process is None:
                raise GenerationWorkerError(f"the generation worker is not running (waiting {what})")
            try:
                message = self._results.recv() if self._results.poll(min(0.5, self.timeout)) else None
            except (EOFError, OSError):  # its end closed: it exited
                process.join(timeout=5)
                message = None
            if message is None:
                if not process.is_alive():
                    code = process.exitcode
                    self.close(kill=True)
                    raise GenerationWorkerError(
                        f"the generation worker exited with code {code} while the trainer waited {what}; nothing of "
                        "this step was saved: the last checkpoint is intact (--resume continues from it)"
                    )
                if time.monotonic() > deadline:
                    self.close(kill=True)
                    raise GenerationWorkerError(
                        f"the generation worker sent nothing for {self.timeout:.0f} s while the trainer waited {what} "
                        "(rl.async_rollouts.generation_timeout); it was stopped. Nothing of this step was saved: the "
                        "last checkpoint is intact (--resume continues from it)"
                    )
                continue
            kind, job, payload = message
            if kind == "error":
                self.close(kill=True)
                text, stop = payload
                if isinstance(stop, EnvFailureError):  # the run's own failure, not the worker's: as the trainer's
                    raise EnvFailureError(str(stop))
                raise GenerationWorkerError(f"the generation worker failed on {text}")
            return kind, job, payload

    # ------------------------------------------------------------------ checkpoints
    def save(self, folder: str | Path) -> None:
        """Wait for the jobs in flight and write every result not yet consumed to ``folder/async_pending.json``."""
        while any(not s.discard for s in self._submitted.values()):
            self._handle(*self._receive("to finish the jobs in flight before a checkpoint"))
        results = [r.to_dict() for r in self._done.values()]
        write_atomic(Path(folder) / ASYNC_PENDING, json.dumps({"format": 1, "results": results}))

    def load(self, folder: str | Path) -> None:
        """Take the results a checkpoint holds (:meth:`save`); a checkpoint without the file holds none.

        Raises:
            ValueError: The file is not what :meth:`save` writes (the message names it).
        """
        path = Path(folder) / ASYNC_PENDING
        if (Path(folder) / _OLD_PENDING).is_file() and not path.is_file():
            warnings.warn(
                f"{Path(folder) / _OLD_PENDING} is not read (a pickle runs code when read): the calls it held are "
                "generated again with the current weights, so this resume is not exact",
                stacklevel=2,
            )
        if not path.is_file():
            return
        self._done = {r.call: r for r in read_pending(path)}


def read_pending(path: str | Path) -> list[GenerationResult]:
    """The results an ``async_pending.json`` holds.

    Raises:
        ValueError: Not JSON, or not the layout :meth:`AsyncRollouts.save` writes (the message names the file).
    """
    try:
        saved = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(saved, dict) or saved.get("format") != 1 or not isinstance(saved.get("results"), list):
            raise ValueError("not the layout of an async_pending.json (format 1)")
        return [GenerationResult.from_dict(r) for r in saved["results"]]
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise ValueError(f"{path}: {' '.join(str(error).split())[:300]}") from None

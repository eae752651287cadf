"""Running a sweep's runs: each one ``agent-r1 train`` on its typed config, in a subprocess (isolation: its own
memory, its own torch threads) or in this process; resumable, with progress and an ETA.

A run's config is written as ``<run folder>/sweep_config.yaml`` (the typed copy, every default filled in) and
trained with ``python -m agent_trainers.pipeline.cli train --config <that file>``, ``--resume`` when the folder
exists (a finished SFT stage is reloaded, RL continues from its last complete checkpoint). A finished run is
skipped. Each run's wall time and peak memory (resident set of the process tree, sampled twice a second) go to
``<out>/costs.json``: the wall time of every invocation of the run, a resumed run's steps redone after a kill
included, and the invocations' count. While a run trains, its entry is kept current every ``heartbeat_s``
(marked ``"finished": false``), so a sweep killed mid-run (Ctrl-C, SIGKILL, a machine taken back) loses at
most that much of its account.
"""

from __future__ import annotations

import functools
import json
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from agent_gym.core.files import write_atomic
from agent_trainers.experiments.plan import Run, read_json

__all__ = ["COSTS", "RUN_CONFIG", "Cost", "read_costs", "run_all", "run_in_process", "run_in_subprocess", "watch_child"]

RUN_CONFIG = "sweep_config.yaml"
"""The run's typed config, as the run folder keeps it."""
COSTS = "costs.json"
"""Each run's wall seconds and peak memory, in the sweep's folder."""
HEARTBEAT_S = 30.0
"""How often a training run's ``costs.json`` entry is brought up to date."""


@dataclass(frozen=True)
class Cost:
    """What a run cost.

    Attributes:
        wall_s: Wall seconds of this invocation.
        peak_rss_mb: Peak resident memory of its process tree (None: not measured, e.g. in this process).
    """

    wall_s: float
    peak_rss_mb: float | None


def _write_config(run: Run) -> Path:
    run.folder.mkdir(parents=True, exist_ok=True)
    path = run.folder / RUN_CONFIG
    write_atomic(path, yaml.safe_dump(run.config.to_dict(), sort_keys=False))
    return path


def run_in_subprocess(run: Run) -> Cost:
    """Train ``run`` with ``agent-r1 train`` in a child process (see the module docstring).

    Raises:
        RuntimeError: The run failed (its exit status and command).
    """
    resume = run.folder.is_dir()
    cmd = [sys.executable, "-m", "agent_trainers.pipeline.cli", "train", "--config", str(_write_config(run))]
    if resume:
        cmd.append("--resume")
    returncode, cost = watch_child(cmd)
    if returncode:
        raise RuntimeError(f"run {run.name} failed (exit {returncode}): {' '.join(cmd)}")
    return cost


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: ask the kernel to send this process SIGTERM when its parent dies (even by SIGKILL)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def watch_child(cmd: Sequence[str]) -> tuple[int, Cost]:
    """Run ``cmd`` to its end, sampling its process tree's memory twice a second: ``(exit status, cost)``.

    The child does not outlive the sweep: if this call is left by an exception (Ctrl-C, a SIGTERM turned into
    one) the child is terminated (killed after 30 s), and on Linux the kernel sends it SIGTERM when this process
    dies in any way (``PR_SET_PDEATHSIG``), SIGKILL included; a resumed sweep continues the run from its last
    checkpoint.
    """
    import psutil

    start, peak = time.perf_counter(), 0.0
    linux = sys.platform.startswith("linux")
    child = subprocess.Popen(list(cmd), preexec_fn=_die_with_parent if linux else None)
    try:
        watched = psutil.Process(child.pid)
        while child.poll() is None:
            try:
                tree = [watched, *watched.children(recursive=True)]
                peak = max(peak, sum(p.memory_info().rss for p in tree) / 2**20)
            except psutil.Error:
                pass
            time.sleep(0.5)
    finally:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    return child.returncode, Cost(time.perf_counter() - start, peak)


def run_in_process(run: Run) -> Cost:
    """Train ``run`` in this process (tests, small runs); the peak memory is not measured."""
    from agent_trainers.pipeline.train import run_training

    resume = run.folder.is_dir()
    _write_config(run)
    start = time.perf_counter()
    run_training(run.config, resume=resume)
    return Cost(time.perf_counter() - start, None)


def read_costs(out: str | Path) -> dict[str, dict[str, float | None]]:
    """``costs.json`` of a sweep folder (empty when none was written)."""
    return read_json(Path(out) / COSTS)


def run_all(
    runs: Sequence[Run],
    out: str | Path,
    *,
    runner: Callable[[Run], Cost] = run_in_subprocess,
    say: Callable[[str], None] = print,
    heartbeat_s: float = HEARTBEAT_S,
    after: Callable[[Run], object] | None = None,
) -> dict[str, dict[str, float | None]]:
    """Run (or continue) every run in order; finished ones are skipped. Returns the costs, by run name.

    A run's cost adds up its invocations: one that a killed sweep left unfinished (its entry marked
    ``"finished": false``) is continued, and its earlier wall time counts. ``after``: called with each run once
    it is finished (trained now, or found finished), before the next one starts - where a sweep tests and
    archives it, so that a machine lost later loses none of it.
    """
    ledger = _Ledger(out)
    spent: list[float] = []
    began = time.perf_counter()
    for k, run in enumerate(runs, 1):
        head = f"[sweep] run {k}/{len(runs)} {run.name}"
        if run.done:
            say(f"{head}: done earlier, skipped")
            if after is not None:
                after(run)
            continue
        say(f"{head}: {run.config.algorithm if run.config.rl.enabled else 'sft'} -> {run.folder}")
        cost = ledger.account(run.name, functools.partial(runner, run), heartbeat_s)
        spent.append(cost.wall_s)
        left = sum(1 for r in runs[k:] if not r.done)
        eta = left * statistics.mean(spent) / 60
        total = (time.perf_counter() - began) / 60
        say(f"{head} done in {cost.wall_s / 60:.1f} min ({total:.1f} min so far); {left} left, ETA {eta:.0f} min")
        if after is not None:
            after(run)
    return ledger.costs


class _Ledger:
    """``costs.json``, written whole (atomically) by the sweep and by the clock of the run in progress."""

    def __init__(self, out: str | Path) -> None:
        self.path = Path(out) / COSTS
        self.costs = read_costs(out)
        self._lock = threading.Lock()

    def _write(self, name: str, entry: dict[str, float | None]) -> None:
        with self._lock:
            self.costs[name] = entry
            write_atomic(self.path, json.dumps(self.costs, indent=1) + "\n")

    def account(self, name: str, train: Callable[[], Cost], heartbeat_s: float) -> Cost:
        """Run ``train`` with its entry kept current; returns this invocation's cost."""
        earlier = self.costs.get(name) or {}
        if earlier.get("finished", True) is not False:
            earlier = {}  # a finished run's entry (its folder was removed since): this is a new run
        before_s, before_peak = float(earlier.get("wall_s") or 0.0), earlier.get("peak_rss_mb")
        invocations = int(earlier.get("invocations") or 1) + 1 if earlier else 1
        start, stop = time.perf_counter(), threading.Event()

        def entry(wall_s: float, peak: float | None, finished: bool) -> dict[str, float | None]:
            peaks = [p for p in (before_peak, peak) if p is not None]
            record: dict[str, float | None] = {"wall_s": before_s + wall_s, "peak_rss_mb": max(peaks, default=None),
                                               "invocations": invocations}  # fmt: skip
            if not finished:
                record["finished"] = False
            return record

        def clock() -> None:
            while not stop.wait(heartbeat_s):
                self._write(name, entry(time.perf_counter() - start, None, finished=False))

        ticking = threading.Thread(target=clock, name=f"costs:{name}", daemon=True)
        ticking.start()
        cost: Cost | None = None
        try:
            cost = train()
            return cost
        finally:  # the clock stops before the last write, so it cannot overwrite it
            stop.set()
            ticking.join()
            if cost is None:  # left by an exception (a failed run, Ctrl-C): unfinished, its time kept
                self._write(name, entry(time.perf_counter() - start, None, finished=False))
            else:
                self._write(name, entry(cost.wall_s, cost.peak_rss_mb, finished=True))

"""Running a sweep's runs: each one ``agent-r1 train`` on its typed config, in a subprocess (isolation: its own
memory, its own torch threads) or in this process; resumable, with progress and an ETA.

A run's config is written as ``<run folder>/sweep_config.yaml`` (the typed copy, every default filled in) and
trained with ``python -m agent_trainers.pipeline.cli train --config <that file>``, ``--resume`` when the folder
exists (a finished SFT stage is reloaded, RL continues from its last complete checkpoint). A finished run is
skipped. Each run's wall time and peak memory (resident set of the process tree, sampled twice a second) go to
``<out>/costs.json``.
"""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
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
) -> dict[str, dict[str, float | None]]:
    """Run (or continue) every run in order; finished ones are skipped. Returns the costs, by run name."""
    costs = read_costs(out)
    spent: list[float] = []
    began = time.perf_counter()
    for k, run in enumerate(runs, 1):
        head = f"[sweep] run {k}/{len(runs)} {run.name}"
        if run.done:
            say(f"{head}: done earlier, skipped")
            continue
        say(f"{head}: {run.config.algorithm if run.config.rl.enabled else 'sft'} -> {run.folder}")
        cost = runner(run)
        costs[run.name] = {"wall_s": cost.wall_s, "peak_rss_mb": cost.peak_rss_mb}
        write_atomic(Path(out) / COSTS, json.dumps(costs, indent=1) + "\n")
        spent.append(cost.wall_s)
        left = sum(1 for r in runs[k:] if not r.done)
        eta = left * statistics.mean(spent) / 60
        total = (time.perf_counter() - began) / 60
        say(f"{head} done in {cost.wall_s / 60:.1f} min ({total:.1f} min so far); {left} left, ETA {eta:.0f} min")
    return costs

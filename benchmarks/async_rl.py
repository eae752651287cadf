"""Generation overlapped with training: one RL recipe run synchronously and asynchronously, in one invocation.

Protocol (the runs are a sweep, :mod:`agent_trainers.experiments`: each one ``agent-r1 train`` on a typed copy of
the recipe, in a subprocess, as a user runs it; a finished run is reused):

1. **Start weights**: the recipe's SFT stage once (``<out>/sft``), so every RL run starts from the same
   checkpoint and has a reward to learn; ``--no-sft`` starts from the recipe's model as it is.
2. **RL runs**, same recipe, seeds, tasks and step budget, from those weights:

   * ``sync-1``: synchronous, the trainer on 1 torch thread (the reference: each process one thread);
   * ``async``: ``rl.async_rollouts`` with ``max_staleness: 1``; the trainer on 1 thread, the generation
     worker on 1 (``rl.generation_threads``): together the same two cores;
   * ``sync-2``: synchronous on 2 threads: the two cores given to one process (``--no-sync2`` skips it).

3. **Report** (``<out>/report.md``, ``<out>/curves.png``): RL steps per hour (the whole RL stage, the first
   step's start-up included; and the steady state, steps 2..N), seconds of idle per step on each side (sync:
   the trainer idles while it generates, the generator while it trains; async: the trainer's wait for
   episodes, the worker's wait for a job), peak memory, the training reward per step and per wall-clock
   minute, and the held-aside metric after the run (``eval.tasks`` greedy tasks; paired against ``sync-1``).
   The headline is ``async`` over ``sync-1`` in RL steps per hour, printed as ``N.NNx``.

``--quick`` (at most ~10 minutes on 2 cores): the tiny random model (``tiny-random``) on the same task with a
longer step budget, no SFT, no dynamic sampling and a small KL term (``rl.beta`` 0.01: every group of a random
model ties, and without a KL term every update would be skipped); its rewards do not move (a random 2-layer
model writes no valid action), so it measures the overlap only, on a model whose training costs little
against its generation.

Run:
    .venv/bin/python benchmarks/async_rl.py --quick
    .venv/bin/python benchmarks/async_rl.py --out runs/async          # SmolLM2, configs/learn_hasty.yaml
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import tyro

from agent_gym.core.files import json_lines
from agent_trainers.experiments.plan import Run, plan_runs
from agent_trainers.experiments.runner import read_costs, run_all
from agent_trainers.experiments.spec import Arm, SweepSpec, TaskSet
from agent_trainers.pipeline.cli import parse_set
from agent_trainers.pipeline.config import load_config

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Args:
    """Benchmark settings."""

    config: str = "configs/learn_hasty.yaml"
    """The recipe: an ``agent-r1 train`` config with an RL stage (and an SFT stage unless ``--no-sft``)."""
    out: str = "runs/async"
    """Where the runs and the report go (a finished run is reused: delete its folder to measure it again)."""
    steps: int = 10
    """RL steps of every run."""
    eval_tasks: int = 100
    """Held-aside tasks evaluated after each RL run (the recipe's ``eval`` section otherwise)."""
    sft: bool = True
    """Train the recipe's SFT stage once and start every RL run from it."""
    start: str = ""
    """Start every RL run from this checkpoint folder instead (no SFT stage), e.g. ``runs/learn_hasty/seed0/sft/sft``:
    the SFT checkpoint ``agent-r1 sweep learn_hasty`` made from the same recipe."""
    sync2: bool = True
    """Also run the synchronous recipe on 2 threads."""
    quick: bool = False
    """The tiny random model, no SFT, 20 steps, 8 held-aside tasks (about 10 minutes on 2 cores)."""
    set: Annotated[list[str], tyro.conf.UseAppendAction] = field(default_factory=list)
    """A ``KEY=VALUE`` override for every run (as ``agent-r1 train --set``); repeat the flag for more."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    args = tyro.cli(Args, description=__doc__, args=argv)
    if args.quick:  # every group of a random model ties: without a KL term its updates would be skipped
        args.sft, args.steps, args.eval_tasks = False, 20, 8
        args.set = ["model.name=tiny-random", "grpo.dynamic_sampling=false", "rl.beta=0.01", *args.set]
    return args


def sweep(args: Args) -> SweepSpec:
    """The benchmark as a sweep: the SFT arm (unless none), then sync-1, async and sync-2 from its model."""
    recipe = load_config(args.config, parse_set(args.set))
    common: dict[str, Any] = {"rl.steps": args.steps, "eval.every": 0}
    start = None
    if args.start:
        common |= {"model.name": str(Path(args.start).resolve()), "sft.enabled": False}
    elif args.sft:
        start = "sft"
    else:
        common |= {"sft.enabled": False}
    overlap = {"rl.async_rollouts": {"enabled": True, "max_staleness": 1, "generation_threads": 1}}
    arms = [Arm(name="sft", stage="sft", set={"eval.tasks": 1})] if start else []
    arms += [
        Arm(name="sync-1", start=start, set=common | {"threads": 1}),
        Arm(name="async", start=start, set=common | {"threads": 1} | overlap),
    ]
    if args.sync2:
        arms.append(Arm(name="sync-2", start=start, set=common | {"threads": 2}))
    dev = TaskSet(env_kwargs=dict(recipe.env.eval_kwargs), first_task=recipe.eval.first_task, tasks=args.eval_tasks)
    return SweepSpec(recipe=args.config, set=parse_set(args.set), seeds=[recipe.seed], dev=dev, arms=arms)


@dataclass
class Measured:
    """One RL run of the benchmark and what it cost."""

    name: str
    folder: Path
    wall_s: float = 0.0
    peak_rss_mb: float = 0.0
    records: list[dict[str, Any]] = field(default_factory=list)


def rl_records(folder: Path) -> list[dict[str, Any]]:
    """The RL step rows of a run's ``metrics.jsonl`` (one per step, in order)."""
    rows = [json.loads(x) for x in json_lines((folder / "metrics.jsonl").read_text()) if x.strip()]
    return [r for r in rows if r.get("stage") == "rl" and "rl_seconds" in r and "reward" in r]


@dataclass(frozen=True)
class Figures:
    """What the report says of one RL run."""

    steps: int
    steps_per_hour: float
    """Over the whole RL stage (first step's start-up included)."""
    steady_steps_per_hour: float | None
    """Over steps 2..N (None with fewer than 3 steps)."""
    trainer_idle_s: float | None
    """Seconds per step the trainer waited for episodes (sync: its generation time)."""
    generator_idle_s: float | None
    """Seconds per step the generator had nothing to do (sync: the training time; async: the worker's wait)."""


def figures(records: Sequence[dict[str, Any]]) -> Figures:
    """The speed and idle figures of one run's RL records (steps 2..N for the idle means: the first step has no
    overlap and carries the start-up).

    Example:
        >>> rows = [{"step": s, "rl_seconds": 10.0 * s, "time/rollout": 6.0} for s in (1, 2, 3)]
        >>> f = figures(rows); (f.steps, f.steps_per_hour, f.steady_steps_per_hour, f.trainer_idle_s)
        (3, 360.0, 360.0, 6.0)
    """
    if not records:
        raise ValueError("no RL step rows with rl_seconds in metrics.jsonl")
    times = [float(r["rl_seconds"]) for r in records]
    n = len(records)
    steady = (n - 1) / (times[-1] - times[0]) * 3600 if n >= 3 and times[-1] > times[0] else None
    later = records[1:] or records
    durations = [b - a for a, b in itertools.pairwise(times)] or [times[0]]
    if "async/trainer_wait" in later[0]:
        trainer_idle = statistics.mean(float(r["async/trainer_wait"]) for r in later)
        generator_idle = statistics.mean(float(r["async/worker_idle"]) for r in later)
    elif "time/rollout" in later[0]:
        trainer_idle = statistics.mean(float(r["time/rollout"]) for r in later)
        generator_idle = statistics.mean(d - float(r["time/rollout"]) for d, r in zip(durations, later, strict=False))
    else:
        trainer_idle = generator_idle = None
    return Figures(n, n / times[-1] * 3600, steady, trainer_idle, generator_idle)


def ratio(a: float | None, b: float | None) -> str:
    """``a / b`` as ``N.NNx`` (``—`` when either is missing)."""
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def _cell(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def held_aside(r: Measured, reference: Measured, metric: str = "em") -> tuple[str, str]:
    """The held-aside metric of ``r`` with its 95% interval, and its paired difference to ``reference``."""
    from agent_trainers.evaluation.compare import load_run, paired
    from agent_trainers.evaluation.stats import bootstrap_mean

    run_eval = load_run(r.folder / "eval" / "final")
    values = [v for rec in run_eval.records if (v := rec.metric(metric)) is not None]
    if not values:
        return "—", "—"
    cell = bootstrap_mean(values).format(3)
    if r is reference:
        return cell, "—"
    comparison = paired(run_eval, load_run(reference.folder / "eval" / "final"), metric)
    return cell, "—" if comparison is None else comparison.difference.format(3, signed=True)


def report(args: Args, runs: list[Measured]) -> str:
    """``report.md``: one row per run, the headline ratio, and the reward per step."""
    figs = {r.name: figures(r.records) for r in runs}
    ref = runs[0]
    lines = [
        "| run | RL steps/hour | steady steps/hour (2..N) | trainer idle s/step | generator idle s/step "
        "| RL stage min | peak RSS MB | held-aside em [95% CI] | paired Δ vs sync-1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        f = figs[r.name]
        em, delta = held_aside(r, ref)
        lines.append(
            f"| {r.name} | {f.steps_per_hour:.1f} | {_cell(f.steady_steps_per_hour)} | {_cell(f.trainer_idle_s)} "
            f"| {_cell(f.generator_idle_s)} | {r.records[-1]['rl_seconds'] / 60:.1f} | {r.peak_rss_mb:,.0f} | {em} "
            f"| {delta} |"
        )
    a, s1 = figs["async"], figs["sync-1"]
    lines += [
        "",
        f"async vs sync-1, RL steps per hour: {ratio(a.steps_per_hour, s1.steps_per_hour)} "
        f"(steady state {ratio(a.steady_steps_per_hour, s1.steady_steps_per_hour)})",
    ]
    if "sync-2" in figs:
        s2 = figs["sync-2"]
        lines.append(
            f"async vs sync-2, RL steps per hour: {ratio(a.steps_per_hour, s2.steps_per_hour)} "
            f"(steady state {ratio(a.steady_steps_per_hour, s2.steady_steps_per_hour)})"
        )
    lines += [
        "",
        "Training reward per step (mean of the step's episodes; async: the batch's policy is one step old):",
        "",
    ]
    lines.append("| step | " + " | ".join(r.name for r in runs) + " |")
    lines.append("|---" * (len(runs) + 1) + "|")
    for k in range(max(len(r.records) for r in runs)):
        cells = [f"{r.records[k]['reward']:.3f}" if k < len(r.records) else "—" for r in runs]
        lines.append(f"| {k + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def draw(runs: list[Measured], path: Path) -> None:
    """Training reward against RL step and against wall-clock minutes, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_minute) = plt.subplots(1, 2, figsize=(11, 4))
    for r in runs:
        rewards = [x["reward"] for x in r.records]
        by_step.plot([x["step"] for x in r.records], rewards, marker="o", label=r.name)
        by_minute.plot([x["rl_seconds"] / 60 for x in r.records], rewards, marker="o", label=r.name)
    by_step.set(xlabel="RL step", ylabel="training reward", title="reward per step")
    by_minute.set(xlabel="wall-clock minutes of the RL stage", title="reward per minute")
    by_step.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def measured(runs: Sequence[Run], out: Path) -> list[Measured]:
    """The RL runs' costs and step records."""
    costs = read_costs(out)
    found = []
    for r in runs:
        if r.arm.stage.value != "rl":
            continue
        cost = costs.get(r.name, {})
        m = Measured(r.arm.name, r.folder, float(cost.get("wall_s") or 0.0), float(cost.get("peak_rss_mb") or 0.0))
        m.records = rl_records(r.folder)
        found.append(m)
    return found


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    runs = plan_runs(sweep(args), out)
    run_all(runs, out, say=lambda line: print(line.replace("[sweep]", "[async_rl]"), flush=True))
    found = measured(runs, out)
    text = report(args, found)
    (out / "report.md").write_text(text)
    draw(found, out / "curves.png")
    print(text)
    print(f"[async_rl] {out / 'report.md'}, {out / 'curves.png'} ({(time.perf_counter() - began) / 60:.1f} min)")


if __name__ == "__main__":
    main()

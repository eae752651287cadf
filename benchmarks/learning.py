"""Does RL make the agent better than SFT? One SFT checkpoint, each algorithm's RL from it, held-aside tasks.

Protocol (each stage is ``agent-r1 train`` in a subprocess, so every figure comes from the command a user runs):

1. **SFT** (``<out>/sft``): the config's cold-start SFT, then its evaluation on the held-aside tasks
   (``eval/after_sft``: the config's ``eval`` section, e.g. 210 tasks of another task family).
2. **RL** (``<out>/<name>``), once per algorithm (and the paper's loss-mask ablation with
   ``--loss-mask-ablation``): the config's RL stage from the SFT checkpoint, the same budget and seeds,
   evaluated every ``eval.every`` steps and at the end on the same held-aside tasks.
3. **Report** (``<out>/table.md``, ``<out>/curves.png``): per run the held-aside metric with its bootstrap
   95% interval, the paired difference to SFT on the same tasks with its interval, seconds per RL step,
   wall time and peak memory of the stage; the learning curves (metric vs RL step, 95% band, the SFT level
   as a dashed line).
4. **Test** (``--test-kwargs``, ``<out>/test.md``): the held-aside set of steps 1-3 then serves as the *dev*
   set: each run's checkpoint is chosen on its dev curve (best mean, earliest on a tie), and it and the SFT
   model are evaluated once on a test family never used for a choice, paired.

The reference is the SFT checkpoint, measured in the same invocation. Resumable: a finished stage is
skipped, an interrupted RL stage continues from its last checkpoint (``--resume``); progress lines give
each stage's time and an ETA from the stages done.

Run:
    .venv/bin/python benchmarks/learning.py                                    # GRPO, configs/learn_calculator.yaml
    .venv/bin/python benchmarks/learning.py \\
        --test-kwargs '{"task_seed": 3, "action_format": "tags", "reward": "outcome"}'     # + dev choice, test
    .venv/bin/python benchmarks/learning.py --algorithms grpo,rloo,reinforce_pp,reinforce_pp_baseline,ppo \\
        --loss-mask-ablation --out runs/learning-all
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import tyro

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Args:
    """Benchmark settings."""

    config: str = "configs/learn_calculator.yaml"
    """The recipe: an ``agent-r1 train`` config with an SFT and an RL stage."""
    algorithms: str = "grpo"
    """Comma-separated algorithms to run from the SFT checkpoint."""
    loss_mask_ablation: bool = False
    """Also run the first algorithm with ``rl.loss_mask: false`` (env tokens in the policy loss)."""
    out: str = "runs/learning"
    """Where every stage's run folder and the report go."""
    metric: str = "em"
    """The primary held-aside metric (a metric of the evaluation table)."""
    set: Annotated[list[str], tyro.conf.UseAppendAction] = field(default_factory=list)
    """A ``KEY=VALUE`` override for every stage (as ``agent-r1 train --set``), e.g. ``rl.steps=10``; repeat the
    flag for more (each one adds, as ``agent-r1 train --set`` does)."""
    rl_set: Annotated[list[str], tyro.conf.UseAppendAction] = field(default_factory=list)
    """A ``KEY=VALUE`` override for the RL stages only, e.g. ``ppo.critic_warmup_steps=2``; repeat the flag for
    more."""
    test_kwargs: str = ""
    """JSON env kwargs of a *test* family (e.g. ``'{"task_seed": 3, "action_format": "tags", "reward":
    "outcome"}'``). When given, each RL run's checkpoint is chosen on the config's held-aside (dev) curve - the
    evaluated step with the best mean, the earliest on a tie - and that checkpoint and the SFT model are then
    evaluated on the test family (same settings, ``agent-r1 eval``): ``test.md``. Empty: no test stage."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


@dataclass
class Stage:
    """One ``agent-r1 train`` run of the protocol."""

    name: str
    folder: Path
    overrides: list[str]

    @property
    def done(self) -> bool:
        """Finished (its final model and evaluation exist)."""
        return (self.folder / "final" / "agent_r1.json").is_file() and (self.folder / "eval").is_dir()


def stages(args: Args) -> list[Stage]:
    """The SFT stage, then one RL stage per algorithm (and the ablation)."""
    out = Path(args.out)
    sft = Stage("sft", out / "sft", ["rl.enabled=false", "eval.before=false", *args.set])
    runs = [sft]
    names = [a for a in args.algorithms.split(",") if a]
    variants = [(a, a, []) for a in names]
    if args.loss_mask_ablation:
        variants.append((f"{names[0]}-no-loss-mask", names[0], ["rl.loss_mask=false"]))
    recipe = _recipe(args.config, [*args.set, *args.rl_set])  # read once: every variant starts from it
    for name, algorithm, extra in variants:
        resets = unread_resets(recipe, algorithm)
        if resets:
            print(f"[learning] {name}: {algorithm} does not read {', '.join(resets)} of the recipe: "
                  "set back to the defaults", flush=True)  # fmt: skip
        overrides = ["sft.enabled=false", "eval.before=false", f"model.name={out / 'sft' / 'sft'}",
                     f"algorithm={algorithm}", *resets, *args.set, *args.rl_set, *extra]  # fmt: skip
        runs.append(Stage(name, out / name, overrides))
    return runs


def _recipe(config: str, sets: Sequence[str]) -> Any:
    """The recipe as every RL stage gets it (with ``sets``), or ``None`` when it does not validate: the stage itself
    then fails with the config's own one-line error."""
    from agent_trainers.pipeline.cli import _parse_set
    from agent_trainers.pipeline.config import load_config

    try:
        return load_config(config, _parse_set(list(sets)))
    except ValueError:
        return None


def unread_resets(recipe: Any, algorithm: str) -> list[str]:
    """``KEY=DEFAULT`` for each RL setting the recipe changes that ``algorithm``'s trainer does not read (the trainer
    refuses those): e.g. ``rl.scale_rewards=group`` for ``rloo`` when the recipe, written for GRPO, scales by the
    batch's std. The algorithms then share everything they read. No recipe (it did not validate): none."""
    from agent_trainers.algorithms.shared.names import Algorithm
    from agent_trainers.algorithms.shared.settings import changed_settings
    from agent_trainers.pipeline.config import TRAINER_READS

    if recipe is None:
        return []
    reads = TRAINER_READS[Algorithm(algorithm)].settings
    changed = changed_settings("rl", recipe.rl)
    return [f"{key}={getattr(default, 'value', default)}" for key, (_, default) in changed.items() if key not in reads]


def run_stage(args: Args, stage: Stage) -> dict[str, float]:
    """Run one stage (or continue it) as a subprocess; returns its wall seconds and peak RSS in MB."""
    import psutil

    cmd = [sys.executable, "-m", "agent_trainers.pipeline.cli", "train", "--config", args.config,
           "--set", f"output_dir={stage.folder}"]  # fmt: skip
    for item in stage.overrides:
        cmd += ["--set", item]
    if stage.folder.is_dir():
        cmd.append("--resume")
    start, peak = time.perf_counter(), 0.0
    child = subprocess.Popen(cmd, cwd=ROOT)
    watched = psutil.Process(child.pid)
    while child.poll() is None:
        try:
            peak = max(peak, sum(p.memory_info().rss for p in [watched, *watched.children(recursive=True)]) / 2**20)
        except psutil.Error:
            pass
        time.sleep(0.5)
    if child.returncode:
        raise RuntimeError(f"stage {stage.name} failed (exit {child.returncode}): {' '.join(cmd)}")
    return {"wall_s": time.perf_counter() - start, "peak_rss_mb": peak}


def _rl_seconds(folder: Path) -> float | None:
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines() if x.strip()]
    times = [r["step_time"] for r in rows if r.get("stage") == "rl" and "step_time" in r]
    return statistics.mean(times) if times else None


def report(args: Args, done: list[Stage], costs: dict[str, dict[str, float]]) -> str:
    """``table.md``: the held-aside metric per run, the paired difference to SFT, s/step, wall time, memory; then
    one line per RL run on what it changed against SFT (the metrics whose paired 95% interval excludes 0)."""
    from agent_trainers.evaluation.compare import change_statement, load_run, paired
    from agent_trainers.evaluation.stats import bootstrap_mean

    metric = args.metric
    sft = load_run(done[0].folder / "eval" / "after_sft")
    head = (
        f"| run | held-aside {metric} [95% CI] | paired Δ vs SFT [95% CI] | wins / losses | s/step | wall min "
        "| peak RSS MB |"
    )
    lines, changes = [head, "|---|---|---|---|---|---|---|"], []
    for stage in done:
        run = sft if stage.name == "sft" else load_run(stage.folder / "eval" / "final")
        values = [v for r in run.records if (v := r.metric(metric)) is not None]
        cell = bootstrap_mean(values).format(3)
        if stage.name == "sft":
            delta, record, seconds = "—", "—", "—"
        else:
            comparison = paired(run, sft, metric)
            if comparison is None:
                raise ValueError(f"{stage.name} and SFT share no question with {metric!r}")
            delta = comparison.difference.format(3, signed=True)
            changes.append(f"- {change_statement(f'RL ({stage.name})', run, sft, metrics=(metric, 'answer_rate'))}")
            record = f"{comparison.wins} / {comparison.losses}"
            s = _rl_seconds(stage.folder)
            seconds = "—" if s is None else f"{s:.1f}"
        cost = costs.get(stage.name, {})
        wall = f"{cost['wall_s'] / 60:.1f}" if "wall_s" in cost else "—"
        peak = f"{cost['peak_rss_mb']:,.0f}" if "peak_rss_mb" in cost else "—"
        lines.append(f"| {stage.name} | {cell} (n={len(values)}) | {delta} | {record} | {seconds} | {wall} | {peak} |")
    return "\n".join(lines) + "\n" + ("\n" + "\n".join(changes) + "\n" if changes else "")


def dev_curve(stage: Stage, metric: str) -> list[tuple[int, float]]:
    """``(step, mean)`` of the stage's held-aside (dev) evaluations during and after RL, by step."""
    rows = [json.loads(x) for x in (stage.folder / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return sorted((int(r["step"]), float(r[metric])) for r in rows if r.get("stage") == "eval" and metric in r)


def choose_step(curve: Sequence[tuple[int, float]]) -> int:
    """The step with the best dev mean; on a tie the earliest (the fewest updates away from SFT).

    Raises:
        ValueError: No evaluated step.
    """
    if not curve:
        raise ValueError("no held-aside evaluation during RL to choose a checkpoint from (set eval.every)")
    best = max(mean for _, mean in curve)
    return min(step for step, mean in curve if mean == best)


def checkpoint_of(stage: Stage, step: int, last: int, sft: Path) -> Path:
    """The model folder of ``stage`` after ``step`` RL steps (``final`` after the last one; ``sft`` at step 0)."""
    if step == 0:
        return sft
    folder = stage.folder / "final" if step == last else stage.folder / "rl" / f"checkpoint-{step}"
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder}: no model saved at step {step} (make rl.save_steps divide eval.every)")
    return folder


def run_test(args: Args, model: Path, out: Path, label: str) -> Path:
    """Evaluate ``model`` on the test family with the config's evaluation and rollout settings (resumable)."""
    from agent_trainers.pipeline.config import load_config
    from agent_trainers.pipeline.stages import EVAL_SEED

    c = load_config(args.config)
    r = c.rollout
    kwargs = json.loads(args.test_kwargs)
    cmd = [sys.executable, "-m", "agent_trainers.pipeline.cli", "eval", "--env", c.env.id, "--method", "agent",
           "--model", str(model), "--env-kwargs", json.dumps(kwargs), "--limit", str(c.eval.tasks),
           "--first-task", str(c.eval.first_task), "--temperature", str(c.eval.temperature),
           "--max-new-tokens-per-turn", str(r.max_new_tokens_per_turn), "--max-total-tokens", str(r.max_total_tokens),
           "--batch-size", str(c.eval.batch_size), "--chunk-size", str(c.eval.tasks), "--seed", str(EVAL_SEED),
           "--threads", str(c.threads), "--out", str(out), "--label", label]  # fmt: skip
    if r.max_turns is not None:
        cmd += ["--max-turns", str(r.max_turns)]
    subprocess.run(cmd, cwd=ROOT, check=True)
    return out


def test_report(args: Args, done: list[Stage]) -> str:
    """``test.md``: per RL run the step chosen on dev, then SFT and that checkpoint on the test family, paired."""
    from agent_trainers.evaluation.compare import load_run, paired
    from agent_trainers.evaluation.stats import bootstrap_mean

    metric, test = args.metric, Path(args.out) / "test"
    sft = load_run(run_test(args, done[0].folder / "final", test / "sft", "SFT"))
    sft_values = [v for r in sft.records if (v := r.metric(metric)) is not None]
    lines = [
        f"Test family {args.test_kwargs} (the checkpoint of each run chosen on the dev curve, {metric})",
        "",
        f"| run | step chosen on dev (dev {metric}) | test {metric} [95% CI] | paired Δ vs SFT [95% CI] "
        "| wins / losses |",
        "|---|---|---|---|---|",
        f"| sft | — | {bootstrap_mean(sft_values).format(3)} (n={len(sft_values)}) | — | — |",
    ]
    for stage in done[1:]:
        curve = dev_curve(stage, metric)
        step = choose_step(curve)
        last = max(s for s, _ in curve)
        model = checkpoint_of(stage, step, last, done[0].folder / "final")
        run = load_run(run_test(args, model, test / stage.name, f"{stage.name} step {step}"))
        values = [v for r in run.records if (v := r.metric(metric)) is not None]
        comparison = paired(run, sft, metric)
        if comparison is None:
            raise ValueError(f"{stage.name} and SFT share no test question with {metric!r}")
        dev = dict(curve)[step]
        lines.append(
            f"| {stage.name} | {step} ({dev:.3f}) | {bootstrap_mean(values).format(3)} (n={len(values)}) | "
            f"{comparison.difference.format(3, signed=True)} | {comparison.wins} / {comparison.losses} |"
        )
    return "\n".join(lines) + "\n"


def curves(args: Args, done: list[Stage], path: Path) -> Path | None:
    """The held-aside metric against the RL step for every RL run (95% band), the SFT level dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from agent_trainers.evaluation.compare import load_run
    from agent_trainers.evaluation.stats import bootstrap_mean

    metric = args.metric
    fig, ax = plt.subplots(figsize=(7, 4))
    sft = load_run(done[0].folder / "eval" / "after_sft")
    level = bootstrap_mean([v for r in sft.records if (v := r.metric(metric)) is not None])
    ax.axhline(level.mean, color="gray", linestyle="--", label=f"SFT {level.mean:.3f}")
    ax.axhspan(level.low, level.high, color="gray", alpha=0.1)
    drawn = False
    for stage in done[1:]:
        rows = [json.loads(x) for x in (stage.folder / "metrics.jsonl").read_text().splitlines() if x.strip()]
        points = sorted((r["step"], r[metric], r[f"{metric}_low"], r[f"{metric}_high"]) for r in rows
                        if r.get("stage") == "eval" and metric in r and f"{metric}_low" in r)  # fmt: skip
        if not points:
            continue
        steps, means, lows, highs = zip(*points, strict=True)
        line = ax.plot([0, *steps], [level.mean, *means], marker="o", label=stage.name)[0]
        ax.fill_between([0, *steps], [level.low, *lows], [level.high, *highs], color=line.get_color(), alpha=0.15)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("RL step")
    ax.set_ylabel(f"held-aside {metric}")
    ax.set_title(f"{Path(args.config).name}: held-aside {metric} (mean, 95% interval)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Run (or continue) every stage, then write and print the report."""
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    costs_file = out / "costs.json"
    costs: dict[str, Any] = json.loads(costs_file.read_text()) if costs_file.is_file() else {}
    plan = stages(args)
    start, spent = time.perf_counter(), []
    for k, stage in enumerate(plan, 1):
        if stage.done:
            print(f"[learning] stage {k}/{len(plan)} {stage.name}: done earlier, skipped", flush=True)
            continue
        print(f"[learning] stage {k}/{len(plan)} {stage.name}: {' '.join(stage.overrides)}", flush=True)
        costs[stage.name] = run_stage(args, stage)
        costs_file.write_text(json.dumps(costs, indent=1))
        spent.append(costs[stage.name]["wall_s"])
        left = len(plan) - k
        eta = left * statistics.mean(spent[1:] or spent) / 60  # RL stages cost about the same
        print(f"[learning] stage {k}/{len(plan)} {stage.name} done in {spent[-1] / 60:.1f} min; "
              f"{left} left, ETA {eta:.0f} min", flush=True)  # fmt: skip
    table = report(args, plan, costs)
    (out / "table.md").write_text(table)
    plot = curves(args, plan, out / "curves.png")
    print(table)
    if args.test_kwargs:
        print("[learning] test stage: SFT and each run's checkpoint chosen on dev, on the test family", flush=True)
        tested = test_report(args, plan)
        (out / "test.md").write_text(tested)
        print(tested)
    wall = (time.perf_counter() - start) / 60
    print(f"wall {wall:.1f} min this invocation; curves: {plot}; table: {out / 'table.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

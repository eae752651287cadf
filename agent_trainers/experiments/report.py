"""One report for every sweep: per-seed rows, the mean over seeds, paired intervals over tasks and seeds, curves.

* :func:`dev_table` - each run on the dev set at its chosen checkpoint (``final`` unless the sweep chooses on
  dev): the metric with its 95% interval, the paired difference to the run it started from on the same tasks,
  wins / losses, seconds per RL step, wall time and peak memory; then, per arm, the mean over seeds and the
  difference paired over tasks and seeds (:func:`~agent_trainers.evaluation.stats.paired_over_seeds`);
* :func:`test_set_table` - the same on the test set, from the evaluations the protocol made (never otherwise);
* :func:`change_lines` - one plain line per RL run: what it changed against its start, the metrics whose
  paired interval excludes 0;
* :func:`behaviour_table` - how each run's agent works (answer rate, tool calls, evidence found, query and answer
  length, queries copied from the question) and how many of its final answers differ from its start's: what RL
  changed besides the score;
* :func:`arms_table` - RL arms that start from the same arm against each other (e.g. the reward presets, RL and
  rejection sampling), paired over tasks and seeds;
* :func:`speed_table` - per RL run, the first dev-curve step whose metric reaches its start's + a margin (the
  paper's "process rewards learn faster" read as RL steps);
* :func:`training_table` - per RL run, what it saw while it trained, in windows of steps: the reward, the
  episodes' own metrics, entropy, the groups dynamic sampling played and seconds per step;
* :func:`draw_curves` - the dev metric against the RL step, a line per run (95% band), the start level dashed.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_trainers.evaluation.compare import Run as EvalRun
from agent_trainers.evaluation.compare import change_statement, changed_answers, load_run, paired
from agent_trainers.evaluation.metrics import metric_spec
from agent_trainers.evaluation.records import EpisodeRecord
from agent_trainers.evaluation.stats import bootstrap_mean, paired_over_seeds
from agent_trainers.experiments.plan import Run
from agent_trainers.experiments.protocol import ProtocolError, metrics_rows

__all__ = ["BEHAVIOUR", "arms_table", "behaviour_table", "change_lines", "dev_band", "dev_eval_folder", "dev_table",
           "draw_curves", "speed_table", "task_values", "test_set_table", "training_table"]  # fmt: skip

BEHAVIOUR = ("answer_rate", "tool_calls", "evidence_recall", "format_error_rate", "query_words", "query_copied",
             "answer_words")  # fmt: skip
"""The columns of :func:`behaviour_table` (metrics of :data:`~agent_trainers.evaluation.metrics.METRICS`)."""


def task_values(run: EvalRun, metric: str) -> dict[str, float]:
    """``{task key: metric}`` over the records of ``run`` that have ``metric``."""
    return {_key(r): v for r in run.records if (v := r.metric(metric)) is not None}


def _key(r: EpisodeRecord) -> str:
    return f"{r.task_index}:{r.task_id}"


def dev_eval_folder(run: Run, step: int | None = None) -> Path:
    """The dev evaluation folder of ``run`` at ``step`` (None: its last; 0: its start model's)."""
    if step == 0 and run.start is not None:
        return dev_eval_folder(run.start)
    if run.arm.stage.value == "sft" or (step == 0 and run.start is None):
        return run.folder / "eval" / "after_sft"
    last = run.config.rl.steps
    return run.folder / "eval" / ("final" if step in (None, last) else f"rl_step_{step}")


def _seconds_per_step(run: Run) -> float | None:
    rows = metrics_rows(run.folder)
    times = [r["step_time"] for r in rows if r.get("stage") == "rl" and "step_time" in r]
    return statistics.mean(times) if times else None


def _table(
    runs: Sequence[Run],
    evals: Mapping[str, EvalRun],
    metric: str,
    costs: Mapping[str, Mapping[str, float | None]],
    where: str,
    steps: Mapping[str, tuple[int, float]] | None = None,
) -> str:
    """The rows of a table over ``evals`` (run name -> its evaluation on one set)."""
    chosen = "| step chosen on dev (dev) " if steps is not None else ""
    head = (f"| run | seed {chosen}| {where} {metric} [95% CI] | paired Δ vs start [95% CI] | wins / losses | s/step "
            "| wall min | peak RSS MB |")  # fmt: skip
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for run in runs:
        ev = evals[run.name]
        values = list(task_values(ev, metric).values())
        cell = bootstrap_mean(values).format(3)
        delta, record, seconds = "—", "—", "—"
        if run.start is not None:
            comparison = paired(ev, evals[run.start.name], metric)
            if comparison is None:
                raise ValueError(f"{run.name} and {run.start.name} share no question with {metric!r}")
            delta = comparison.difference.format(3, signed=True)
            record = f"{comparison.wins} / {comparison.losses}"
            s = _seconds_per_step(run)
            seconds = "—" if s is None else f"{s:.1f}"
        cost = costs.get(run.name, {})
        wall_s, peak_mb = cost.get("wall_s"), cost.get("peak_rss_mb")
        wall = "—" if wall_s is None else f"{wall_s / 60:.1f}"
        if (cost.get("invocations") or 1) > 1:
            wall += f" ({cost['invocations']:.0f} invocations)"
        peak = "—" if peak_mb is None else f"{peak_mb:,.0f}"
        step = ""
        if steps is not None:
            k, dev = steps[run.name]
            step = f"| {k} ({dev:.3f}) " if run.start is not None else "| — "
        lines.append(f"| {run.arm.name} | {run.seed} {step}| {cell} (n={len(values)}) | {delta} | {record} | "
                     f"{seconds} | {wall} | {peak} |")  # fmt: skip
    return "\n".join(lines) + "\n" + _mean_rows(runs, evals, metric, where)


def _mean_rows(runs: Sequence[Run], evals: Mapping[str, EvalRun], metric: str, where: str) -> str:
    """Per arm over its seeds (only with several seeds): the mean of the seeds' means, the pooled paired Δ."""
    arms = list(dict.fromkeys(r.arm.name for r in runs))
    seeds = sorted({r.seed for r in runs})
    if len(seeds) < 2:
        return ""
    lines = [
        "",
        f"Mean over seeds {seeds} ({where}; Δ paired over tasks and seeds, both resampled):",
        "",
        f"| arm | mean {metric} (per seed) | paired Δ vs start [95% CI] | wins / losses |",
        "|---|---|---|---|",
    ]
    for arm in arms:
        mine = [r for r in runs if r.arm.name == arm]
        means = [statistics.mean(task_values(evals[r.name], metric).values()) for r in mine]
        per_seed = ", ".join(f"{m:.3f}" for m in means)
        delta, record = "—", "—"
        if all(r.start is not None for r in mine):
            pairs = [
                (task_values(evals[r.name], metric), task_values(evals[r.start.name], metric)) for r in mine if r.start
            ]
            comparison = paired_over_seeds(pairs, metric)
            delta = comparison.difference.format(3, signed=True)
            record = f"{comparison.wins} / {comparison.losses}"
        lines.append(f"| {arm} | {statistics.mean(means):.3f} ({per_seed}) | {delta} | {record} |")
    return "\n".join(lines) + "\n"


def dev_table(
    runs: Sequence[Run],
    metric: str,
    costs: Mapping[str, Mapping[str, float | None]],
    steps: Mapping[str, tuple[int, float]],
) -> str:
    """The dev table: each run at its chosen step (``steps``: run name -> (step, dev value))."""
    evals = {r.name: load_run(dev_eval_folder(r, steps[r.name][0] if r.start else None)) for r in runs}
    evals |= {r.start.name: evals[r.start.name] for r in runs if r.start is not None}
    return _table(runs, evals, metric, costs, "dev", steps)


def test_set_table(
    runs: Sequence[Run],
    metric: str,
    costs: Mapping[str, Mapping[str, float | None]],
    steps: Mapping[str, tuple[int, float]],
    folders: Mapping[str, Path],
) -> str:
    """The test table, from the protocol's test evaluations (``folders``: run name -> its test folder).

    Raises:
        ProtocolError: A run has no test evaluation made under the frozen choices.
    """
    missing = [r.name for r in runs if r.name not in folders]
    if missing:
        raise ProtocolError(f"no protocol test evaluation of {', '.join(missing)}")
    evals = {r.name: load_run(folders[r.name]) for r in runs}
    return _table(runs, evals, metric, costs, "test", steps)


def change_lines(runs: Sequence[Run], metric: str, folder_of: Any) -> list[str]:
    """``- RL (<arm>) changed ...`` for each run that started from another (``folder_of(run)``: its evaluation)."""
    out = []
    for run in runs:
        if run.start is None:
            continue
        mine, start = load_run(folder_of(run)), load_run(folder_of(run.start))
        seed = f", seed {run.seed}" if len({r.seed for r in runs}) > 1 else ""
        out.append(f"- {change_statement(f'RL ({run.arm.name}{seed})', mine, start, metrics=(metric, 'answer_rate'))}")
    return out


def behaviour_table(runs: Sequence[Run], folder_of: Any, where: str) -> str:
    """Per run, the means of :data:`BEHAVIOUR` over its tasks (``folder_of(run)``: its evaluation on this set) and
    the final answers that differ from its start's on the same tasks.

    A column no run has a value for (no search queries on Calculator) is left out; a run without a value shows
    ``—`` (absent, not 0).
    """
    evals = {r.name: load_run(folder_of(r)) for r in runs}

    def mean(ev: EvalRun, metric: str) -> float | None:
        values = [v for rec in ev.records if (v := rec.metric(metric)) is not None]
        return statistics.mean(values) if values else None

    cells = {name: {m: mean(ev, m) for m in BEHAVIOUR} for name, ev in evals.items()}
    shown = [m for m in BEHAVIOUR if any(c[m] is not None for c in cells.values())]
    head = f"| run | seed | {' | '.join(metric_spec(m).title for m in shown)} | answers changed vs start |"
    lines = [f"How the agents work ({where}; means over tasks):", "", head, "|---" * (len(shown) + 3) + "|"]
    for run in runs:
        row = ["—" if (v := cells[run.name][m]) is None else f"{v:.{metric_spec(m).digits}f}" for m in shown]
        changed = "—"
        if run.start is not None:
            n_changed, n = changed_answers(evals[run.name], evals[run.start.name])
            changed = f"{n_changed} / {n}"
        lines.append(f"| {run.arm.name} | {run.seed} | {' | '.join(row)} | {changed} |")
    return "\n".join(lines) + "\n"


def arms_table(runs: Sequence[Run], metric: str, folder_of: Any, where: str) -> str:
    """Each pair of RL arms that start from the same arm, ``A - B`` paired over tasks and over the seeds both ran
    (``folder_of(run)``: its evaluation on this set); empty when no two arms share a start."""

    def values(run: Run) -> dict[str, float]:
        return task_values(load_run(folder_of(run)), metric)

    rl = {(r.arm.name, r.seed): r for r in runs if r.start is not None}
    starts: dict[str, list[str]] = {}  # start arm -> the RL arms from it, in the sweep's order
    for r in rl.values():
        arms = starts.setdefault(r.start.arm.name if r.start else "", [])
        arms.extend([] if r.arm.name in arms else [r.arm.name])
    lines = []
    for start, arms in starts.items():
        for i, a in enumerate(arms):
            for b in arms[i + 1 :]:
                seeds = sorted(s for (arm, s) in rl if arm == a and (b, s) in rl)
                pairs = [(values(rl[a, s]), values(rl[b, s])) for s in seeds]
                if not pairs:
                    continue
                c = paired_over_seeds(pairs, metric)
                means = f"{c.a_mean:.3f} − {c.b_mean:.3f}"
                diff = c.difference.format(3, signed=True)
                lines.append(f"| {a} − {b} | {start} | {', '.join(map(str, seeds))} | {means} | {diff} | "
                             f"{c.wins} / {c.losses} |")  # fmt: skip
    if not lines:
        return ""
    head = [f"Arms against each other ({where}; paired over tasks and seeds, both resampled):", "",
            f"| A − B | from | seeds | {metric} A − B | paired Δ [95% CI] | wins / losses |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    return "\n".join(head + lines) + "\n"


def dev_band(run: Run, metric: str) -> list[tuple[int, float, float, float]]:
    """The dev evaluations a run logged after RL steps, as ``(step, mean, low, high)`` in step order: the points
    of its plotted curve with their 95% band (:func:`~agent_trainers.experiments.protocol.dev_curve` is the
    choosing curve: ``(step, value)``, with the start model's last evaluation as step 0)."""
    rows = metrics_rows(run.folder)
    evals = [r for r in rows if r.get("stage") == "eval" and metric in r and f"{metric}_low" in r and r["step"] > 0]
    return sorted({r["step"]: (r["step"], r[metric], r[f"{metric}_low"], r[f"{metric}_high"]) for r in evals}.values())


def speed_table(runs: Sequence[Run], metric: str, margin: float = 0.02) -> str:
    """Per RL run, its dev curve and the first step whose mean reaches the start's dev mean + ``margin`` ("not in
    N" when no point up to step N did); empty without RL runs."""
    rl = [r for r in runs if r.start is not None]
    if not rl:
        return ""
    lines = [f"RL steps to reach the start's dev {metric} + {margin:g} (first point of the dev curve):", "",
             f"| arm | seed | start dev {metric} | curve (step: dev {metric}) | steps to reach |",
             "|---|---|---|---|---|"]  # fmt: skip
    for run in rl:
        assert run.start is not None  # for mypy: filtered above
        start = statistics.mean(task_values(load_run(dev_eval_folder(run.start)), metric).values())
        curve = dev_band(run, metric)
        reached = next((step for step, mean, _, _ in curve if mean >= start + margin - 1e-12), None)
        last = curve[-1][0] if curve else 0
        cell = str(reached) if reached is not None else f"not in {last}"
        points = ", ".join(f"{step}: {mean:.3f}" for step, mean, _, _ in curve) or "—"
        lines.append(f"| {run.arm.name} | {run.seed} | {start:.3f} | {points} | {cell} |")
    return "\n".join(lines) + "\n"


TRAINING = {"reward": "reward", "episode/*": "", "entropy": "entropy",
            "dynamic_sampling/groups_played": "groups played", "step_time": "s / step"}  # fmt: skip
"""The columns of :func:`training_table` (``metrics.jsonl`` keys; ``episode/*``: every per-episode metric the runs
logged, the env's own) and their headers."""


def _training_rows(run: Run) -> list[dict[str, Any]]:
    rows = metrics_rows(run.folder)
    steps: dict[int, dict[str, Any]] = {}
    for row in (r for r in rows if r.get("stage") == "rl"):  # a step's later rows (a replay, the trainer's totals)
        steps[row["step"]] = {**steps.get(row["step"], {}), **row}  # add to its earlier ones, newer values last
    return [steps[k] for k in sorted(steps)]


def training_table(runs: Sequence[Run], window: int | None = None) -> str:
    """Per RL run, its training steps in windows of ``window`` steps (default: the run's dev evaluation interval,
    so each window ends at a point of its dev curve): the mean of each :data:`TRAINING` column over the steps that
    logged it ("—" where none did: absent, not 0). A step trained twice (resumed from a checkpoint) counts once,
    with the values it logged last. Empty without RL runs that logged a step."""
    rl = {r.name: rows for r in runs if r.start is not None and (rows := _training_rows(r))}
    if not rl:
        return ""
    episode = sorted({k for rows in rl.values() for row in rows for k in row if k.startswith("episode/")})
    columns = [c for key in TRAINING for c in (episode if key == "episode/*" else [key])]
    headers = [TRAINING.get(c) or c.removeprefix("episode/").replace("_", " ") for c in columns]
    lines = ["Training, in windows of steps (means over each window's steps of what the trained episodes scored):",
             "", "| arm | seed | steps | " + " | ".join(headers) + " |", "|---" * (3 + len(columns)) + "|"]  # fmt: skip
    for run in runs:
        if run.name not in rl:
            continue
        size = window or run.config.eval.every or run.config.rl.steps
        rows = rl[run.name]
        for first in range(1, rows[-1]["step"] + 1, size):
            part = [r for r in rows if first <= r["step"] < first + size]
            cells = []
            for column in columns:
                values = [float(r[column]) for r in part if isinstance(r.get(column), (int, float))]
                cells.append(f"{statistics.mean(values):.{1 if column == 'step_time' else 3}f}" if values else "—")
            steps = f"{first}-{min(first + size - 1, rows[-1]['step'])}"
            lines.append(f"| {run.arm.name} | {run.seed} | {steps} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def draw_curves(runs: Sequence[Run], metric: str, path: Path, title: str) -> Path | None:
    """The dev metric against the RL step for every RL run (95% band), each start level dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    drawn = False
    for run in runs:
        if run.start is None:
            continue
        level = bootstrap_mean(list(task_values(load_run(dev_eval_folder(run.start)), metric).values()))
        points = dev_band(run, metric)
        if not points:
            continue
        steps, means, lows, highs = zip(*points, strict=True)
        label = run.arm.name if len({r.seed for r in runs}) == 1 else f"{run.arm.name} seed {run.seed}"
        line = ax.plot([0, *steps], [level.mean, *means], marker="o", label=label)[0]
        ax.fill_between([0, *steps], [level.low, *lows], [level.high, *highs], color=line.get_color(), alpha=0.15)
        ax.axhline(level.mean, color=line.get_color(), linestyle="--", linewidth=0.8)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("RL step")
    ax.set_ylabel(f"dev {metric}")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

"""The table and plot of the per-algorithm comparison (``scripts/compare_algorithms.sh``, ``docs/algorithms.md``).

Reads the shared SFT checkpoint's evaluation (``<sft>/eval/sft``) and, for every RL run, its
``metrics.jsonl`` (the train reward of each RL step) and its final evaluation (``<run>/eval/final``),
all on the same held-aside questions. Writes ``<out>/reward_per_step.png`` (mean train episode reward
per RL step, one line per algorithm) and ``<out>/table.md``: per algorithm the train reward of the
first and last step, the held-aside EM and reward after RL with bootstrap 95% intervals, and the
paired difference to the SFT checkpoint on the same questions (an interval that includes 0: no
measurable change).

Run:
    .venv/bin/python scripts/algorithms_report.py --sft runs/calc-sft --runs runs/calc-grpo runs/calc-ppo \\
        --out docs/algorithms
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agent_trainers.evaluation.compare import Run, load_run, paired
from agent_trainers.evaluation.stats import bootstrap_mean

METRICS = ("em", "reward", "answer_rate")
"""Held-aside metrics shown (EM of the final answer, the env's episode return, answered fraction)."""


def train_rewards(run: Path) -> list[tuple[int, float]]:
    """``(step, mean train episode reward)`` for every RL step of a run, in order.

    Raises:
        ValueError: The run logged no RL step with a reward (a missing figure is an error, not 0).
    """
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = {r["step"]: r["reward"] for r in rows if r.get("stage") == "rl" and "reward" in r and "step_time" in r}
    if not steps:
        raise ValueError(f"{run}/metrics.jsonl has no RL step with a reward")
    return sorted(steps.items())


def step_seconds(run: Path) -> float:
    """Mean wall seconds per RL step (the trainers' ``step_time``)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    times = [r["step_time"] for r in rows if r.get("stage") == "rl" and "step_time" in r]
    return sum(times) / len(times)


def algorithm_of(run: Path) -> str:
    """The run's algorithm, from its resolved ``config.yaml``."""
    import yaml

    return str(yaml.safe_load((run / "config.yaml").read_text())["algorithm"])


def _cell(values: list[float]) -> str:
    return bootstrap_mean(values).format(3)


def table(sft: Run, runs: dict[str, tuple[Path, Run]]) -> str:
    """The Markdown table: one row for the SFT checkpoint, one per algorithm."""
    head = ["model", "train reward step 1 → last", "s/step"]
    head += [f"held-aside {m}" for m in METRICS] + [f"Δ{m} vs SFT (paired)" for m in ("em", "reward")]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]

    def metric_cells(run: Run) -> list[str]:
        return [_cell([v for r in run.records if (v := r.metric(m)) is not None]) for m in METRICS]

    lines.append("| SFT checkpoint | — | — | " + " | ".join(metric_cells(sft)) + " | — | — |")
    for name, (folder, ev) in runs.items():
        rewards = [r for _, r in train_rewards(folder)]
        deltas = []
        for m in ("em", "reward"):
            diff = paired(ev, sft, m)
            deltas.append("absent" if diff is None else f"{diff.difference.format(3, signed=True)}")
        row = [name, f"{rewards[0]:.3f} → {rewards[-1]:.3f}", f"{step_seconds(folder):.0f}", *metric_cells(ev), *deltas]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def plot(runs: dict[str, tuple[Path, Run]], path: Path, title: str) -> None:
    """Mean train episode reward per RL step, one line per algorithm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, (folder, _) in runs.items():
        steps, rewards = zip(*train_rewards(folder), strict=True)
        ax.plot(steps, rewards, marker="o", label=name)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("RL step (each step plays its own task)")
    ax.set_ylabel("mean train episode reward")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Write the table and the plot, and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sft", required=True, help="the SFT run folder (its eval/sft holds the checkpoint's eval)")
    parser.add_argument("--runs", nargs="+", required=True, help="the RL run folders")
    parser.add_argument("--out", default="docs/algorithms", help="folder for table.md and reward_per_step.png")
    args = parser.parse_args(argv)
    sft = load_run(Path(args.sft) / "eval" / "sft")
    runs: dict[str, tuple[Path, Any]] = {}
    for folder in map(Path, args.runs):
        runs[algorithm_of(folder)] = (folder, load_run(folder / "eval" / "final"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = table(sft, runs)
    (out / "table.md").write_text(text, encoding="utf-8")
    plot(runs, out / "reward_per_step.png", "Calculator-v0, SmolLM2-135M from one SFT checkpoint")
    print(text)
    print(f"written: {out / 'table.md'}, {out / 'reward_per_step.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Idle micro-batches: RL steps with every micro-batch run, and with the idle ones left out, on the same episodes.

A micro-batch whose every advantage is exactly 0 has a gradient of exactly 0 (no KL term, no entropy bonus), so
:class:`~agent_trainers.algorithms.AgentGRPOTrainer` does not run the model on it
(``skip_idle_micro_batches``). This benchmark trains one recipe twice in this process from one checkpoint: the
reference runs every micro-batch, the other leaves the idle ones out. Same seed, same weights at every step, so
the same episodes: it prints per step the reward of both runs (equal), the idle micro-batches, the seconds of
each run's step and of its rollouts, the ratio of the totals and of the update part (step minus rollouts), and
whether the two final models are bit-identical (sha256 of ``model.safetensors``).

The default is rejection-sampling fine-tuning on HotpotQA (``learn_hotpotqa`` with ``algorithm=rft``,
``rft.threshold=0.5``: few episodes are kept, most micro-batches are idle) from an SFT checkpoint such as the one
``agent-r1 sweep learn_hotpotqa`` makes; ``--quick`` runs the tiny random model (nothing kept: every step idle)
in about a minute.

Run:
    python benchmarks/idle_micro_batches.py --model runs/learn_hotpotqa/seed0/sft/sft --steps 10
    python benchmarks/idle_micro_batches.py --quick
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import tyro

from agent_trainers.algorithms import AgentGRPOTrainer
from agent_trainers.pipeline.cli import parse_set
from agent_trainers.pipeline.config import load_config
from agent_trainers.pipeline.train import run_training


@dataclass
class Args:
    """What to train, and where."""

    model: str = ""
    """The checkpoint every run starts from (no SFT stage), e.g. an SFT checkpoint of ``learn_hotpotqa``."""
    config: str = "learn_hotpotqa"
    """The recipe (an ``agent-r1 train`` config)."""
    steps: int = 10
    """RL steps of each run."""
    out: str = "runs/idle-micro-batches"
    """Where the two runs go (replaced on each call)."""
    quick: bool = False
    """The ``tiny`` recipe's random model, 3 steps."""
    set: Annotated[list[str], tyro.conf.UseAppendAction] = field(default_factory=list)
    """A ``KEY=VALUE`` override for both runs (as ``agent-r1 train --set``); repeat the flag for more."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


def overrides(args: Args, out: Path) -> dict[str, Any]:
    """The settings of one run: the recipe as rejection sampling from ``args.model``, no evaluation to speak of."""
    common: dict[str, Any] = {
        "algorithm": "rft", "rft.threshold": 0.5, "rl.steps": args.steps, "sft.enabled": False,
        "eval.every": 0, "eval.tasks": 1, "eval.before": False, "output_dir": str(out),
    }  # fmt: skip
    if args.quick:
        common |= {"model.name": "tiny-random", "rl.steps": 3}
    elif args.model:
        common["model.name"] = str(Path(args.model).resolve())
    else:
        raise SystemExit("--model CHECKPOINT (an SFT checkpoint of the recipe), or --quick")
    return common | parse_set(args.set)


def steps_of(folder: Path) -> list[dict[str, Any]]:
    """The RL step rows of a run's ``metrics.jsonl``, in order."""
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    return [r for r in rows if r.get("stage") == "rl" and "step_time" in r]


def digest(folder: Path) -> str:
    """sha256 of the run's final ``model.safetensors``."""
    return hashlib.sha256((folder / "final" / "model.safetensors").read_bytes()).hexdigest()


def train(args: Args, out: Path, *, skip: bool) -> list[dict[str, Any]]:
    """One run, idle micro-batches left out or not."""
    shutil.rmtree(out, ignore_errors=True)
    config = load_config("tiny" if args.quick else args.config, overrides(args, out))
    AgentGRPOTrainer.skip_idle_micro_batches = skip
    try:
        run_training(config)
    finally:
        AgentGRPOTrainer.skip_idle_micro_batches = True
    return steps_of(out)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    root = Path(args.out)
    every, idle = train(args, root / "every", skip=False), train(args, root / "idle-left-out", skip=True)
    print("\n| step | reward (every / left out) | idle micro-batches | s a step (every / left out) | rollouts s |")
    print("|---|---|---|---|---|")
    for a, b in zip(every, idle, strict=True):
        seconds = f"{a['step_time']:.1f} / {b['step_time']:.1f} | {a['time/rollout']:.1f} / {b['time/rollout']:.1f}"
        print(f"| {a['step']} | {a['reward']:.4f} / {b['reward']:.4f} | {b['update/idle_micro_batches']:.0f} | "
              f"{seconds} |")  # fmt: skip
    total = [sum(r["step_time"] for r in run) for run in (every, idle)]
    update = [t - sum(r["time/rollout"] for r in run) for t, run in zip(total, (every, idle), strict=True)]
    same = digest(root / "every") == digest(root / "idle-left-out")
    print(f"\nsteps: {total[0]:.1f} s -> {total[1]:.1f} s ({total[1] / total[0]:.2f}x); update (step - rollouts): "
          f"{update[0]:.1f} s -> {update[1]:.1f} s ({update[1] / max(update[0], 1e-9):.2f}x)")  # fmt: skip
    print(f"same rewards every step: {all(a['reward'] == b['reward'] for a, b in zip(every, idle, strict=True))}; "
          f"final weights bit-identical: {same}")  # fmt: skip


if __name__ == "__main__":
    main()

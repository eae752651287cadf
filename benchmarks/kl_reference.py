"""The KL reference's cost: RL steps with a KL term in the loss, the reference scored by TRL's own pass and by the
loss's routine, from one checkpoint on the same tasks.

With ``rl.beta > 0`` GRPO's loss has a KL term to the policy as RL started, so every training batch is also scored
by that frozen reference. TRL scores it by running every padded row, prompt and completion whole, through the
model and its fused LM head. :class:`~agent_trainers.algorithms.AgentGRPOTrainer` scores it the way its loss
scores the policy (``own_reference_scoring``): each group's prompt once, each completion up to its last model
token, the LM head on the loss-mask positions only. This benchmark trains one recipe twice in this process, TRL's
pass first (the reference), then the trainer's, and prints per step the reward of both runs, TRL's logged
``kl``, the seconds of each step and of its rollouts, and the ratio of the totals and of the update part (step
minus rollouts: the reference pass, the forward and backward, the optimizer).

The two references agree to float rounding, not bit for bit, so the weights after a step differ in the last bits
and a later step's sampled episodes may differ; the rewards say where they did.

The default is ``learn_hotpotqa`` with ``rl.beta=0.04`` (``hotpotqa_rate``'s KL arm) from an SFT checkpoint such
as the one ``agent-r1 sweep learn_hotpotqa`` makes; ``--quick`` runs the ``tiny`` recipe's random model.

Run:
    python benchmarks/kl_reference.py --model runs/learn_hotpotqa/seed0/sft/sft --steps 4
    python benchmarks/kl_reference.py --quick
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import tyro

from agent_trainers.algorithms import AgentGRPOTrainer
from agent_trainers.experiments.protocol import metrics_rows
from agent_trainers.pipeline.cli import parse_set
from agent_trainers.pipeline.config import load_config
from agent_trainers.pipeline.train import run_training


@dataclass
class Args:
    """What to train, and where."""

    model: str = ""
    """The checkpoint both runs start from (no SFT stage), e.g. an SFT checkpoint of ``learn_hotpotqa``."""
    config: str = "learn_hotpotqa"
    """The recipe (an ``agent-r1 train`` config)."""
    beta: float = 0.04
    """The KL coefficient (``rl.beta``)."""
    steps: int = 4
    """RL steps of each run."""
    out: str = "runs/kl-reference"
    """Where the two runs go (replaced on each call)."""
    quick: bool = False
    """The ``tiny`` recipe's random model, 3 steps."""
    set: Annotated[list[str], tyro.conf.UseAppendAction] = field(default_factory=list)
    """A ``KEY=VALUE`` override for both runs (as ``agent-r1 train --set``); repeat the flag for more."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


def overrides(args: Args, out: Path) -> dict[str, Any]:
    """The settings of one run: GRPO with the KL term from ``args.model``, no evaluation to speak of."""
    common: dict[str, Any] = {
        "algorithm": "grpo", "rl.beta": args.beta, "rl.steps": args.steps, "sft.enabled": False,
        "eval.every": 0, "eval.tasks": 1, "eval.before": False, "output_dir": str(out),
    }  # fmt: skip
    if args.quick:
        common |= {"model.name": "tiny-random", "rl.steps": 3}
    elif args.model:
        common["model.name"] = str(Path(args.model).resolve())
    else:
        raise SystemExit("--model CHECKPOINT (an SFT checkpoint of the recipe), or --quick")
    return common | parse_set(args.set)


def rl_steps(folder: Path) -> list[dict[str, Any]]:
    """The RL step rows of a run's ``metrics.jsonl``, in order.

    Raises:
        SystemExit: The run logged no RL step.
    """
    rows = [r for r in metrics_rows(folder) if r.get("stage") == "rl" and "step_time" in r]
    if not rows:
        raise SystemExit(f"no RL step in {folder / 'metrics.jsonl'}")
    return rows


def train(args: Args, out: Path, *, own: bool) -> list[dict[str, Any]]:
    """One run, its reference scored by the trainer's routine (``own``) or by TRL's pass."""
    shutil.rmtree(out, ignore_errors=True)
    config = load_config("tiny" if args.quick else args.config, overrides(args, out))
    AgentGRPOTrainer.own_reference_scoring = own
    start = time.perf_counter()
    try:
        run_training(config)
    finally:
        AgentGRPOTrainer.own_reference_scoring = True
    print(f"[kl-reference] {'own routine' if own else 'TRL pass'}: {time.perf_counter() - start:.0f} s in all")
    return rl_steps(out)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    root = Path(args.out)
    trl, own = train(args, root / "trl-pass", own=False), train(args, root / "own-routine", own=True)
    print("\n| step | reward (TRL / own) | kl (TRL / own) | s a step (TRL / own) | rollouts s (TRL / own) |")
    print("|---|---|---|---|---|")
    for a, b in zip(trl, own, strict=True):
        print(
            f"| {a['step']} | {a['reward']:.4f} / {b['reward']:.4f} | {a['kl']:.2e} / {b['kl']:.2e} | "
            f"{a['step_time']:.1f} / {b['step_time']:.1f} | {a['time/rollout']:.1f} / {b['time/rollout']:.1f} |"
        )
    total = [sum(r["step_time"] for r in run) for run in (trl, own)]
    update = [t - sum(r["time/rollout"] for r in run) for t, run in zip(total, (trl, own), strict=True)]
    print(
        f"\nsteps: {total[0]:.1f} s -> {total[1]:.1f} s ({total[1] / total[0]:.2f}x); update (step - rollouts): "
        f"{update[0]:.1f} s -> {update[1]:.1f} s ({update[1] / max(update[0], 1e-9):.2f}x)"
    )
    same = [a["reward"] == b["reward"] for a, b in zip(trl, own, strict=True)]
    print(f"steps with the same reward: {sum(same)} of {len(same)}")


if __name__ == "__main__":
    main()

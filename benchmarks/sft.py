"""SFT steps three ways: TRL's fused LM head (every position projected on a CPU) or this project's (the taught
positions only, :class:`~agent_trainers.algorithms.sft.AgentSFTTrainer`), with and without gradient checkpointing.

The reference is TRL's defaults: its head, checkpointing on. Each variant trains one recipe's SFT stage for
``steps`` optimizer steps from the same weights on the same oracle episodes, in its own subprocess (so that its
peak RSS is its own), and the table gives per variant the seconds a step (the mean after ``warmup`` steps), the
peak RSS, the ratio to the reference, its losses, and how far its update (trained minus initial weights) is from
the reference's, relative to the reference's (0 is bit-identical; rounding alone gives a small number, since Adam
turns a sign flip in a near-zero gradient into a whole step).

The default is ``learn_hasty`` (SmolLM2-135M-Instruct, Calculator-v0 episodes of ~300 tokens, 4 a step: the SFT of
the calculator sweeps); ``--config learn_hotpotqa`` is HotpotQA's (~570 tokens an episode, ~40 of them taught);
``--quick`` is the tiny random model (seconds a step).

Run:
    python benchmarks/sft.py --steps 4
    python benchmarks/sft.py --config learn_hotpotqa --steps 4
    python benchmarks/sft.py --quick
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tyro
from transformers import TrainerCallback

VARIANTS = {
    "trl": (False, True),  # TRL's head, checkpointing on: TRL's defaults (the reference)
    "taught": (True, True),  # the taught positions only, checkpointing on (the SFT stage's default)
    "taught-no-ckpt": (True, False),  # the taught positions only, checkpointing off
}
"""Each variant's ``(taught positions only, gradient checkpointing)``."""


@dataclass
class Args:
    """What to train."""

    config: str = "learn_hasty"
    """The recipe whose SFT stage is trained (an ``agent-r1 train`` config)."""
    steps: int = 4
    """Optimizer steps of each variant."""
    warmup: int = 1
    """Steps left out of the mean (the first pays one-off costs)."""
    threads: int = 0
    """torch threads (0: the recipe's ``threads`` when it is a number, else torch's default)."""
    out: str = "runs/bench-sft"
    """Scratch folder for the trainers' output and each variant's weights."""
    quick: bool = False
    """The tiny random model on the ``tiny`` recipe's env, 3 steps."""
    variants: str = ",".join(VARIANTS)
    """The variants to run, comma-separated (the first is the reference the others are read against)."""
    variant: str = ""
    """Internal: run one variant (a key of ``VARIANTS``) in this process and print its JSON."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


class StepTimes(TrainerCallback):
    """Wall seconds of each optimizer step (``on_step_begin`` to ``on_step_end``)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._began = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._began = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.seconds.append(time.perf_counter() - self._began)


def one_variant(args: Args, variant: str) -> dict[str, Any]:
    """Train the recipe's SFT stage for ``args.steps`` steps in this process as ``variant``; its step times, tokens,
    peak RSS, losses and gradient norms, and where its update (trained minus initial weights) was saved."""
    import torch
    from datasets import Dataset

    from agent_trainers.algorithms.sft import AgentSFTTrainer, make_sft_config, oracle_episodes, tokenize_episode
    from agent_trainers.pipeline.config import load_config
    from agent_trainers.pipeline.stages import train_tasks
    from agent_trainers.policies import load_model

    taught_only, checkpointing = VARIANTS[variant]
    c = load_config("tiny" if args.quick else args.config, {"model.name": "tiny-random"} if args.quick else {})
    threads = args.threads or (c.threads if isinstance(c.threads, int) else 0)
    if threads:
        torch.set_num_threads(threads)
    steps = 3 if args.quick else args.steps
    model, tok = load_model(c.model.name, device="cpu", seed=c.seed)
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    tasks = train_tasks(c)
    picks = [tasks[i % len(tasks)] for i in range(steps * c.sft.batch_size)]
    episodes = oracle_episodes(
        c.env.id, picks, env_kwargs=c.env.train_kwargs, seed=c.seed, flawed_share=c.sft.flawed_share
    )
    rows = [tokenize_episode(e.messages, tok) for e in episodes]
    out = Path(args.out) / variant
    sft_args = make_sft_config(
        device="cpu", output_dir=str(out), max_steps=steps, learning_rate=c.sft.learning_rate,
        per_device_train_batch_size=c.sft.batch_size, max_length=c.sft.max_length, seed=c.seed,
        gradient_checkpointing=checkpointing, disable_tqdm=True,
    )  # fmt: skip
    timer = StepTimes()
    AgentSFTTrainer.score_taught_positions_only = taught_only
    model.train()
    trainer = AgentSFTTrainer(
        model=model, args=sft_args, train_dataset=Dataset.from_list(rows), processing_class=tok, callbacks=[timer]
    )
    trainer.train()
    out.mkdir(parents=True, exist_ok=True)
    torch.save(torch.cat([p.detach().flatten() for p in model.parameters()]) - start, out / "update.pt")
    logged = [r for r in trainer.state.log_history if "loss" in r]
    return {
        "variant": variant,
        "step_seconds": timer.seconds,
        "tokens_a_step": sum(len(r["input_ids"]) for r in rows) / steps,
        "taught_a_step": sum(sum(r["assistant_masks"]) for r in rows) / steps,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "losses": [float(r["loss"]) for r in logged],
        "grad_norms": [float(r["grad_norm"]) for r in logged],
        "update": str(out / "update.pt"),
    }


def run_variant(args: Args, variant: str) -> dict[str, Any]:
    """One variant in a subprocess of this script (its own peak RSS); its JSON."""
    command = [sys.executable, __file__, "--variant", variant, "--config", args.config, "--steps", str(args.steps),
               "--threads", str(args.threads), "--out", args.out, "--variants", args.variants]  # fmt: skip
    command += ["--quick"] if args.quick else []
    print(f"[sft bench] {variant}: {3 if args.quick else args.steps} steps ...", flush=True)
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def mean_after(seconds: list[float], warmup: int) -> float:
    """The mean of the step times after the first ``warmup`` ones (all of them when there are no more)."""
    kept = seconds[warmup:] or seconds
    return sum(kept) / len(kept)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.variant:
        print(json.dumps(one_variant(args, args.variant)))
        return
    import torch

    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown or not names:
        raise SystemExit(f"--variants: {unknown or 'none given'}; choose from {', '.join(VARIANTS)}")
    runs = [run_variant(args, name) for name in names]
    reference = runs[0]
    base = mean_after(reference["step_seconds"], args.warmup)
    update = torch.load(reference["update"])
    print(f"\n{reference['tokens_a_step']:.0f} tokens a step, {reference['taught_a_step']:.0f} of them taught\n")
    print("| variant (head, checkpointing) | s a step (mean after warmup) | steps (s) | x reference | peak RSS MB | "
          "losses | update's distance to the reference's (relative) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in runs:
        taught, checkpointing = VARIANTS[r["variant"]]
        label = f"{r['variant']} ({'taught' if taught else 'TRL'}, {'on' if checkpointing else 'off'})"
        gap = float((torch.load(r["update"]) - update).norm() / update.norm())
        seconds = mean_after(r["step_seconds"], args.warmup)
        steps = ", ".join(f"{s:.1f}" for s in r["step_seconds"])
        losses = ", ".join(f"{x:.4f}" for x in r["losses"])
        print(f"| {label} | {seconds:.2f} | {steps} | {seconds / base:.2f}x | {r['peak_rss_mb']:,.0f} | {losses} | "
              f"{gap:.2g} |")  # fmt: skip


if __name__ == "__main__":
    main()

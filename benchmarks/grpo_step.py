"""One GRPO step: our ``rollout_func`` path vs TRL's own ``environment_factory`` path.

Both paths train the same model on the same env, batch and token budget with
TRL's ``GRPOTrainer``; only the rollout differs:

* ours  - :class:`agent_trainers.algorithms.EnvRolloutFunc` (batched generation across
  episodes, exact token ids, env tokens masked), ``AgentGRPOTrainer``;
* TRL's - ``environment_factory=make_environment_factory(env_id)``; TRL's tool
  loop runs tools one at a time.

Each path runs in its own subprocess, so peak RSS (``ru_maxrss``) is its own.
Seconds per step is the mean of TRL's ``step_time`` over the measured steps
(after ``warmup`` steps). Prints both figures and the ratios ours / TRL's
(goal: time <= 0.5x, memory <= 1.0x).

Run:
    .venv/bin/python benchmarks/grpo_step.py --model smollm2 --steps 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import subprocess
import sys
import tempfile
from dataclasses import dataclass


@dataclass
class Args:
    """Benchmark settings (every field is a command-line flag)."""

    model: str = "smollm2"
    """``smollm2``, ``tiny-random``, or a checkpoint folder (e.g. a run's ``sft/``, a policy that calls tools)."""
    env_id: str = "AgentR1/HotpotQA-v0"
    """Environment played by both paths."""
    num_generations: int = 4
    """Rollouts per step (one task, a group of G)."""
    max_turns: int = 2
    """Turn limit (ours: env turns; TRL: tool-calling iterations)."""
    max_new_tokens_per_turn: int = 64
    """Tokens the model may generate per turn (ours; TRL has no per-turn cap)."""
    completion_budget: int = 512
    """Completion tokens (model + tool tokens) per rollout, both paths: TRL's ``max_completion_length``;
    ours: ``max_total_tokens`` = the longest prompt + this."""
    warmup: int = 1
    """Steps run before measuring."""
    steps: int = 2
    """Measured steps."""
    seed: int = 0
    """Seed of both runs."""
    threads: int = 1
    """torch CPU threads per run (1: avoids oversubscribing a shared 2-core machine)."""
    path: str = ""
    """Internal: run only this path (``ours`` or ``trl``) and print JSON."""


def _parse() -> Args:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in dataclasses.fields(Args):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    return Args(**vars(parser.parse_args()))


def _model(args: Args):
    from agent_trainers.policies import load_model

    return load_model(args.model, device="cpu")


def _run_path(args: Args) -> dict[str, float]:
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from trl import GRPOTrainer

    from agent_trainers.algorithms.env_factory import make_environment_factory, trl_dataset_rows
    from agent_trainers.algorithms.grpo import AgentGRPOTrainer
    from agent_trainers.algorithms.rollout_func import EnvRolloutFunc, env_reward, grpo_dataset_rows
    from agent_trainers.algorithms.trl_args import make_grpo_config
    from agent_trainers.rollout import RolloutConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok = _model(args)
    total = args.warmup + args.steps
    common = {
        "output_dir": tempfile.mkdtemp(prefix="grpo_bench_"),
        "max_steps": total,
        "per_device_train_batch_size": args.num_generations,
        "num_generations": args.num_generations,
        "seed": args.seed,
        "shuffle_dataset": False,
    }
    tasks = list(range(total))
    if args.path == "ours":
        rows = grpo_dataset_rows(args.env_id, tasks)
        longest = max(
            len(
                tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=True)[
                    "input_ids"
                ]
            )
            for r in rows
        )
        rc = RolloutConfig(
            max_turns=args.max_turns,
            max_new_tokens_per_turn=args.max_new_tokens_per_turn,
            max_total_tokens=longest + args.completion_budget,
        )
        trainer = AgentGRPOTrainer(
            model=model,
            processing_class=tok,
            reward_funcs=[env_reward],
            args=make_grpo_config(max_completion_length=args.completion_budget, **common),
            train_dataset=Dataset.from_list(rows),
            rollout_func=EnvRolloutFunc(rows, config=rc, seed=args.seed),
            advantage="turn",
        )
    else:
        cfg = make_grpo_config(
            max_completion_length=args.completion_budget,
            max_tool_calling_iterations=args.max_turns,
            **common,
        )
        trainer = GRPOTrainer(
            model=model,
            processing_class=tok,
            args=cfg,
            train_dataset=Dataset.from_list(trl_dataset_rows(tasks, env_id=args.env_id)),
            environment_factory=make_environment_factory(args.env_id, seed=args.seed),
        )
    trainer.train()
    times = [r["step_time"] for r in trainer.state.log_history if "step_time" in r][args.warmup :]
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return {"s_per_step": sum(times) / len(times), "peak_rss_mb": rss_mb}


def main() -> None:
    args = _parse()
    if args.path:
        print("RESULT " + json.dumps(_run_path(args)))
        return
    results = {}
    for path in ("trl", "ours"):
        argv = [sys.executable, __file__, "--path", path]
        for f in dataclasses.fields(Args):
            if f.name != "path":
                argv += [f"--{f.name.replace('_', '-')}", str(getattr(args, f.name))]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        if proc.returncode or not lines:
            sys.exit(f"{path} run failed:\n{proc.stderr[-3000:]}")
        results[path] = json.loads(lines[-1][len("RESULT ") :])
    ours, ref = results["ours"], results["trl"]
    print(
        f"GRPO step, {args.model}, {args.env_id}, G={args.num_generations}, {args.max_turns} turns, "
        f"{args.completion_budget} completion tokens"
    )
    print(f"{'path':28s} {'s/step':>8s} {'peak RSS MB':>12s}")
    print(f"{'ours (rollout_func)':28s} {ours['s_per_step']:8.2f} {ours['peak_rss_mb']:12.0f}")
    print(f"{'TRL environment_factory':28s} {ref['s_per_step']:8.2f} {ref['peak_rss_mb']:12.0f}")
    print(
        f"ratio ours/TRL: time {ours['s_per_step'] / ref['s_per_step']:.2f}x (goal <= 0.5x), "
        f"memory {ours['peak_rss_mb'] / ref['peak_rss_mb']:.2f}x (goal <= 1.0x)"
    )


if __name__ == "__main__":
    main()

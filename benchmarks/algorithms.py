"""Does each RL algorithm learn, and what does a step cost? One row per algorithm on ``AgentR1/Bandit-v0``.

Protocol - every algorithm gets the same start, tasks, seeds and budget:

1. **Format warm-up, once.** The 2-layer random model (``tiny-random``) is
   behaviour-cloned on demonstrations that answer in the env's format with a
   *uniformly random* arm, so it learns to answer, not which arm pays (one arm
   in four pays 1: a uniform chooser earns 0.25). The loss uses the library's
   chunked scorer (:func:`agent_trainers.algorithms.ppo.actor_critic.policy_scores`,
   logits on answer tokens only). Saved under ``<out>/warmup``; a warm-up whose
   model does not answer on the held-aside tasks stops the benchmark.
2. **RL.** ``agent-r1``'s pipeline (:func:`agent_trainers.pipeline.train.run_training`)
   with one config in which only ``algorithm`` differs, each algorithm in its
   own subprocess (so its peak RSS is its own), all from the warm-up checkpoint.
3. **A row**: the mean train reward of the first and last step and of the
   first and last three steps; the held-aside eval reward (64 tasks past the
   32 trained on, sampled at T = 0.7: the chance of naming the paying arm)
   before RL (the warm-up model) and after; seconds per RL step (the
   trainers' ``step_time``); peak RSS; and both ratios to GRPO, measured in the
   same run.

``tests/benchmarks/test_learning_smoke.py`` runs this protocol in the default
test suite, so a change that stops an algorithm learning fails CI.

Run:
    .venv/bin/python benchmarks/algorithms.py --quick      # 20 RL steps each
    .venv/bin/python benchmarks/algorithms.py --steps 40 --seed 3
"""

from __future__ import annotations

import json
import random
import resource
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import tyro

from agent_gym.core.files import json_lines

ALGORITHMS = ("grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "ppo")
ENV_ID = "AgentR1/Bandit-v0"
TRAIN_TASKS = 32
EVAL_FIRST_TASK = 1000
"""The held-aside tasks start here, past the ``TRAIN_TASKS`` trained on (the same family: the same paying arm,
the arms listed in other orders)."""


@dataclass
class Args:
    """Benchmark settings (every field is a command-line flag)."""

    algorithms: str = ",".join(ALGORITHMS)
    """Comma-separated algorithms; ``grpo`` is always run (it is the reference)."""
    steps: int = 40
    """RL steps per algorithm."""
    quick: bool = False
    """20 RL steps per algorithm (overrides ``steps``)."""
    num_generations: int = 4
    """Episodes per task in a step (the group)."""
    prompts_per_step: int = 2
    """Tasks per step: a step plays ``prompts_per_step * num_generations`` episodes. 4 did not make the toy
    robust: on the seed where 8 episodes lost the format, 16 saved GRPO but RLOO and PPO lost it
    (docs/results/2026-12-03-algorithms.md)."""
    learning_rate: float = 1e-3
    """RL learning rate (the policy's; PPO's critic uses ``critic_learning_rate``). At 5e-3 (the earlier
    default) GRPO learned on 1 of 5 seeds and collapsed into malformed answers on the others; at 1e-3 it
    learned on all of them on AMD AVX2 cores (docs/algorithms.md). On an AVX-512 Xeon at one thread seed 0
    lost the format under every algorithm, seeds 1-4 learned; at 5e-4 over 40 steps PPO lost it on seed 1."""
    rl_warmup_steps: int = 0
    """RL steps over which the learning rate rises from 0 (``rl.warmup_steps``). 5 did not rescue the seed
    that 8 episodes a step collapsed (malformed at steps 9-12, held-aside 0.56 at the end)."""
    critic_learning_rate: float = 1e-2
    """PPO's value head learning rate."""
    ppo_update_epochs: int = 1
    """PPO's passes over each step's episodes. With 1 (and one minibatch) PPO takes one optimizer step per
    RL step, as the TRL-based algorithms do; 2 epochs x 2 minibatches at lr 5e-3 overshot on this task
    (approx. KL 0.28 after the first step, the mean reward fell to 0)."""
    ppo_num_minibatches: int = 1
    """PPO's optimizer steps per pass."""
    ppo_critic: str = "separate"
    """PPO's critic: ``separate`` (its own copy of the backbone) or ``value_head`` (on the policy's backbone).
    With ``value_head`` the value loss moves the shared backbone, and Adam moves each weight by about the
    learning rate whatever ``vf_coef`` is: over seeds 0-4 PPO collapsed on seed 4 (held-aside 0.19 -> 0.00)
    and went all-malformed for a step on seed 3, and CI's seed 0 ended at -0.33; ``separate`` learned on
    all five (0.73-0.86) and on the perturbed-kernel rerun (docs/algorithms.md)."""
    ppo_critic_warmup_steps: int = 0
    """PPO's first RL steps that train the critic alone (``ppo.critic_warmup_steps``)."""
    temperature: float = 0.7
    """Sampling temperature of training rollouts."""
    warmup_steps: int = 300
    """Behaviour-cloning steps of the format warm-up (batch 8, lr ``warmup_lr`` decayed linearly); its loss
    reaches the floor of a uniform arm choice (ln 4 over the ~9 answer tokens, ~0.15) by then."""
    warmup_lr: float = 1e-2
    """Peak learning rate of the warm-up (at 3e-2, the earlier default, 2 of 5 seeds never learned the format)."""
    eval_tasks: int = 64
    """Held-aside eval episodes before and after RL (tasks of another family, ``task_seed`` 1)."""
    eval_temperature: float = 0.7
    """Sampling temperature of the evaluation: its mean reward is the chance of naming the paying arm (a
    uniform chooser: 0.25), a smooth measure where a greedy one jumps between 0 and 1."""
    eval_before_all: bool = False
    """Evaluate the warm-up model in every algorithm's run (by default only GRPO's: it is the same model)."""
    seed: int = 0
    """Seed of the warm-up and of every RL run."""
    threads: int = 1
    """torch CPU threads per process (0: torch's default)."""
    out: str = "runs/bench-algorithms"
    """Where the warm-up checkpoint and each algorithm's run go."""
    child: str = ""
    """Internal: run this algorithm's RL and print its results as JSON."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    args = tyro.cli(Args, description=__doc__, args=argv)
    if args.quick:
        args.steps = 20
    return args


# ------------------------------------------------------------------ warm-up
def _demos(n: int, seed: int) -> list[list[dict[str, str]]]:
    """``n`` chats that answer at once with a uniformly random arm (the format, not the paying arm)."""
    import gymnasium as gym

    from agent_gym.envs.bandit import ARMS

    env, rng, chats = gym.make(ENV_ID), random.Random(seed), []
    for k in range(n):
        _, info = env.reset(seed=seed + k, options={"task_index": k % env.unwrapped.num_tasks()})
        _, _, _, _, info = env.step(env.unwrapped.parser.format_answer(rng.choice(ARMS)))
        chats.append([{"role": m["role"], "content": m["content"]} for m in info["messages"]])
    return chats


def _clone_batch(rows: list[tuple[list[int], list[int]]], tok: Any) -> tuple[dict[str, Any], Any, int]:
    from agent_trainers.algorithms.ppo.actor_critic import pack_sequences

    batch = pack_sequences([p for p, _ in rows], [c for _, c in rows], pad_id=tok.pad_token_id)
    inputs = {k: getattr(batch, k) for k in ("input_ids", "attention_mask", "position_ids")}
    return inputs, batch.valid, batch.prompt_width


def warm_up(args: Args, bar: Any) -> Path:
    """Behaviour-clone the format onto ``tiny-random``; returns the checkpoint folder."""
    import torch

    from agent_trainers.algorithms.ppo.actor_critic import policy_scores
    from agent_trainers.algorithms.sft import tokenize_episode
    from agent_trainers.policies import load_model

    model, tok = load_model("tiny-random", device="cpu", seed=args.seed)
    rows = []
    for chat in _demos(64, args.seed):
        row = tokenize_episode(chat, tok)
        first = row["assistant_masks"].index(1)  # one answer turn: everything after the prompt is the answer
        rows.append((row["input_ids"][:first], row["input_ids"][first:]))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.warmup_lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 - s / args.warmup_steps)
    draw = random.Random(args.seed)
    model.train()
    for _ in range(args.warmup_steps):
        inputs, valid, width = _clone_batch([draw.choice(rows) for _ in range(8)], tok)
        logp, _, _ = policy_scores(model, inputs, width, valid, temperature=1.0, chunk=512)
        loss = -(logp * valid).sum() / valid.sum()
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        bar.update(1)
        bar.set_postfix(stage="warm-up", loss=f"{loss.item():.3f}")
    folder = Path(args.out) / "warmup"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


# ---------------------------------------------------------------------- RL
def _config(args: Args, algorithm: str) -> dict[str, Any]:
    ppo = {
        "critic": args.ppo_critic,
        "update_epochs": args.ppo_update_epochs,
        "num_minibatches": args.ppo_num_minibatches,
        "micro_batch_size": 8,
        "critic_warmup_steps": args.ppo_critic_warmup_steps,
        "critic_learning_rate": args.critic_learning_rate,
    }
    return {
        "seed": args.seed,
        "threads": args.threads,
        "output_dir": str(Path(args.out) / algorithm),
        "device": "cpu",
        "algorithm": algorithm,
        "model": {"name": str(Path(args.out) / "warmup")},
        "env": {"id": ENV_ID, "train_kwargs": {}, "train_tasks": TRAIN_TASKS,
                "eval_kwargs": {"num_tasks": EVAL_FIRST_TASK + args.eval_tasks}},
        "rollout": {"max_turns": 3, "max_new_tokens_per_turn": 24, "max_total_tokens": 512,
                    "temperature": args.temperature},
        "sft": {"enabled": False},
        "rl": {"steps": args.steps, "num_generations": args.num_generations, "prompts_per_step": args.prompts_per_step,
               "learning_rate": args.learning_rate, "warmup_steps": args.rl_warmup_steps, "save_steps": 10_000},
        "eval": {"tasks": args.eval_tasks, "first_task": EVAL_FIRST_TASK, "temperature": args.eval_temperature,
                 "every": 0, "before": algorithm == "grpo" or args.eval_before_all},
        algorithm: ppo if algorithm == "ppo" else {"advantage": "turn"},
    }  # fmt: skip


def run_algorithm(args: Args, algorithm: str, progress: Any = None) -> dict[str, Any]:
    """One algorithm's RL run (called in a subprocess); returns its figures."""
    import shutil

    from transformers import TrainerCallback

    from agent_trainers.pipeline.config import config_from_dict
    from agent_trainers.pipeline.train import run_training

    class Progress(TrainerCallback):
        def on_step_end(self, *a: Any, **k: Any) -> None:
            if progress is not None:
                progress.put(1)

    import psutil  # a dependency of accelerate

    shutil.rmtree(Path(args.out) / algorithm, ignore_errors=True)
    rss_start_mb = psutil.Process().memory_info().rss / 2**20  # libraries imported, no model yet
    result = run_training(config_from_dict(_config(args, algorithm)), callbacks=[Progress()])
    rows = [json.loads(line) for line in json_lines((result.output_dir / "metrics.jsonl").read_text())]
    steps = [r for r in rows if r["stage"] == "rl" and "step_time" in r]
    evals = {r["phase"]: r["reward"] for r in rows if r["stage"] == "eval"}
    rewards = [r["reward"] for r in steps]
    return {
        "algorithm": algorithm,
        "rewards": rewards,
        "eval_before": evals.get("before"),
        "eval_after": evals["final"],
        "s_per_step": sum(r["step_time"] for r in steps) / len(steps),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_start_mb": rss_start_mb,
    }


def check_warmup(eval_before: float | None) -> None:
    """Refuse a warm-up that did not teach the format: its held-aside episodes must answer (reward >= 0; a
    malformed turn costs 0.1, so a model that never answers scores below 0)."""
    if eval_before is None or eval_before < 0:
        raise RuntimeError(
            f"the format warm-up failed: held-aside reward {eval_before} before RL (< 0: malformed answers); "
            "lower --warmup-lr or raise --warmup-steps"
        )


def _child_main(args: Args, algorithm: str, progress: Any) -> dict[str, Any]:
    from agent_trainers.policies.threads import apply_threads

    apply_threads(args.threads)
    return run_algorithm(args, algorithm, progress)


def _run_all(args: Args, algorithms: list[str], bar: Any) -> list[dict[str, Any]]:
    context = get_context("spawn")
    manager = context.Manager()
    queue = manager.Queue()
    results = []
    for algorithm in algorithms:
        bar.set_postfix(stage=algorithm)
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            future = pool.submit(_child_main, args, algorithm, queue)
            while not future.done():
                try:
                    bar.update(queue.get(timeout=0.5))
                except Exception:  # queue.Empty: nothing yet
                    pass
            results.append(future.result())
        if len(results) == 1:  # GRPO's run evaluated the warm-up model: stop now if it never answers
            check_warmup(results[0]["eval_before"])
        while not queue.empty():
            bar.update(queue.get())
    return results


# ------------------------------------------------------------------ report
def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def report(results: list[dict[str, Any]], args: Args, wall: float) -> None:
    """Print one row per algorithm and its ratios to GRPO."""
    from rich.console import Console
    from rich.table import Table

    ref = next(r for r in results if r["algorithm"] == "grpo")
    table = Table(title=f"{ENV_ID}: {args.steps} RL steps x {args.num_generations * args.prompts_per_step} episodes")
    for name in ("algorithm", "step 1", "last", "first 3", "last 3", "eval before>after", "s/step", "peak RSS MB",
                 "over start MB", "s/step vs GRPO", "RSS vs GRPO"):  # fmt: skip
        table.add_column(name, justify="left" if name == "algorithm" else "right")
    before = ref["eval_before"]
    for r in results:
        rw = r["rewards"]
        table.add_row(
            r["algorithm"], f"{rw[0]:.3f}", f"{rw[-1]:.3f}", f"{_mean(rw[:3]):.3f}", f"{_mean(rw[-3:]):.3f}",
            f"{before:.3f} > {r['eval_after']:.3f}", f"{r['s_per_step']:.2f}", f"{r['peak_rss_mb']:.0f}",
            f"{r['peak_rss_mb'] - r['rss_start_mb']:.0f}",
            f"{r['s_per_step'] / ref['s_per_step']:.2f}x", f"{r['peak_rss_mb'] / ref['peak_rss_mb']:.2f}x",
        )  # fmt: skip
    Console(width=200).print(table)
    cpu = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    used = sum(u.ru_utime + u.ru_stime for u in cpu)
    print(f"reward: mean env reward per episode (1 = the paying arm; a uniform chooser earns 0.25); "
          f"peak RSS: the process's high-water mark; over start: that minus its RSS before the model was loaded; "
          f"wall {wall:.0f} s, CPU {used:.0f} s (all processes)")  # fmt: skip


def main() -> int:
    """Run the warm-up, every algorithm, and print the table."""
    from tqdm import tqdm

    args = parse_args()
    algorithms = ["grpo", *[a for a in args.algorithms.split(",") if a and a != "grpo"]]
    unknown = sorted(set(algorithms) - set(ALGORITHMS))
    if unknown:
        print(f"algorithms.py: error: unknown algorithm(s) {unknown}; choose from {list(ALGORITHMS)}", file=sys.stderr)
        return 2
    from agent_trainers.policies.threads import apply_threads

    apply_threads(args.threads)
    start = time.perf_counter()
    with tqdm(total=args.warmup_steps + len(algorithms) * args.steps, unit="step", desc="algorithms.py") as bar:
        warm_up(args, bar)
        results = _run_all(args, algorithms, bar)
    report(results, args, time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Every task of every procedural env: does it reset, and does the oracle solve it?

For ``AgentR1/Calculator-v0`` and ``AgentR1/SQLite-v0`` (each as
``gymnasium.make`` returns it), resets every task index (10,000 each by
default) and plays the scripted oracle (``env.unwrapped.oracle_action()``)
to the end. A task counts as solved when the episode terminates with
``answer_em == 1`` and ``evidence_recall == 1``. Exceptions on ``reset`` or
``step`` are counted (and the first few printed), never hidden.

The reference, measured in the same run on the same tasks, is a policy that
answers ``0`` at once (how often a blind guess scores); the ratio is oracle
success over that.

Usage:
    python benchmarks/procedural_oracle.py                       # both envs, all 10,000 tasks each
    python benchmarks/procedural_oracle.py --env-ids AgentR1/SQLite-v0 --num-tasks 500
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field

import gymnasium as gym
import tyro
from tqdm import tqdm

import agent_gym  # noqa: F401  (registers the ids)


@dataclass
class Args:
    """Benchmark settings."""

    env_ids: list[str] = field(default_factory=lambda: ["AgentR1/Calculator-v0", "AgentR1/SQLite-v0"])
    """Environment ids to measure."""
    num_tasks: int = 0
    """Task indices 0..num_tasks-1 (0: every task of the env)."""
    seed: int = 0
    """Seed of ``reset`` for task i is ``seed + i``."""
    max_steps: int = 20
    """Steps per oracle episode before it counts as unsolved."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


def oracle_solves(env: gym.Env, index: int, seed: int, max_steps: int) -> bool:
    """Play the oracle on task ``index``; True when it answers exactly with all evidence found."""
    env.reset(seed=seed, options={"task_index": index})
    for _ in range(max_steps):
        _, _, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        if terminated or truncated:
            metrics = info.get("metrics", {})
            return terminated and metrics["answer_em"] == 1.0 and metrics["evidence_recall"] == 1.0
    return False


def guess_solves(env: gym.Env, index: int, seed: int) -> bool:
    """Answer ``0`` at once; True when that is scored exactly right."""
    env.reset(seed=seed, options={"task_index": index})
    _, _, terminated, _, info = env.step(env.unwrapped.parser.format_answer("0"))
    return terminated and info["metrics"]["answer_em"] == 1.0


def measure(env_id: str, args: Args) -> dict[str, float]:
    env = gym.make(env_id)
    n = args.num_tasks or env.unwrapped.num_tasks()
    solved = guessed = errors = 0
    start = time.perf_counter()
    for i in tqdm(range(n), desc=env_id, unit="task", mininterval=2.0):
        try:
            solved += oracle_solves(env, i, args.seed + i, args.max_steps)
            guessed += guess_solves(env, i, args.seed + i)
        except Exception:  # counted and shown: the point is to find every failing task
            errors += 1
            if errors <= 3:
                print(f"\n{env_id} task {i}:\n{traceback.format_exc()}")
    seconds = time.perf_counter() - start
    return {"tasks": n, "solved": solved, "guessed": guessed, "errors": errors, "seconds": seconds}


def main() -> None:
    args = parse_args()
    print("oracle success = terminated with answer_em 1 and evidence_recall 1; reference = answering '0' at once")
    results = {env_id: measure(env_id, args) for env_id in args.env_ids}
    print(f"\n{'env id':24s} {'tasks':>6s} {'errors':>6s} {'oracle':>8s} {'guess 0':>8s} {'ratio':>7s} {'seconds':>8s}")
    for env_id, r in results.items():
        oracle, guess = r["solved"] / r["tasks"], r["guessed"] / r["tasks"]
        ratio = f"{oracle / guess:7.1f}" if guess else f"{'inf':>7s}"
        print(
            f"{env_id:24s} {r['tasks']:6d} {r['errors']:6d} {oracle:8.2%} {guess:8.2%} {ratio} {r['seconds']:8.1f}"
            f"   ({r['solved']}/{r['tasks']} solved)"
        )


if __name__ == "__main__":
    main()

"""Env-step overhead: what an environment costs on top of its tools.

For each environment id, plays scripted oracle episodes (``env.unwrapped.oracle_action()``)
and measures the wall time of ``env.step``. The reference, measured in the same
run, is the *bare* tool time: the very same tool calls replayed directly with
``Tool.call`` outside the environment. The env overhead per step is
``(step time - bare tool time) / steps``; the ratio is step time over bare tool time.

Both sides run the same code: the calls are recorded in an untimed first pass
over the episodes (the recording hook wraps ``Tool.call``), then the same
seeded episodes are timed with the hook removed, and the recorded calls are
replayed through the same, unwrapped ``Tool.call``. The timed pass must take
the same steps and make the same calls as the recorded one (checked), so the
reference is exactly the tool work inside the timed steps.

Usage:
    python benchmarks/env_step.py                      # every registered id
    python benchmarks/env_step.py --env-ids AgentR1/HotpotQA-v0 --episodes 200
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import tyro

import agent_gym
from agent_gym.core.tool import Tool, ToolContext


@dataclass
class Args:
    """Benchmark settings."""

    env_ids: list[str] = field(default_factory=list)
    """Environment ids to measure (default: every registered id)."""
    episodes: int = 100
    """Oracle episodes per environment."""
    seed: int = 0
    """Seed of the first episode (episode i uses seed + i)."""
    warmup: int = 3
    """Untimed episodes first (index building, caches), on seeds after the timed ones."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


class _Recorder:
    """Patches ``Tool.call`` to record every call made during the (untimed) recording pass."""

    def __init__(self) -> None:
        self.calls: list[tuple[Tool, dict[str, Any]]] = []
        self._original = Tool.call

    def __enter__(self) -> _Recorder:
        original, calls = self._original, self.calls

        def recording_call(tool: Tool, arguments: Any, ctx: ToolContext | None = None):
            calls.append((tool, dict(arguments) if isinstance(arguments, dict) else arguments))
            return original(tool, arguments, ctx)

        Tool.call = recording_call  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        Tool.call = self._original  # type: ignore[method-assign]


def play(env: gym.Env, seed: int) -> tuple[int, int, float]:
    """One oracle episode; returns (steps, tool calls run, seconds spent inside env.step)."""
    env.reset(seed=seed)
    steps, calls, spent = 0, 0, 0.0
    while True:
        action = env.unwrapped.oracle_action()
        start = time.perf_counter()
        _, _, terminated, truncated, info = env.step(action)
        spent += time.perf_counter() - start
        steps += 1
        calls += len(info["tool_calls"])
        if terminated or truncated:
            return steps, calls, spent


def measure(env_id: str, args: Args) -> dict[str, float]:
    env = gym.make(env_id)
    for i in range(args.warmup):
        play(env, args.seed + args.episodes + i)
    seeds = [args.seed + i for i in range(args.episodes)]
    with _Recorder() as rec:  # untimed: which tool calls do these episodes make?
        recorded = [play(env, s)[:2] for s in seeds]
    results = [play(env, s) for s in seeds]  # timed, with the same Tool.call as the replay below
    if [r[:2] for r in results] != recorded or sum(c for _, c in recorded) != len(rec.calls):
        raise RuntimeError(f"{env_id}: the timed episodes made other steps or calls than the recorded ones")
    steps = sum(s for s, _, _ in results)
    step_time = sum(t for _, _, t in results)
    ctx = ToolContext(rng=np.random.default_rng(0))
    start = time.perf_counter()
    for tool, arguments in rec.calls:
        tool.call(arguments, ctx)
    bare = time.perf_counter() - start
    env.close()
    return {
        "steps": steps,
        "calls": len(rec.calls),
        "steps_per_s": steps / step_time,
        "us_per_step": 1e6 * step_time / steps,
        "bare_tool_us_per_step": 1e6 * bare / steps,
        "overhead_us_per_step": 1e6 * (step_time - bare) / steps,
        "ratio": step_time / bare if bare > 0 else float("inf"),
    }


def main() -> None:
    args = parse_args()
    env_ids = args.env_ids or [env_id for env_id, _ in agent_gym.list_envs()]
    print(f"oracle episodes per env: {args.episodes}; reference = the same tool calls replayed bare")
    header = f"{'env id':32s} {'steps/s':>9s} {'µs/step':>9s} {'bare tool µs':>12s} {'overhead µs':>11s} {'ratio':>6s}"
    print(header)
    print("-" * len(header))
    for env_id in env_ids:
        r = measure(env_id, args)
        print(
            f"{env_id:32s} {r['steps_per_s']:9.0f} {r['us_per_step']:9.1f} {r['bare_tool_us_per_step']:12.1f} "
            f"{r['overhead_us_per_step']:11.1f} {r['ratio']:6.2f}"
        )


if __name__ == "__main__":
    main()

"""Fuzz every registered env through ``gymnasium.make`` and report crashes, the slowest step and memory.

For each environment id, plays episodes whose actions are drawn from
:mod:`agent_gym.testing.strategies`: the hostile classes (huge numbers, deep
JSON, repeated tags, 1 MiB actions, mixed valid/malformed calls), random
near-valid actions that reach the whole MDP (``next_action``), random text,
and plain oracle actions. Every (action format x noise x action-length limit)
configuration gets an equal share of the actions: ``tool_call`` and ``tags``;
no noise and heavy noise; the default 16,384-character limit (long actions
refused before parsing) and a 2 MiB limit (so that every hostile action
reaches the parser).

Reported per env: actions, crashes (an exception out of ``step``; must be 0),
the slowest step and its class, the slowest hostile step, p99 step time,
peak RSS, the fraction of episodes that found evidence / answered correctly,
and the reference - the median step of plain oracle actions measured in the
same run - with the ratios p99 / reference and slowest / reference. The target
is every step under ``target_ms`` (50 ms: any 1 MiB action of any shape).

Usage:
    python benchmarks/fuzz.py                 # 10,000 actions per env (about 5-10 minutes on 2 cores)
    python benchmarks/fuzz.py --quick         # 500 actions per env
    python benchmarks/fuzz.py --env-ids AgentR1/HotpotQA-v0 --actions 2000
"""

from __future__ import annotations

import gc
import itertools
import math
import resource
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import tyro
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from tqdm import tqdm

import agent_gym
from agent_gym.core.env import ToolEnv
from agent_gym.testing.strategies import (
    deep_json_actions,
    huge_number_actions,
    megabyte_actions,
    mixed_call_actions,
    next_action,
    repeated_tag_actions,
)

HOSTILE = ("huge_number", "deep_json", "repeated_tag", "megabyte", "mixed_calls")
KINDS = (*HOSTILE, "near_valid", "random_text", "oracle")
NOISE = {
    "failure_prob": 0.1,
    "timeout_prob": 0.05,
    "truncate_prob": 0.2,
    "retrieval": {"drop_prob": 0.2, "shuffle_prob": 0.5, "distractor_prob": 0.2},
}


@dataclass
class Args:
    """Fuzz settings."""

    env_ids: list[str] = field(default_factory=list)
    """Environment ids to fuzz (default: every registered id)."""
    actions: int = 10_000
    """Actions per environment, split evenly over the 8 configurations."""
    quick: bool = False
    """Smoke run: 500 actions per environment."""
    seed: int = 0
    """Seed of the first hypothesis batch (batch b uses seed + b)."""
    steps_per_episode: int = 8
    """At most this many actions per episode (the env's turn limit may end it sooner)."""
    roomy_action_length: int = 2 * 2**20
    """The larger action-length limit, so 1 MiB actions reach the parser."""
    target_ms: float = 50.0
    """The target: no step slower than this (what the issue asks of any 1 MiB action)."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    args = tyro.cli(Args, description=__doc__, args=argv)
    if args.quick:
        args.actions = 500
    return args


class GcClock:
    """Seconds the cyclic garbage collector ran (it may pause any step, whoever made the garbage)."""

    def __init__(self) -> None:
        self.total = 0.0
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.total += time.perf_counter() - self._start


@dataclass
class Step:
    """One timed step: wall time, this thread's CPU time, and garbage-collection time inside it (seconds)."""

    kind: str
    wall: float
    cpu: float
    gc: float
    preview: str


@dataclass
class Tally:
    """Everything measured for one env."""

    steps: list[Step] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    episodes: int = 0
    found_evidence: int = 0
    correct: int = 0

    @property
    def count(self) -> int:
        return len(self.steps)

    def times(self, kind: str | None = None, what: str = "wall") -> list[float]:
        return [getattr(s, what) for s in self.steps if kind is None or s.kind == kind]


def _draw(data: st.DataObject, env: gym.Env, kind: str) -> str:
    base = env.unwrapped
    assert isinstance(base, ToolEnv)
    names = list(base.tools) or ["search"]
    arg_names = [p for t in base.tools.values() for p in t.parameters.get("properties", {})] or ["query"]
    strategies = {
        "near_valid": lambda: next_action(env),
        "random_text": lambda: st.text(max_size=300),
        "huge_number": lambda: huge_number_actions(names, arg_names),
        "deep_json": lambda: deep_json_actions(names, arg_names),
        "repeated_tag": lambda: repeated_tag_actions([f"<{n}>" for n in names]),
        "megabyte": lambda: megabyte_actions([f"<{n}>" for n in names]),
        "mixed_calls": lambda: mixed_call_actions(names, arg_names),
    }
    if kind == "oracle":
        return base.oracle_action()
    return data.draw(strategies[kind](), label=kind)


def _episode(data: st.DataObject, env: gym.Env, tally: Tally, steps: int, bar: tqdm, gc_clock: GcClock) -> None:
    """One episode of drawn actions; every step timed, every exception recorded (and the episode ended)."""
    base = env.unwrapped
    episode_seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    env.reset(seed=episode_seed, options={"task_index": data.draw(st.integers(0, base.num_tasks() - 1))})
    tally.episodes += 1
    info: dict[str, Any] = {}
    for _ in range(steps):
        kind = data.draw(st.sampled_from(KINDS), label="kind")
        action = _draw(data, env, kind)
        wall, cpu, gc_before = time.perf_counter(), time.thread_time(), gc_clock.total
        try:
            _, _, terminated, truncated, info = env.step(action)
        except Exception as exc:  # the point of fuzzing: record, never stop
            tally.crashes.append(f"{kind}: {type(exc).__name__}: {exc!s:.200} <- {action[:120]!r}")
            tally.crashes.append("".join(traceback.format_exception(exc)[-3:]))
            return
        finally:
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            tally.steps.append(Step(kind, wall, cpu, gc_clock.total - gc_before, action[:80]))
            bar.update(1)
        if terminated or truncated:
            break
    tally.found_evidence += bool(info["evidence_found"])
    tally.correct += info.get("metrics", {}).get("answer_em") == 1.0


def fuzz_config(
    env: gym.Env, n_actions: int, args: Args, batch_seed: int, bar: tqdm, tally: Tally, gc_clock: GcClock
) -> None:
    """Play whole episodes on ``env`` until at least ``n_actions`` more actions were taken.

    Each batch is one hypothesis run (generation only, no shrinking, no
    database) whose examples are episodes; every example depends only on its
    own draws, as hypothesis requires.
    """
    target = tally.count + n_actions
    for batch in itertools.count():
        remaining = target - tally.count
        if remaining <= 0:
            return

        @seed(batch_seed * 1000 + batch)
        @settings(
            max_examples=max(1, math.ceil(remaining / args.steps_per_episode)),
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(st.data())
        def episodes(data: st.DataObject) -> None:
            _episode(data, env, tally, args.steps_per_episode, bar, gc_clock)

        episodes()


def _ms(x: float) -> str:
    return f"{1000 * x:.2f}"


def _slowest(tally: Tally, key: Any) -> Step:
    return max(tally.steps, key=key)


def report(env_id: str, tally: Tally, rss_mb: float, target_ms: float) -> dict[str, Any]:
    """Print one env's figures; returns them."""
    wall = np.array(tally.times())
    reference = float(np.median(tally.times("oracle"))) if tally.times("oracle") else math.nan
    p99 = float(np.percentile(wall, 99))
    by_wall = _slowest(tally, lambda s: s.wall)
    by_cpu = _slowest(tally, lambda s: s.cpu - s.gc)
    hostile = [s for s in tally.steps if s.kind in HOSTILE]
    worst_hostile = max(hostile, key=lambda s: s.wall) if hostile else None
    row = {
        "env": env_id,
        "actions": int(wall.size),
        "crashes": len(tally.crashes) // 2,
        "slowest_ms": 1000 * by_wall.wall,
        "slowest_kind": by_wall.kind,
        "slowest_cpu_ms": 1000 * (by_cpu.cpu - by_cpu.gc),
        "slowest_hostile_ms": 1000 * worst_hostile.wall if worst_hostile else math.nan,
        "p99_ms": 1000 * p99,
        "oracle_median_ms": 1000 * reference,
        "over_target": int(np.sum(wall * 1000 > target_ms)),
        "over_target_cpu": sum(1000 * (s.cpu - s.gc) > target_ms for s in tally.steps),
        "peak_rss_mb": rss_mb,
    }
    print(f"\n== {env_id}: {row['actions']} actions in {tally.episodes} episodes, crashes: {row['crashes']}")
    for crash in tally.crashes[:6]:
        print("   CRASH", crash)
    print(
        f"   slowest step (wall) {_ms(by_wall.wall)} ms, of which garbage collection {_ms(by_wall.gc)} ms and "
        f"CPU {_ms(by_wall.cpu)} ms ({by_wall.kind}: {by_wall.preview!r})"
    )
    print(
        f"   slowest step by own CPU time (CPU minus GC) {_ms(by_cpu.cpu - by_cpu.gc)} ms "
        f"({by_cpu.kind}: {by_cpu.preview!r})"
    )
    print(
        f"   slowest hostile step (wall) {row['slowest_hostile_ms']:.2f} ms; p99 {_ms(p99)} ms; "
        f"peak RSS {rss_mb:.0f} MB"
    )
    print(f"   reference: median oracle step {_ms(reference)} ms (n={len(tally.times('oracle'))})")
    print(f"   ratios: p99 / reference {p99 / reference:.1f}x, slowest / reference {by_wall.wall / reference:.1f}x")
    print(
        f"   target <= {target_ms:.0f} ms: {row['over_target']} steps over it by wall time, "
        f"{row['over_target_cpu']} by own CPU time"
    )
    kinds = sorted({s.kind for s in tally.steps})
    per_kind = ", ".join(f"{k} {len(tally.times(k))}/{_ms(max(tally.times(k)))}" for k in kinds)
    print(f"   per class (count/max wall ms): {per_kind}")
    print(
        f"   episodes that found evidence {tally.found_evidence / tally.episodes:.1%}, "
        f"answered correctly {tally.correct / tally.episodes:.1%}"
    )
    return row


def main(args: Args) -> list[dict[str, Any]]:
    env_ids = args.env_ids or [env_id for env_id, _ in agent_gym.list_envs()]
    configs = list(itertools.product(("tool_call", "tags"), (None, NOISE), (16_384, args.roomy_action_length)))
    share = math.ceil(args.actions / len(configs))
    rows = []
    gc_clock = GcClock()
    with tqdm(total=share * len(configs) * len(env_ids), unit="action", desc="fuzz", mininterval=2.0) as bar:
        for env_id in env_ids:
            tally = Tally()
            for i, (fmt, noise, limit) in enumerate(configs):
                env = gym.make(env_id, action_format=fmt, tool_noise=noise, max_action_length=limit)
                bar.set_postfix_str(f"{env_id.split('/')[-1]} {fmt} noise={'on' if noise else 'off'} limit={limit}")
                fuzz_config(env, share, args, args.seed + i, bar, tally, gc_clock)
            rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            with tqdm.external_write_mode():
                rows.append(report(env_id, tally, rss_mb, args.target_ms))
    crashes = sum(r["crashes"] for r in rows)
    worst = max(rows, key=lambda r: r["slowest_ms"])
    worst_cpu = max(r["slowest_cpu_ms"] for r in rows)
    print(
        f"\nTOTAL: {sum(r['actions'] for r in rows)} actions over {len(rows)} envs, {crashes} crashes; slowest step "
        f"{worst['slowest_ms']:.2f} ms wall ({worst['env']}, {worst['slowest_kind']}), {worst_cpu:.2f} ms own CPU; "
        f"steps over {args.target_ms:.0f} ms: {sum(r['over_target'] for r in rows)} by wall time, "
        f"{sum(r['over_target_cpu'] for r in rows)} by own CPU time"
    )
    return rows


if __name__ == "__main__":
    main(parse_args())

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

import argparse
import itertools
import math
import resource
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field, fields
from typing import Any

import gymnasium as gym
import numpy as np
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


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in fields(Args):
        flag = f"--{f.name.replace('_', '-')}"
        if f.name == "env_ids":
            parser.add_argument(flag, nargs="*", default=[], help="environment ids (default: all)")
        elif isinstance(f.default, bool):
            parser.add_argument(flag, action="store_true")
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default)
    args = Args(**vars(parser.parse_args()))
    if args.quick:
        args.actions = 500
    return args


@dataclass
class Tally:
    """Everything measured for one env."""

    times: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    crashes: list[str] = field(default_factory=list)
    slowest: tuple[float, str, str] = (0.0, "", "")
    episodes: int = 0
    found_evidence: int = 0
    correct: int = 0

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.times.values())


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


def _episode(data: st.DataObject, env: gym.Env, tally: Tally, steps: int, bar: tqdm) -> None:
    """One episode of drawn actions; every step timed, every exception recorded (and the episode ended)."""
    base = env.unwrapped
    episode_seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    env.reset(seed=episode_seed, options={"task_index": data.draw(st.integers(0, base.num_tasks() - 1))})
    tally.episodes += 1
    info: dict[str, Any] = {}
    for _ in range(steps):
        kind = data.draw(st.sampled_from(KINDS), label="kind")
        action = _draw(data, env, kind)
        start = time.perf_counter()
        try:
            _, _, terminated, truncated, info = env.step(action)
        except Exception as exc:  # the point of fuzzing: record, never stop
            tally.crashes.append(f"{kind}: {type(exc).__name__}: {exc!s:.200} <- {action[:120]!r}")
            tally.crashes.append("".join(traceback.format_exception(exc)[-3:]))
            return
        finally:
            spent = time.perf_counter() - start
            tally.times[kind].append(spent)
            tally.slowest = max(tally.slowest, (spent, kind, action[:80]))
            bar.update(1)
        if terminated or truncated:
            break
    tally.found_evidence += bool(info.get("evidence_found"))
    tally.correct += info.get("metrics", {}).get("answer_em") == 1.0


def fuzz_config(env: gym.Env, n_actions: int, args: Args, batch_seed: int, bar: tqdm, tally: Tally) -> None:
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
            _episode(data, env, tally, args.steps_per_episode, bar)

        episodes()


def _ms(x: float) -> str:
    return f"{1000 * x:.2f}"


def report(env_id: str, tally: Tally, rss_mb: float, target_ms: float) -> dict[str, Any]:
    """Print one env's figures; returns them."""
    all_times = np.array([t for v in tally.times.values() for t in v])
    hostile = [(max(tally.times[k]), k) for k in HOSTILE if tally.times[k]]
    reference = float(np.median(tally.times["oracle"])) if tally.times["oracle"] else math.nan
    p99 = float(np.percentile(all_times, 99))
    slowest, kind, preview = tally.slowest
    row = {
        "env": env_id,
        "actions": int(all_times.size),
        "crashes": len(tally.crashes) // 2,
        "slowest_ms": 1000 * slowest,
        "slowest_kind": kind,
        "slowest_hostile_ms": 1000 * max(hostile)[0] if hostile else math.nan,
        "p99_ms": 1000 * p99,
        "oracle_median_ms": 1000 * reference,
        "peak_rss_mb": rss_mb,
    }
    print(f"\n== {env_id}: {row['actions']} actions in {tally.episodes} episodes, crashes: {row['crashes']}")
    for crash in tally.crashes[:6]:
        print("   CRASH", crash)
    print(f"   slowest step {_ms(slowest)} ms ({kind}: {preview!r})")
    print(f"   slowest hostile step {row['slowest_hostile_ms']:.2f} ms; p99 {_ms(p99)} ms; peak RSS {rss_mb:.0f} MB")
    print(f"   reference: median oracle step {_ms(reference)} ms (n={len(tally.times['oracle'])})")
    print(f"   ratios: p99 / reference {p99 / reference:.1f}x, slowest / reference {slowest / reference:.1f}x")
    print(f"   target: every step <= {target_ms:.0f} ms: {'met' if 1000 * slowest <= target_ms else 'MISSED'}")
    per_kind = ", ".join(f"{k} {len(v)}/{_ms(max(v))}" for k, v in sorted(tally.times.items()))
    print(f"   per class (count/max ms): {per_kind}")
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
    with tqdm(total=share * len(configs) * len(env_ids), unit="action", desc="fuzz", mininterval=2.0) as bar:
        for env_id in env_ids:
            tally = Tally()
            for i, (fmt, noise, limit) in enumerate(configs):
                env = gym.make(env_id, action_format=fmt, tool_noise=noise, max_action_length=limit)
                bar.set_postfix_str(f"{env_id.split('/')[-1]} {fmt} noise={'on' if noise else 'off'} limit={limit}")
                fuzz_config(env, share, args, args.seed + i, bar, tally)
            rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            with tqdm.external_write_mode():
                rows.append(report(env_id, tally, rss_mb, args.target_ms))
    crashes = sum(r["crashes"] for r in rows)
    worst = max(rows, key=lambda r: r["slowest_ms"])
    print(
        f"\nTOTAL: {sum(r['actions'] for r in rows)} actions over {len(rows)} envs, {crashes} crashes; slowest step "
        f"{worst['slowest_ms']:.2f} ms ({worst['env']}, {worst['slowest_kind']}); target <= {args.target_ms:.0f} ms: "
        f"{'met' if worst['slowest_ms'] <= args.target_ms else 'MISSED'}"
    )
    return rows


if __name__ == "__main__":
    main(parse_args())

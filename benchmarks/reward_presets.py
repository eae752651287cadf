"""Which behaviour does each reward preset pay for? Real rollouts, replayed under every preset.

The question (issue: "a reward that cannot be won by not answering"): under the
``process`` preset a search that finds new gold evidence earns up to 0.2 while a
wrong answer earns 0, so an agent whose answers are mostly wrong may do better,
in expectation, by searching until the turn limit than by answering. This
script measures it on a real policy's episodes:

1. **Play** ``tasks x samples`` episodes with a model (an SFT checkpoint, say) at
   ``temperature``, through the env as ``gymnasium.make`` returns it.
2. **Replay** each episode's actions in a fresh env built with each preset (the
   same task and seed: the env is deterministic given them), summing the step
   rewards: the episode's return under that preset. The replay under the
   preset it was played with must reproduce the recorded return (checked).
3. **Compare**, per preset, the mean return of the episodes that answered with
   that of the episodes that never answered (cut by the turn limit or a
   budget), and the paired difference over the tasks that have both kinds
   (mean over tasks of ``mean(answered) - mean(unanswered)``, bootstrap 95%
   interval). A negative difference means not answering pays more.

Reference: the ``outcome`` preset (0 for a wrong answer and for no answer, so
not answering can never win) is printed beside the others in the same run.

Run:
    .venv/bin/python benchmarks/reward_presets.py --model runs/demo/sft --env-kwargs '{"data_path": ...}'
    .venv/bin/python benchmarks/reward_presets.py --model tiny-random --tasks 4 --samples 2   # a smoke run
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tyro


@dataclass
class Args:
    """Benchmark settings."""

    model: str = "smollm2"
    """The policy: a checkpoint folder, ``smollm2`` or ``tiny-random``."""
    env_id: str = "AgentR1/HotpotQA-v0"
    """The environment."""
    env_kwargs: str = '{"split": "train"}'
    """``gymnasium.make`` kwargs as JSON (the preset under test is set by this script)."""
    presets: str = "process,gated,outcome"
    """Comma-separated presets to replay under (the first one is also the one played with)."""
    tasks: int = 32
    """Tasks (the first N of the split)."""
    samples: int = 8
    """Episodes per task."""
    temperature: float = 1.0
    """Sampling temperature."""
    max_turns: int = 4
    """Turn limit of an episode."""
    max_new_tokens_per_turn: int = 40
    """Tokens per model turn."""
    max_total_tokens: int = 1280
    """Token budget of an episode."""
    batch_size: int = 32
    """Sequences decoded together."""
    threads: str = "1"
    """torch CPU threads (``auto``: the idle cores)."""
    seed: int = 0
    """Seed of the rollouts."""
    out: str = ""
    """If set, write every episode's returns here (JSON lines)."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


def replay_return(env_id: str, env_kwargs: dict[str, Any], trajectory: Any, preset: str) -> float:
    """The return of ``trajectory``'s actions replayed in a fresh env with reward preset ``preset``."""
    import gymnasium as gym

    env = gym.make(env_id, **{**env_kwargs, "reward": preset})
    try:
        env.reset(seed=trajectory.seed, options={"task_index": trajectory.task_index})
        actions = [m["content"] for m in trajectory.messages if m["role"] == "assistant"]
        total = 0.0
        for action in actions[: len(trajectory.turns)]:
            _, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return total
    finally:
        env.close()


def paired_gap(rows: list[dict[str, Any]], preset: str, seed: int = 0) -> tuple[float, float, float, int] | None:
    """Mean over tasks with both kinds of episode of ``mean(answered) - mean(unanswered)``, with a 95% interval."""
    by_task: dict[int, dict[bool, list[float]]] = {}
    for r in rows:
        by_task.setdefault(r["task_index"], {True: [], False: []})[r["answered"]].append(r["returns"][preset])
    gaps = [statistics.mean(v[True]) - statistics.mean(v[False]) for v in by_task.values() if v[True] and v[False]]
    if not gaps:
        return None
    rng = random.Random(seed)
    boot = sorted(statistics.mean(rng.choices(gaps, k=len(gaps))) for _ in range(2000))
    return statistics.mean(gaps), boot[50], boot[1949], len(gaps)


def play(args: Args, env_kwargs: dict[str, Any], preset: str) -> list[Any]:
    """``tasks x samples`` episodes of the model, with a progress bar (tokens/s, ETA)."""
    from agent_trainers.policies import load_model
    from agent_trainers.policies.threads import apply_threads
    from agent_trainers.policies.transformers_policy import TransformersPolicy
    from agent_trainers.rollout import RolloutConfig, rollout

    apply_threads(args.threads)
    model, tok = load_model(args.model, device="cpu", seed=args.seed)
    model.eval()
    policy = TransformersPolicy(model, tok, batch_size=args.batch_size, seed=args.seed)
    config = RolloutConfig(
        max_turns=args.max_turns,
        max_new_tokens_per_turn=args.max_new_tokens_per_turn,
        max_total_tokens=args.max_total_tokens,
        temperature=args.temperature,
    )
    return rollout(
        policy,
        args.env_id,
        task_indices=list(range(args.tasks)),
        group_size=args.samples,
        seed=args.seed,
        env_kwargs={**env_kwargs, "reward": preset},
        config=config,
        progress=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Play, replay under every preset, print the table."""
    from tqdm import tqdm

    args = parse_args(argv)
    env_kwargs = json.loads(args.env_kwargs)
    presets = [p for p in args.presets.split(",") if p]
    start = time.perf_counter()
    trajectories = play(args, env_kwargs, presets[0])
    rows = []
    for t in tqdm(trajectories, desc="replay", unit="episode"):
        returns = {p: replay_return(args.env_id, env_kwargs, t, p) for p in presets}
        if abs(returns[presets[0]] - t.total_reward) > 1e-9:
            raise AssertionError(
                f"replay of task {t.task_index} (seed {t.seed}) under {presets[0]} gave {returns[presets[0]]}, "
                f"the rollout recorded {t.total_reward}: the env is not deterministic given its actions"
            )
        rows.append({"task_index": t.task_index, "seed": t.seed, "answered": t.answered, "turns": len(t.turns),
                     "stop_reason": str(t.stop_reason), "metrics": t.metrics, "returns": returns})  # fmt: skip
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    answered = [r for r in rows if r["answered"]]
    unanswered = [r for r in rows if not r["answered"]]
    f1 = [float(r["metrics"]["answer_f1"]) for r in answered]
    mean_f1 = f"{statistics.mean(f1):.3f}" if f1 else "-"  # no answer: no F1 (absent, not 0)
    mean_turns = f"{statistics.mean(r['turns'] for r in answered):.2f}" if answered else "-"
    print(
        f"{args.env_id}, model {args.model}: {len(rows)} episodes ({args.tasks} tasks x {args.samples}, "
        f"T={args.temperature}), {len(answered)} answered (mean answer F1 {mean_f1}, mean turns {mean_turns}), "
        f"{len(unanswered)} never answered"
    )
    print("| preset | mean return, answered | mean return, never answered | paired gap answered - not [95% CI] |")
    print("|---|---|---|---|")
    for p in presets:
        a = statistics.mean(r["returns"][p] for r in answered) if answered else float("nan")
        u = statistics.mean(r["returns"][p] for r in unanswered) if unanswered else float("nan")
        gap = paired_gap(rows, p, args.seed)
        shown = "no task has both kinds" if gap is None else f"{gap[0]:+.3f} [{gap[1]:+.3f}, {gap[2]:+.3f}] ({gap[3]})"
        print(f"| {p} | {a:+.3f} | {u:+.3f} | {shown} |")
    print(f"wall {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Command line of the rollout engine: ``python -m agent_trainers.rollout`` / ``agent-r1 rollout``.

Plays episodes with a local model, checks every trajectory token-exact and
writes them as JSONL. Example (real SmolLM2 on real HotpotQA data, CPU)::

    python -m agent_trainers.rollout --env AgentR1/HotpotQA-v0 \\
        --data-path ../shared/data/hotpotqa/dev_distractor_sample_a_300.jsonl --episodes 4 --out runs/rollout.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

from agent_trainers.rollout import RolloutConfig, rollout

__all__ = ["run_rollout_cli"]


def _arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agent_trainers.rollout",
        description="Play episodes with a local model, check them token-exact, save them as JSONL.",
    )
    p.add_argument("--env", required=True, help="environment id, e.g. AgentR1/HotpotQA-v0")
    p.add_argument("--data-path", help="passed to the env as data_path= (e.g. a HotpotQA jsonl file)")
    p.add_argument("--env-kwargs", default="{}", help="more env kwargs as a JSON object")
    p.add_argument("--episodes", type=int, default=4, help="trajectories to play (tasks x group size)")
    p.add_argument("--group-size", type=int, default=1, help="rollouts per task")
    p.add_argument("--first-task", type=int, default=0, help="index of the first task")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="smollm2", help="'smollm2', 'tiny' (random, for smoke tests) or a model dir")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-turns", type=int, default=None)
    p.add_argument("--max-new-tokens", type=int, default=256, help="per turn")
    p.add_argument("--max-total-tokens", type=int, default=2048, help="per trajectory")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (0: torch's default). Default 1: on a busy 2-core machine torch's default "
        "of 2 threads made a SmolLM2 decode step ~100x slower (8 s vs 0.08 s)",
    )
    p.add_argument("--out", default="runs/rollout.jsonl")
    return p


def run_rollout_cli(args: Sequence[str] | argparse.Namespace | None = None) -> int:
    """Entry point of ``python -m agent_trainers.rollout`` / ``agent-r1 rollout``.

    Plays the episodes, runs :func:`agent_trainers.checker.check_trajectory` on
    each, writes them with :func:`agent_trainers.export.save_jsonl` and prints a
    summary. Returns 0, or 1 when a trajectory fails the check.
    """
    from agent_trainers.checker import TrajectoryError, check_trajectory
    from agent_trainers.export import save_jsonl
    from agent_trainers.models import load_smollm2, tiny_random_model
    from agent_trainers.policies import TransformersPolicy

    ns = args if isinstance(args, argparse.Namespace) else _arg_parser().parse_args(args)
    if ns.threads > 0:
        import torch

        torch.set_num_threads(ns.threads)
    if ns.episodes % ns.group_size:
        raise SystemExit(f"--episodes must be divisible by --group-size (got {ns.episodes} and {ns.group_size})")
    env_kwargs = json.loads(ns.env_kwargs) | ({"data_path": ns.data_path} if ns.data_path else {})
    if ns.model == "smollm2":
        model, tok = load_smollm2()
    elif ns.model == "tiny":
        model, tok = tiny_random_model(seed=ns.seed)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model, tok = AutoModelForCausalLM.from_pretrained(ns.model), AutoTokenizer.from_pretrained(ns.model)
    cfg = RolloutConfig(
        max_turns=ns.max_turns,
        max_new_tokens_per_turn=ns.max_new_tokens,
        max_total_tokens=ns.max_total_tokens,
        temperature=ns.temperature,
        top_p=ns.top_p,
        group_size=ns.group_size,
    )
    tasks = range(ns.first_task, ns.first_task + ns.episodes // ns.group_size)
    start = time.perf_counter()
    trajs = rollout(TransformersPolicy(model, tok, batch_size=ns.batch_size, seed=ns.seed), ns.env,
                    task_indices=list(tasks), seed=ns.seed, env_kwargs=env_kwargs, config=cfg)  # fmt: skip
    wall = time.perf_counter() - start
    failures = 0
    for i, t in enumerate(trajs):
        try:
            check_trajectory(t, tok)
            verdict = "token-exact"
        except TrajectoryError as exc:
            failures, verdict = failures + 1, f"CHECK FAILED: {exc}"
        print(
            f"[{i}] task {t.task_id} seed {t.seed}: {len(t.turns)} turns, stop={t.stop_reason}, "
            f"reward={t.total_reward:.3f}, {sum(t.loss_mask)} model / {len(t.completion_ids)} completion tokens, "
            f"metrics={t.metrics}, {verdict}"
        )
    model_tokens = sum(sum(t.loss_mask) for t in trajs)
    path = save_jsonl(trajs, ns.out)
    print(
        f"{len(trajs)} trajectories, {model_tokens} model tokens in {wall:.1f} s; {failures} failed the check; {path}"
    )
    return 1 if failures else 0

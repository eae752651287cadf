"""``agent-r1 demo``: the README's main job.

On the embedded HotpotQA sample (``AgentR1/HotpotQA-v0``, ``split="train"`` to
train, ``split="test"`` held aside) with SmolLM2-135M-Instruct on CPU: evaluate,
cold-start SFT on oracle trajectories, a short GRPO run with turn-level
advantages, evaluate again, and print the before/after table. The settings are
those of ``configs/demo.yaml`` (kept in sync with :data:`DEMO_SETTINGS`).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from agent_trainers.pipeline.config import config_from_dict, load_config

__all__ = ["DEMO_SETTINGS", "QUICK_OVERRIDES", "run_demo"]

DEMO_SETTINGS: dict[str, Any] = {
    "seed": 0,
    "threads": 1,
    "output_dir": "runs/demo",
    "algorithm": "grpo",
    "device": "auto",
    "report_to": "none",
    "model": {"name": "smollm2"},
    "env": {"id": "AgentR1/HotpotQA-v0", "train_kwargs": {"split": "train"}, "eval_kwargs": {"split": "test"}},
    "rollout": {"max_turns": 4, "max_new_tokens_per_turn": 48, "max_total_tokens": 1536, "temperature": 1.0},
    "sft": {"enabled": True, "episodes": 16, "epochs": 1.0, "learning_rate": 2e-4, "batch_size": 2},
    "rl": {
        "enabled": True,
        "steps": 4,
        "num_generations": 4,
        "prompts_per_step": 1,
        "learning_rate": 2e-6,
        "advantage": "turn",
        "save_steps": 2,
    },
    "eval": {"tasks": 8, "temperature": 0.0, "every": 2},
}
"""The demo's configuration (``configs/demo.yaml`` holds the same values)."""

QUICK_OVERRIDES: dict[str, Any] = {
    "sft": {"episodes": 4, "epochs": 1.0},
    "rl": {"steps": 1, "num_generations": 2, "prompts_per_step": 1, "save_steps": 1},
    "eval": {"tasks": 4, "every": 0},
}
"""``--quick``: a smoke run of a minute or two."""


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = _merge(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def run_demo(
    config_path: str | None = None, output_dir: str | None = None, quick: bool = False, resume: bool = False
) -> int:
    """Run the demo and print the before/after table.

    Args:
        config_path: A config file to use instead of :data:`DEMO_SETTINGS`.
        output_dir: Overrides the config's ``output_dir``.
        quick: Apply :data:`QUICK_OVERRIDES`.
        resume: Continue an interrupted run.

    Returns:
        The process exit status (0).
    """
    from agent_trainers.pipeline.report import print_table
    from agent_trainers.pipeline.train import run_training

    if config_path is not None:
        settings = load_config(config_path).to_dict()
    else:
        settings = DEMO_SETTINGS
    if quick:
        settings = _merge(settings, QUICK_OVERRIDES)
    if output_dir is not None:
        settings = _merge(settings, {"output_dir": output_dir})
    config = config_from_dict(copy.deepcopy(settings))
    start = time.perf_counter()
    result = run_training(config, resume=resume)
    minutes = (time.perf_counter() - start) / 60
    print_table(result.evals, title=f"{config.env.id}, held-aside eval ({minutes:.1f} min)")
    print(f"metrics: {Path(config.output_dir) / 'metrics.jsonl'}")
    if result.plot:
        print(f"plot: {result.plot}")
    return 0

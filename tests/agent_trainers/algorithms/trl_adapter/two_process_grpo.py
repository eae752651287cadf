"""A GRPO run for ``accelerate launch --num_processes 2`` that records what each process saw (used by a test).

Each rank writes ``rank<R>.json``: per rollout call its trajectories and the
advantages the trainer computed, plus a checksum of the parameters before and
after training. Run from the repository root::

    accelerate launch --multi_gpu --num_processes 2 \
        -m tests.agent_trainers.algorithms.trl_adapter.two_process_grpo --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset

from agent_trainers.algorithms.shared.advantages import ESTIMATORS
from agent_trainers.algorithms.trl_adapter.grpo import AgentGRPOTrainer
from agent_trainers.algorithms.trl_adapter.rollout_func import EnvRolloutFunc, env_reward
from agent_trainers.algorithms.trl_adapter.trl_args import make_grpo_config
from agent_trainers.policies import tiny_random_model
from agent_trainers.rollout import RolloutConfig, trajectory_to_dict
from agent_trainers.rollout.training import task_rows
from tests.agent_trainers.algorithms.trl_adapter.test_grpo import ScriptedLookup
from tests.agent_trainers.conftest import LOOKUP_ID
from tests.conftest import CAPITALS


class Recorder(AgentGRPOTrainer):
    """Keeps each generation batch's trajectories and advantages."""

    records: list[dict[str, Any]]

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        self.records.append(
            {
                "trajectories": [trajectory_to_dict(row["trajectory"]) for row in inputs],
                "advantages": output["advantages"].tolist(),
            }
        )
        return output


def checksum(model: Any) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--algorithm", default="grpo")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--prompts-per-process", type=int, default=2)
    ap.add_argument("--num-generations", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok = tiny_random_model(seed=0)
    rows = task_rows(LOOKUP_ID, range(len(CAPITALS)))
    fn = EnvRolloutFunc(
        rows,
        config=RolloutConfig(max_new_tokens_per_turn=24, max_total_tokens=1024),
        policy_factory=lambda m, t, s: ScriptedLookup(t),
    )
    config = make_grpo_config(
        device="cpu", output_dir=str(Path(args.out) / "trainer"), max_steps=args.steps, learning_rate=1e-2,
        per_device_train_batch_size=args.prompts_per_process * args.num_generations,
        num_generations=args.num_generations, max_completion_length=1024, seed=0,
    )  # fmt: skip
    trainer = Recorder(
        model=model, reward_funcs=[env_reward], args=config, processing_class=tok,
        train_dataset=Dataset.from_list(rows), rollout_func=fn, algorithm=args.algorithm,
        settings=ESTIMATORS[args.algorithm].settings(advantage="turn"),
    )  # fmt: skip
    trainer.records = []
    before = checksum(trainer.model)
    trainer.train()
    state = trainer.accelerator.state
    report = {
        "rank": int(os.environ["RANK"]),
        "world_size": state.num_processes,
        "distributed_type": str(state.distributed_type),
        "backend": state.backend,
        "records": trainer.records,
        "before": before,
        "after": checksum(trainer.model),
    }
    Path(args.out, f"rank{report['rank']}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main()

"""Does one RL update move the policy the way its advantages say? A check of the whole TRL training path.

The RL stage of a config (``agent-r1 train``'s own trainer: rollouts, advantages, loss masks, micro-batches)
runs for one step from the config's model while the step's batch is kept; then every trained token's
log-probability is scored under the policy before and after the update. Per episode, ``delta`` is the sum
over its trained tokens of ``log pi_after - log pi_before`` and ``adv`` the mean advantage on them. A
correct path raises the surrogate ``sum_i adv_i * delta_i`` (to first order, for any lr: Adam's first step
is a descent direction) and, episode by episode, raises the episodes with a positive advantage and lowers
the others. A path that trains other tokens than it sampled, or scores them with another temperature or
another sign, fails that.

Run:
    .venv/bin/python benchmarks/update_direction.py --config configs/learn_calculator.yaml \\
        --model runs/learning/sft/sft --lr 5e-6
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tyro

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Args:
    """Check settings."""

    config: str = "configs/learn_calculator.yaml"
    """The ``agent-r1 train`` config whose RL stage is checked."""
    model: str = "runs/learning/sft/sft"
    """The policy to start from (a checkpoint folder or a model name)."""
    lr: float = 5e-6
    """The learning rate of the one update."""
    out: str = "runs/update-direction"
    """Where the trainer writes (its checkpoints are not kept)."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one step, score the kept batch before and after, print the verdict."""
    import torch
    import yaml

    from agent_trainers.algorithms.shared.logprobs import frozen_copy, scored_token_logprobs
    from agent_trainers.pipeline.config import config_from_dict
    from agent_trainers.pipeline.stages import run_trl_rl_stage
    from agent_trainers.pipeline.train import open_run

    args = parse_args(argv)
    data = yaml.safe_load((ROOT / args.config).read_text())
    data["model"] = {"name": args.model}
    data["output_dir"] = args.out
    data["rl"] = {**data["rl"], "steps": 1, "learning_rate": args.lr, "save_steps": 1}
    data["sft"] = {**data.get("sft", {}), "enabled": False}
    data["eval"] = {**data.get("eval", {}), "every": 0, "before": False}
    state = open_run(config_from_dict(data))  # as agent-r1 train starts a run
    before = frozen_copy(state.model)
    kept: list[dict] = []

    from agent_trainers.algorithms.trl_adapter import grpo as grpo_module

    original = grpo_module.AgentGRPOTrainer._generate_and_score_completions

    def keep(self, inputs):
        output = original(self, inputs)
        kept.append({k: (v.detach().clone() if torch.is_tensor(v) else copy.copy(v)) for k, v in output.items()})
        kept[-1]["_trainer"] = self
        return output

    grpo_module.AgentGRPOTrainer._generate_and_score_completions = keep
    try:
        run_trl_rl_stage(state)
    finally:
        grpo_module.AgentGRPOTrainer._generate_and_score_completions = original
    (batch,) = kept
    trainer = batch.pop("_trainer")
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    width = batch["completion_ids"].shape[1]
    trained = batch["completion_mask"] * batch.get("tool_mask", torch.ones_like(batch["completion_mask"]))

    def score(model):  # the trainer's own scored log-prob engine, four rows at a time
        rows = []
        for i in range(0, ids.shape[0], 4):
            logps, _ = scored_token_logprobs(
                model, ids[i : i + 4], mask[i : i + 4], width, trained[i : i + 4], temperature=trainer.temperature
            )
            rows.append(logps)
        return torch.cat(rows)

    with torch.no_grad():
        old, new = score(before), score(state.model)
    adv = batch["advantages"]
    adv = adv if adv.dim() == 2 else adv[:, None].expand_as(trained)
    tokens = trained.sum(1).clamp(min=1)
    delta = ((new - old) * trained).sum(1)
    seq_adv = (adv * trained).sum(1) / tokens
    surrogate = float((adv * (new - old) * trained).sum() / trained.sum())
    ups = [float(d) for d, a in zip(delta, seq_adv, strict=True) if a > 0]
    downs = [float(d) for d, a in zip(delta, seq_adv, strict=True) if a < 0]
    agree = sum((float(d) > 0) == (float(a) > 0) for d, a in zip(delta, seq_adv, strict=True) if float(a) != 0)
    signed = sum(1 for a in seq_adv if float(a) != 0)
    print(f"episodes {len(delta)}, trained tokens {int(trained.sum())}, lr {args.lr}")
    print(f"surrogate change (token mean of adv x dlogp): {surrogate:+.3e}")
    if ups:
        print(f"positive-advantage episodes ({len(ups)}): mean dlogp {statistics.mean(ups):+.4f}")
    if downs:
        print(f"negative-advantage episodes ({len(downs)}): mean dlogp {statistics.mean(downs):+.4f}")
    print(f"episodes moved the way their advantage says: {agree} / {signed}")
    verdict = surrogate > 0
    print("verdict:", "the update raised the surrogate" if verdict else "the update LOWERED the surrogate")
    return 0 if verdict else 1


if __name__ == "__main__":
    raise SystemExit(main())

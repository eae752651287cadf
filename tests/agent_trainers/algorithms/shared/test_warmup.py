"""``rl.warmup_steps``: the learning rate rises linearly over the first RL steps, then decays linearly to 0, in
the TRL algorithms (TRL's scheduler from our GRPOConfig) and in our PPO (its own scheduler)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agent_trainers.algorithms import GRPOSettings, RLConfig
from agent_trainers.algorithms.trl_adapter.trl_args import grpo_args
from agent_trainers.rollout import RolloutConfig


def _lrs(optimizer, scheduler, n: int, group: int = 0) -> list[float]:
    out = []
    for _ in range(n):
        out.append(optimizer.param_groups[group]["lr"])
        optimizer.step()
        scheduler.step()
    return out


def test_trl_algorithms_warm_up_then_decay(tmp_path):
    import torch
    from transformers import get_scheduler

    args = grpo_args(
        RLConfig(steps=10, warmup_steps=3, learning_rate=1e-3),
        GRPOSettings(),
        RolloutConfig(),
        output_dir=str(tmp_path),
    )
    assert args.warmup_steps == 3 and args.lr_scheduler_type == "linear" and args.max_steps == 10
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer, args.get_warmup_steps(10), 10)  # as Trainer does
    # hand-computed: step s < 3 -> s/3 of the peak; then (10 - s) / 7
    want = [0, 1 / 3, 2 / 3, 1, 6 / 7, 5 / 7, 4 / 7, 3 / 7, 2 / 7, 1 / 7]
    assert _lrs(optimizer, scheduler, 10) == pytest.approx([1e-3 * w for w in want])
    assert (
        grpo_args(RLConfig(steps=10), GRPOSettings(), RolloutConfig(), output_dir=str(tmp_path)).warmup_steps == 0
    )  # default


def test_ppo_warms_up_over_its_optimizer_steps(tmp_path, one_thread):
    from tests.agent_trainers.algorithms.ppo.test_ppo import make_trainer

    trainer = make_trainer(tmp_path, steps=4, warmup_steps=2, update_epochs=1, num_minibatches=2)
    # 4 RL steps x 2 minibatches = 8 optimizer steps, the first 2 RL steps = 4 of them warming up
    want = [0, 0.25, 0.5, 0.75, 1, 0.75, 0.5, 0.25]
    assert _lrs(trainer.optimizer, trainer.scheduler, 8) == pytest.approx([1e-3 * w for w in want])


def test_a_warm_up_as_long_as_the_run_is_refused():
    with pytest.raises(ValidationError, match=r"rl.warmup_steps \(4\) must be below rl.steps \(4\)"):
        RLConfig(steps=4, warmup_steps=4)
    with pytest.raises(ValidationError, match="warmup_steps"):
        RLConfig(steps=4, warmup_steps=-1)

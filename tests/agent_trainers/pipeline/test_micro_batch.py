"""``grpo.micro_batch``: how many rollouts a forward/backward pass takes changes the compute, not the step."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from transformers import TrainerCallback

from agent_trainers.pipeline.config import config_from_dict
from agent_trainers.pipeline.train import run_training
from tests.conftest import VARIED_REWARD_RUBRIC, LookupEnv

ENV_ID = "Test/MicroBatchLookup-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=LookupEnv, max_episode_steps=3, kwargs={"rubric": VARIED_REWARD_RUBRIC})


class BatchArgs(TrainerCallback):
    """Records the batch fields the RL trainer was built with."""

    def __init__(self):
        self.seen = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.seen = (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.steps_per_generation)


def run(out, micro_batch, checkpointing=False):
    config = config_from_dict({
        "seed": 3, "output_dir": str(out), "device": "cpu", "model": {"name": "tiny-random"},
        "env": {"id": ENV_ID, "train_kwargs": {}, "eval_kwargs": {}},
        "rollout": {"max_new_tokens_per_turn": 6, "max_total_tokens": 1024, "temperature": 1.0},
        "sft": {"enabled": False},
        "rl": {"steps": 1, "num_generations": 2, "prompts_per_step": 2, "learning_rate": 1e-2, "save_steps": 1},
        "grpo": {"micro_batch": micro_batch, "gradient_checkpointing": checkpointing},
        "eval": {"tasks": 1, "every": 0, "before": False},
    })  # fmt: skip
    seen = BatchArgs()
    run_training(config, callbacks=[seen])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return seen.seen, next(r for r in rows if r["stage"] == "rl" and "loss" in r)


@pytest.mark.slow  # ~20 s; CI runs it after the default suite
def test_micro_batches_of_one_and_of_a_group_give_the_same_step(tmp_path, one_thread):
    seen_1, step_1 = run(tmp_path / "one", 1)
    seen_2, step_2 = run(tmp_path / "group", 2)
    assert seen_1 == (1, 4, 4) and seen_2 == (2, 2, 2)  # 4 rollouts a step: 4 passes of 1, or 2 of a group each
    assert step_1["reward"] == step_2["reward"]  # the same rollouts
    assert step_1["grad_norm"] > 0
    assert step_2["grad_norm"] == pytest.approx(step_1["grad_norm"], rel=1e-4)
    assert step_2["loss"] == pytest.approx(step_1["loss"], abs=1e-5)


@pytest.mark.slow  # ~20 s; CI runs it after the default suite
def test_gradient_checkpointing_gives_the_same_step_with_the_shared_prompt(tmp_path, one_thread):
    _, plain = run(tmp_path / "plain", 2)
    _, checkpointed = run(tmp_path / "checkpointed", 2, checkpointing=True)
    assert checkpointed["reward"] == plain["reward"] and plain["grad_norm"] > 0
    assert checkpointed["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-4)
    assert checkpointed["loss"] == pytest.approx(plain["loss"], abs=1e-5)


class Checkpointing(TrainerCallback):
    """Records whether the RL trainer's model recomputes activations."""

    def __init__(self):
        self.seen = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.seen = (args.gradient_checkpointing, model.is_gradient_checkpointing)


@pytest.mark.slow  # ~18 s each; CI runs it after the default suite
@pytest.mark.parametrize("on", [False, True])
def test_rl_sets_gradient_checkpointing_whatever_sft_left(tmp_path, one_thread, on):
    config = config_from_dict({
        "seed": 3, "output_dir": str(tmp_path), "device": "cpu", "model": {"name": "tiny-random"},
        "env": {"id": ENV_ID, "train_kwargs": {}, "eval_kwargs": {}},
        "rollout": {"max_new_tokens_per_turn": 6, "max_total_tokens": 1024},
        "sft": {"episodes": 2, "batch_size": 2, "gradient_checkpointing": True},  # SFT leaves it on
        "rl": {"steps": 1, "num_generations": 2, "prompts_per_step": 1},
        "grpo": {"gradient_checkpointing": on},
        "eval": {"tasks": 1, "every": 0, "before": False},
    })  # fmt: skip
    seen = Checkpointing()
    run_training(config, callbacks=[seen])
    assert seen.seen == (on, on)

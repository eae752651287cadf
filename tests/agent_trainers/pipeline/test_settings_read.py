"""No RL setting is ignored without a word: each trainer declares what it reads, the rest is refused at validation."""

from __future__ import annotations

import pytest

from agent_trainers.algorithms import Algorithm, PPOConfig, RLConfig
from agent_trainers.errors import one_line
from agent_trainers.pipeline.config import TRAINER_READS, config_from_dict
from agent_trainers.pipeline.stages import RL_TRAINERS

TRL_ALGORITHMS = ["grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gigpo"]


def settings(algorithm: str, rl: dict | None = None, **top) -> dict:
    return {"algorithm": algorithm, "rl": {"num_generations": 2, "prompts_per_step": 2, **(rl or {})}, **top}


def refusal(data: dict) -> str:
    with pytest.raises(ValueError) as info:
        config_from_dict(data)
    message = one_line(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("key", "value", "hint"),
    [
        ("micro_batch", 2, "ppo has ppo.micro_batch_size"),
        ("gradient_checkpointing", True, "does not checkpoint"),
        ("loss_type", "bnpo", "TRL loss aggregation"),
        ("scale_rewards", "batch", "ppo.norm_adv"),
        ("vllm", "colocate", "trained model itself"),
        ("vllm_server_url", "http://10.0.0.2:8000", "trained model itself"),
        ("advantage", "outcome", "GAE over agent tokens"),
        ("gamma", 0.9, "ppo.gamma"),
    ],
)
def test_ppo_refuses_the_rl_settings_it_does_not_read(key, value, hint):
    message = refusal(settings("ppo", {key: value}))
    assert f"rl.{key} is not read by ppo (" in message and hint in message
    assert "leave it at its default" in message and f"(got {value!r})" in message


def test_ppo_writes_tensorboard_but_refuses_wandb():
    assert config_from_dict(settings("ppo", report_to="tensorboard")).report_to == "tensorboard"
    assert "ppo writes its curves to metrics.jsonl and TensorBoard, not wandb" in refusal(
        settings("ppo", report_to="wandb")
    )


@pytest.mark.parametrize("algorithm", TRL_ALGORITHMS)
def test_the_trl_algorithms_refuse_the_advantage_mask(algorithm):
    message = refusal(settings(algorithm, {"advantage_mask": False}))
    assert f"rl.advantage_mask is not read by {algorithm} (it switches GAE, which only ppo runs" in message


@pytest.mark.parametrize("algorithm", ["rloo", "reinforce_pp", "reinforce_pp_baseline"])
def test_only_grpo_and_gigpo_read_scale_rewards(algorithm):
    message = refusal(settings(algorithm, {"scale_rewards": "none"}))
    assert f"rl.scale_rewards is not read by {algorithm} (only grpo and gigpo scale by a standard deviation)" in message
    for reader in ("grpo", "gigpo"):
        assert config_from_dict(settings(reader, {"scale_rewards": "none"})).rl.scale_rewards == "none"


def test_gigpo_loads_with_its_settings():
    rl = {"gigpo_step_weight": 0.5, "gigpo_anchor": "history", "scale_rewards": "batch", "gamma": 0.9}
    config = config_from_dict(settings("gigpo", rl | {"dynamic_sampling": True, "advantage": "outcome"}))
    assert (config.rl.gigpo_step_weight, config.rl.gigpo_anchor, config.rl.dynamic_sampling) == (0.5, "history", True)
    assert "rl.gigpo_step_weight" in refusal(settings("gigpo", {"gigpo_step_weight": -1.0}))  # omega >= 0
    assert "gigpo_anchor" in refusal(settings("gigpo", {"gigpo_anchor": "prompt"}))


@pytest.mark.parametrize("algorithm", ["grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "ppo"])
@pytest.mark.parametrize(
    ("key", "value", "shown"), [("gigpo_step_weight", 0.5, "1.0"), ("gigpo_anchor", "history", "'observation'")]
)
def test_the_gigpo_settings_are_refused_under_every_other_algorithm(algorithm, key, value, shown):
    assert refusal(settings(algorithm, {key: value})) == (
        f"rl.{key} is not read by {algorithm} (only gigpo has a step advantage over anchor states); "
        f"leave it at its default {shown} (got {value!r})"
    )


def test_a_setting_written_at_its_default_is_accepted():
    config = config_from_dict(settings("ppo", {"micro_batch": 1, "loss_type": "dapo", "advantage": "turn"}))
    assert config.rl.micro_batch == 1
    for algorithm in TRL_ALGORITHMS:  # what every TRL algorithm reads
        data = settings(algorithm, {"micro_batch": 2, "gradient_checkpointing": True, "loss_type": "bnpo"})
        config_from_dict(data | {"report_to": "tensorboard"})


def test_nothing_is_refused_when_the_rl_stage_does_not_run():
    config = config_from_dict(settings("ppo", {"enabled": False, "micro_batch": 2}, report_to="tensorboard"))
    assert not config.rl.enabled  # the SFT stage reads report_to


def test_the_ppo_section_is_left_alone_under_the_other_algorithms():
    """It is named after its only reader: one config serves every algorithm (configs/calculator_smollm2.yaml)."""
    config = config_from_dict(settings("grpo") | {"ppo": {"update_epochs": 1, "num_minibatches": 1}})
    assert config.ppo.update_epochs == 1


def test_every_algorithm_has_a_trainer_and_declares_real_settings():
    assert set(TRAINER_READS) == set(RL_TRAINERS) == set(Algorithm)
    known = {f"rl.{name}" for name in RLConfig.model_fields} | {"report_to"}
    for algorithm, reads in TRAINER_READS.items():
        assert reads.settings <= known and set(reads.instead) <= known, algorithm
        assert "rl.steps" in reads.settings and not reads.settings & set(reads.instead), algorithm
    assert TRAINER_READS[Algorithm.PPO].settings | set(TRAINER_READS[Algorithm.PPO].instead) == known - {"rl.enabled"}
    assert {f.removeprefix("ppo.") for f in TRAINER_READS[Algorithm.PPO].settings if f.startswith("ppo.")} <= set(
        PPOConfig.__pydantic_fields__
    )

"""One section per algorithm: a setting the chosen algorithm does not read has no place to go, an old ``rl:`` key
names its new place, and a recipe changing algorithm carries over what both read."""

from __future__ import annotations

import pytest

from agent_trainers.algorithms import Algorithm, GiGPOSettings, GRPOSettings, PPOConfig, RLConfig, RLOOSettings
from agent_trainers.algorithms.shared.sections import ESTIMATOR_SECTIONS, carried_over
from agent_trainers.errors import one_line
from agent_trainers.pipeline.config import ALGORITHM_SECTIONS, config_from_dict, load_config
from agent_trainers.pipeline.stages import RL_TRAINERS

TRL_ALGORITHMS = ["grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gigpo"]


def settings(algorithm: str, section: dict | None = None, rl: dict | None = None, **top) -> dict:
    data = {"algorithm": algorithm, "rl": {"num_generations": 2, "prompts_per_step": 2, **(rl or {})}, **top}
    return data | ({algorithm: section} if section is not None else {})


def refusal(data: dict) -> str:
    with pytest.raises(ValueError) as info:
        config_from_dict(data)
    message = one_line(info.value)
    assert "\n" not in message
    return message


def test_every_algorithm_has_a_section_and_a_trainer():
    assert set(ALGORITHM_SECTIONS) == set(RL_TRAINERS) == set(Algorithm)
    assert ALGORITHM_SECTIONS[Algorithm.PPO] is PPOConfig and set(ESTIMATOR_SECTIONS) == set(Algorithm) - {"ppo"}
    for algorithm in Algorithm:  # the chosen algorithm's section is filled with its defaults, the others absent
        config = config_from_dict(settings(algorithm.value))
        assert type(config.algorithm_settings) is ALGORITHM_SECTIONS[algorithm]
        assert set(config.to_dict()) & {a.value for a in Algorithm} == {algorithm.value}


@pytest.mark.parametrize(
    ("algorithm", "key", "hint"),
    [
        ("ppo", "micro_batch", "did you mean ppo.micro_batch_size?"),
        ("ppo", "loss_type", "not a setting (the ppo settings:"),
        ("rloo", "scale_rewards", "not a setting (the rloo settings:"),
        ("grpo", "step_weight", "not a setting (the grpo settings:"),
        ("grpo", "advantage_mask", "did you mean grpo.advantage?"),
        ("reinforce_pp", "dynamic_sampling", "not a setting (the reinforce_pp settings:"),
    ],
)
def test_a_setting_the_algorithm_does_not_read_is_an_unknown_key(algorithm, key, hint):
    message = refusal(settings(algorithm, {key: 1}))
    assert message.startswith(f"{algorithm}.{key}: ") and hint in message


def test_another_algorithms_section_is_refused_in_one_line():
    data = settings("rloo", {"advantage": "turn"}) | {"grpo": {"scale_rewards": "batch"}}
    assert refusal(data) == (
        "grpo: the section of algorithm grpo, but the algorithm is rloo (set algorithm: grpo, or name the section "
        "rloo:)"
    )
    assert refusal(settings("grpo") | {"ppo": {"update_epochs": 1}}).startswith("ppo: the section of algorithm ppo")


@pytest.mark.parametrize(
    ("key", "algorithm", "new"),
    [
        ("micro_batch", "grpo", "grpo.micro_batch (ppo: ppo.micro_batch_size)"),
        ("scale_rewards", "rloo", "grpo.scale_rewards or gigpo.scale_rewards"),
        ("gigpo_anchor", "gigpo", "gigpo.anchor"),
        ("advantage_mask", "ppo", "ppo.advantage_mask"),
        ("max_staleness", "grpo", "rl.async_rollouts.max_staleness"),
        ("dynamic_sampling", "gigpo", "gigpo.dynamic_sampling (grpo, rloo, reinforce_pp_baseline, gigpo)"),
    ],
)
def test_an_old_rl_key_names_its_new_place(key, algorithm, new):
    assert refusal(settings(algorithm, rl={key: 1})) == f"rl.{key} moved: it is now {new}"
    with pytest.raises(ValueError, match=f"rl.{key} moved"):  # the rl: section alone says it too
        RLConfig(**{key: 1})


def test_the_sections_validate_their_values():
    assert "gigpo.step_weight" in refusal(settings("gigpo", {"step_weight": -1.0}))  # omega >= 0
    assert "gigpo.anchor" in refusal(settings("gigpo", {"anchor": "prompt"}))
    assert "grpo.micro_batch must divide" in refusal(settings("grpo", {"micro_batch": 3}))
    assert "with grpo.vllm the generation is vLLM's" in refusal(
        settings("grpo", {"vllm": "colocate"}, rl={"async_rollouts": True})
    )
    assert refusal(settings("grpo", rl={"async_rollouts": {"max_staleness": 2}})) == (
        "rl.async_rollouts: rl.async_rollouts.max_staleness is read only with rl.async_rollouts.enabled: true (got 2)"
    )
    assert config_from_dict(settings("grpo", rl={"async_rollouts": True})).rl.async_rollouts.enabled


def test_ppo_writes_tensorboard_but_refuses_wandb():
    assert config_from_dict(settings("ppo", report_to="tensorboard")).report_to == "tensorboard"
    assert "ppo writes its curves to metrics.jsonl and TensorBoard, not wandb" in refusal(
        settings("ppo", report_to="wandb")
    )


def test_carried_over_follows_the_family_not_the_field_names():
    assert carried_over(GRPOSettings, RLOOSettings) == set(RLOOSettings.model_fields)
    assert "scale_rewards" not in carried_over(GRPOSettings, RLOOSettings)
    assert carried_over(GRPOSettings, GiGPOSettings) == set(GRPOSettings.model_fields)
    assert carried_over(GRPOSettings, PPOConfig) == set()  # ppo.gamma is per token, grpo.gamma per turn


def test_a_recipe_changes_algorithm_with_what_both_read():
    grpo = config_from_dict(settings("grpo", {"micro_batch": 4, "scale_rewards": "batch", "gamma": 0.9}))
    rloo, left = grpo.with_algorithm("rloo")
    assert (rloo.algorithm, rloo.algorithm_settings.micro_batch, rloo.algorithm_settings.gamma) == ("rloo", 4, 0.9)
    assert left == ["grpo.scale_rewards"] and rloo.grpo is None
    ppo, left = grpo.with_algorithm("ppo")
    assert ppo.algorithm_settings == PPOConfig() and left == ["grpo.micro_batch", "grpo.gamma", "grpo.scale_rewards"]
    assert grpo.with_algorithm("gigpo")[0].algorithm_settings.scale_rewards == "batch"


def test_set_algorithm_on_a_recipe_carries_its_section_over(capsys):
    config = load_config("learn_main", {"algorithm": "rloo", "rloo.micro_batch": 16})
    assert config.algorithm == "rloo" and config.grpo is None
    section = config.algorithm_settings
    assert (section.micro_batch, section.advantage, section.dynamic_sampling) == (16, "outcome", True)
    assert capsys.readouterr().err.strip() == "[config] algorithm rloo does not read grpo.scale_rewards: left behind"
    assert load_config("tiny", {"algorithm": "ppo"}).algorithm_settings == PPOConfig()

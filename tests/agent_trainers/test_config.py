from pathlib import Path

import pytest

from agent_trainers.advantages import AdvantageMode
from agent_trainers.config import LossType, TrainConfig, config_from_dict, load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("name", ["demo.yaml", "hotpotqa_grpo.yaml", "hotpotqa_shared.yaml"])
def test_shipped_configs_load(name):
    config = load_config(CONFIGS / name)
    assert isinstance(config.grpo.advantage, AdvantageMode)
    assert isinstance(config.grpo.loss_type, LossType)


def test_demo_yaml_matches_demo_settings():
    from agent_trainers.demo import DEMO_SETTINGS

    assert load_config(CONFIGS / "demo.yaml").to_dict() == config_from_dict(DEMO_SETTINGS).to_dict()


def test_toml_and_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('seed = 3\n[grpo]\nsteps = 4\nadvantage = "outcome"\n[eval]\nevery = 2\n')
    config = load_config(path, {"grpo.num_generations": 3})
    assert (config.seed, config.grpo.steps, config.grpo.num_generations) == (3, 4, 3)
    assert config.grpo.advantage is AdvantageMode.OUTCOME


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"grpo": {"stepz": 1}}, r"unknown key\(s\) \['stepz'\] in grpo"),
        ({"grpo": {"advantage": "token"}}, r"grpo.advantage must be one of \['outcome', 'turn'\]"),
        ({"grpo": {"num_generations": 1}}, r"num_generations must be >= 2 .*got 1"),
        ({"grpo": {"steps": 6}, "eval": {"every": 4}}, r"grpo.steps must be divisible by eval.every \(got 6 and 4\)"),
        ({"grpo": {"max_new_tokens_per_turn": 64, "max_total_tokens": 32}}, "max_total_tokens must exceed"),
        ({"sft": {"enabled": False}, "grpo": {"enabled": False}}, "enable at least one stage"),
        ({"model": "smollm2"}, "model must be a mapping"),
    ],
)
def test_validation_messages_name_the_problem(data, match):
    with pytest.raises(ValueError, match=match):
        config_from_dict(data)


def test_bad_suffix(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("{}")
    with pytest.raises(ValueError, match=r"must end in \.yaml"):
        load_config(path)


def test_defaults_are_valid_and_round_trip():
    config = TrainConfig()
    assert config_from_dict(config.to_dict()) == config

"""`agent-r1`: envs, train (SFT + GRPO, metrics, plots, checkpoints, --resume), errors."""

import json

import gymnasium as gym
import pytest
import yaml

from agent_trainers.cli import main
from tests.conftest import LookupEnv

ENV_ID = "Test/CLILookup-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=LookupEnv, max_episode_steps=3)


def _config(tmp_path, steps):
    data = {
        "seed": 0,
        "output_dir": str(tmp_path / "run"),
        "model": {"name": "tiny-random"},
        "env": {"id": ENV_ID, "train_kwargs": {}, "eval_kwargs": {}},
        "sft": {"episodes": 4, "epochs": 1.0, "batch_size": 4, "learning_rate": 1e-3},
        "grpo": {
            "steps": steps,
            "num_generations": 2,
            "prompts_per_step": 1,
            "max_new_tokens_per_turn": 8,
            "max_total_tokens": 1024,
            "save_steps": 1,
        },
        "eval": {"tasks": 1, "every": 1},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _records(tmp_path):
    return [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]


def test_train_writes_metrics_plots_checkpoints_and_resumes(tmp_path, capsys):
    assert main(["train", "--config", str(_config(tmp_path, 2))]) == 0
    run = tmp_path / "run"
    assert (run / "sft" / "DONE").is_file() and (run / "final" / "config.json").is_file()
    assert (run / "grpo" / "checkpoint-2").is_dir() and (run / "plots" / "eval.png").stat().st_size > 0
    phases = [r["phase"] for r in _records(tmp_path) if r["stage"] == "eval"]
    assert phases == ["before", "after_sft", "grpo_step_1", "final"]
    assert {r["step"] for r in _records(tmp_path) if r["stage"] == "grpo" and "reward" in r} == {1, 2}
    assert "after_sft" in capsys.readouterr().out
    # resume with one more step: SFT is reloaded, GRPO continues from checkpoint-2
    assert main(["train", "--config", str(_config(tmp_path, 3)), "--resume"]) == 0
    records = _records(tmp_path)
    assert [r["phase"] for r in records if r["stage"] == "eval"][4:] == ["final"]
    assert {r["step"] for r in records if r["stage"] == "grpo" and "reward" in r} == {1, 2, 3}
    assert (run / "grpo" / "checkpoint-3").is_dir()
    # the trained model evaluates from its folder
    capsys.readouterr()
    assert main(["eval", "--env", ENV_ID, "--model", str(run / "final"), "--tasks", "1", "--split", ""]) == 0
    assert "episodes" in capsys.readouterr().out


def test_rollout_dispatches_to_the_rollout_engine_cli(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["rollout", "--help"])
    assert exit_info.value.code == 0
    assert "usage" in capsys.readouterr().out.lower()


def test_envs_lists_registry(capsys):
    assert main(["envs"]) == 0
    import agent_gym

    out = capsys.readouterr().out
    for env_id, _ in agent_gym.list_envs():
        assert env_id in out


def test_bad_config_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("grpo: {num_generations: 1}\n")
    assert main(["train", "--config", str(path)]) == 2
    assert "num_generations must be >= 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--config", str(path), "--set", "novalue"])

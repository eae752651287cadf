"""The ``env:`` section: split defaults that fit the env, ``module:id`` ids, and a bad section named before a run.

A user env from the CLI used to need the ``module:id`` form *and* emptied ``train_kwargs``/``eval_kwargs``;
otherwise the run died 28 s in with a 33-line traceback (``unexpected keyword argument 'split'``).
"""

from __future__ import annotations

import sys

import pytest
import yaml

from agent_trainers.pipeline.cli import main
from agent_trainers.pipeline.config import config_from_dict
from agent_trainers.pipeline.env_settings import check_env_settings, default_kwargs, import_env_module

MODULE = """
from tests.conftest import LookupEnv
from agent_gym import register_env

register_env("Test/FromCwd-v0", LookupEnv, max_episode_steps=2)
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """``cwd_envs.py`` in the working directory, which is not on ``sys.path``."""
    (tmp_path / "cwd_envs.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_envs", raising=False)
    return "cwd_envs:Test/FromCwd-v0"


@pytest.mark.parametrize(
    ("env_id", "train", "evaluation"),
    [
        ("AgentR1/HotpotQA-v0", {"split": "train"}, {"split": "test"}),
        ("AgentR1/MuSiQue-v0", {"split": "train"}, {"split": "test"}),
        ("AgentR1/Calculator-v0", {}, {}),
        ("AgentR1/SQLite-v0", {}, {}),
        ("AgentR1/Bandit-v0", {}, {}),
    ],
)
def test_left_out_kwargs_default_to_a_split_only_where_the_env_takes_one(env_id, train, evaluation):
    env = config_from_dict({"env": {"id": env_id}}).env
    assert (env.train_kwargs, env.eval_kwargs) == (train, evaluation)
    assert config_from_dict({}).env.train_kwargs == {"split": "train"}  # the default id is HotpotQA
    given = config_from_dict({"env": {"id": env_id, "eval_kwargs": {"task_seed": 1}}}).env
    assert (given.train_kwargs, given.eval_kwargs) == (train, {"task_seed": 1})  # a given section is kept


def test_a_module_id_imports_its_module_from_the_working_directory(user_module, tmp_path):
    env = config_from_dict({"env": {"id": user_module}}).env
    assert (env.train_kwargs, env.eval_kwargs) == ({}, {})  # LookupEnv takes no split
    assert "cwd_envs" in sys.modules and sys.path[-1] == str(tmp_path)  # appended: installed modules win
    assert import_env_module("AgentR1/Bandit-v0") == "AgentR1/Bandit-v0"
    with pytest.raises(ModuleNotFoundError):
        import_env_module("no_such_module_here:Test/X-v0")


def test_an_unresolvable_id_defaults_to_nothing_and_the_check_names_it():
    assert default_kwargs("AgentR1/Bandt-v0", "train_kwargs") == {}
    with pytest.raises(ValueError) as caught:
        check_env_settings("AgentR1/Bandt-v0", {})
    assert str(caught.value) == (
        "env.id 'AgentR1/Bandt-v0': Environment `Bandt` doesn't exist in namespace AgentR1. Did you mean: `Bandit`?"
    )
    with pytest.raises(ValueError, match=r"^env.id 'no_such_module_here:Test/X-v0': No module named"):
        check_env_settings("no_such_module_here:Test/X-v0", {})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"split": "train"},
            "env.train_kwargs: AgentR1/Bandit-v0 (agent_gym.envs.bandit:BanditEnv) takes no argument 'split': "
            "it has no splits; leave env.train_kwargs out, or set it to {}",
        ),
        (
            {"winrate": 0.7},
            "env.train_kwargs: AgentR1/Bandit-v0 (agent_gym.envs.bandit:BanditEnv) takes no argument 'winrate'; "
            "did you mean 'win_rate'?",
        ),
        ({"win_rate": 7}, "env.train_kwargs {'win_rate': 7}: ValueError: win_rate must lie in [0.5, 1] (got 7)"),
    ],
)
def test_a_bad_section_is_one_line_naming_the_keyword(kwargs, message):
    check_env_settings("AgentR1/Bandit-v0", {"train_kwargs": {"win_rate": 0.7, "max_episode_steps": 2}})
    with pytest.raises(ValueError) as caught:
        check_env_settings("AgentR1/Bandit-v0", {"train_kwargs": kwargs, "eval_kwargs": {}})
    assert str(caught.value) == message


def test_the_cli_names_a_split_the_user_env_does_not_take_before_writing_anything(user_module, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    out = tmp_path / "run"
    config.write_text(yaml.safe_dump({"output_dir": str(out), "env": {"train_kwargs": {"split": "train"}}}))
    assert main(["train", "--config", str(config), "--set", f"env.id={user_module}"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"agent-r1 train: error: env.train_kwargs: {user_module} (tests.conftest:LookupEnv) takes no argument "
        "'split': it has no splits; leave env.train_kwargs out, or set it to {}\n"
    )
    assert not out.exists()  # nothing written, no model loaded


def test_configs_tiny_yaml_serves_any_env_id(user_module):
    from pathlib import Path

    from agent_trainers.pipeline.config import load_config

    tiny = Path(__file__).resolve().parents[3] / "configs" / "tiny.yaml"
    hotpot = load_config(tiny).env
    assert (hotpot.id, hotpot.train_kwargs, hotpot.eval_kwargs) == (
        "AgentR1/HotpotQA-v0",
        {"split": "train"},
        {"split": "test"},
    )
    mine = load_config(tiny, {"env.id": user_module}).env
    assert (mine.train_kwargs, mine.eval_kwargs, mine.train_tasks) == ({}, {}, 8)

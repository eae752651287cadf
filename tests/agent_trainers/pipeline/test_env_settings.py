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
from agent_trainers.pipeline.env_settings import check_env_settings, default_kwargs, import_env_module, split_tasks

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


@pytest.mark.parametrize(
    ("eval_kwargs", "first", "count", "limit", "train", "shared"),
    [
        ({}, 0, 1, None, [1, 2, 3], True),  # one task list: the evaluation's task is no training task
        ({}, 1, 2, None, [0, 3], True),
        ({}, 1, 2, 1, [0], True),  # env.train_tasks counts the tasks left to train on
        ({}, 3, 5, None, [0, 1, 2], True),  # evaluation runs past the end: it holds task 3 aside
        ({"max_result_length": 100}, 0, 1, None, [0, 1, 2, 3], False),  # another env: its own task list
        ({"max_result_length": 100}, 0, 1, 2, [0, 1], False),
    ],
)
def test_one_task_list_holds_the_evaluation_tasks_out_of_training(user_module, eval_kwargs, first, count, limit,
                                                                  train, shared):  # fmt: skip
    """LookupEnv poses 4 tasks and has no splits: with equal kwargs, evaluation and training draw from one list."""
    split = split_tasks(user_module, {}, eval_kwargs, train_tasks=limit, eval_first=first, eval_tasks=count)
    assert (split.train, split.eval, split.shared, split.total) == (train, range(first, first + count), shared, 4)


def test_the_shared_task_list_is_said_in_one_line_and_refused_when_nothing_is_left_to_train_on(user_module):
    split = split_tasks(user_module, {}, {}, train_tasks=None, eval_first=1, eval_tasks=2)
    assert split.describe() == (
        "training and evaluation pose one task list (env.train_kwargs == env.eval_kwargs): evaluation holds tasks "
        "1-2 aside, training uses tasks 0, 3 (eval.first_task and eval.tasks choose the held-aside tasks)"
    )
    with pytest.raises(ValueError) as caught:
        split_tasks(user_module, {}, {}, train_tasks=None, eval_first=0, eval_tasks=4)
    assert str(caught.value) == (
        "eval.tasks: training and evaluation pose one task list (env.train_kwargs == env.eval_kwargs) of 4 tasks, "
        "and evaluation holds tasks 0-3 aside: none is left to train on; lower eval.tasks, or give evaluation tasks "
        "of its own (env.eval_kwargs)"
    )


def test_a_run_on_an_env_without_splits_never_trains_on_its_evaluation_tasks(user_module):
    """With no ``split`` in a user's env, SFT and RL took the first tasks of the one list that evaluation took its
    tasks from: the guide's own config evaluated on trained tasks, silently (issue 41.4)."""
    from agent_trainers.pipeline.stages import train_tasks

    assert train_tasks(config_from_dict({"env": {"id": user_module}, "eval": {"tasks": 2}})) == [2, 3]
    assert train_tasks(config_from_dict({"env": {"id": user_module}, "eval": {"tasks": 1, "first_task": 2}})) == [
        0,
        1,
        3,
    ]
    given = {"id": user_module, "train_kwargs": {}, "eval_kwargs": {"max_result_length": 100}}  # its own env
    assert train_tasks(config_from_dict({"env": given, "eval": {"tasks": 2}})) == [0, 1, 2, 3]


def test_an_evaluation_leaving_no_task_to_train_on_is_refused_before_anything_is_written(user_module, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"output_dir": str(tmp_path / "run"), "eval": {"tasks": 4}}))
    assert main(["train", "--config", str(config), "--set", f"env.id={user_module}"]) == 2
    assert capsys.readouterr().err.startswith("agent-r1 train: error: eval.tasks: training and evaluation pose one")
    assert not (tmp_path / "run").exists()

"""The rollout CLI: the project's loader and model names, RolloutConfig's options, checked JSONL, one-line errors."""

from __future__ import annotations

import pytest

from agent_trainers.rollout import load_jsonl
from agent_trainers.rollout.cli import run_rollout_cli
from tests.agent_trainers.conftest import LOOKUP_ID
from tests.conftest import run_agent_r1

UNITS_ENV = """# units_env.py: a user's module in the folder they work in
from agent_gym import register_env

register_env("Newcomer/Units-v0", "agent_gym.envs.bandit:BanditEnv", max_episode_steps=2)
"""


def test_plays_checks_and_saves_with_the_shared_loader(tmp_path, capsys, one_thread):
    out = tmp_path / "r.jsonl"
    args = ["--env", LOOKUP_ID, "--model", "tiny-random", "--device", "cpu", "--episodes", "4", "--group-size", "2"]
    args += ["--max-new-tokens-per-turn", "6", "--max-turns", "2", "--temperature", "0.7", "--out", str(out)]
    assert run_rollout_cli(args) == 0
    trajs = load_jsonl(out)
    assert [t.task_index for t in trajs] == [0, 0, 1, 1] and all(1 <= len(t.turns) <= 2 for t in trajs)
    assert all(t.turns[0].end - t.turns[0].start <= 6 for t in trajs)
    captured = capsys.readouterr()
    printed = captured.out
    assert printed.count("token-exact") == 4 and "0 failed the check" in printed and "model tokens/s" in printed
    assert "8/8" in captured.err and "model tok/s, 0 live" in captured.err  # the bar: 4 episodes x 2 turns


def test_bad_options_are_one_line_errors(tmp_path, capsys):
    base = ["--env", LOOKUP_ID, "--out", str(tmp_path / "r.jsonl")]
    assert run_rollout_cli([*base, "--temperature", "-1"]) == 2
    assert "temperature must be >= 0 (got -1.0)" in capsys.readouterr().err
    assert run_rollout_cli([*base, "--max-turns", "two"]) == 2
    assert "max_turns: Input should be a valid integer" in capsys.readouterr().err
    assert run_rollout_cli([*base, "--model", "tiny", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'tiny'" in err and "'tiny-random'" in err and err.count("\n") == 1
    assert run_rollout_cli([*base, "--episodes", "3", "--group-size", "2"]) == 2
    assert "positive multiple of --group-size" in capsys.readouterr().err


@pytest.mark.slow  # ~20 s (three commands in subprocesses); CI runs it after the default suite
def test_a_module_id_is_imported_from_the_working_folder_as_train_and_eval_do(tmp_path):
    """``agent-r1 rollout --env units_env:Newcomer/Units-v0`` beside units_env.py printed "No module named ''"
    where ``train`` and ``eval`` take the same id (issue 41.2); a misspelt module is named in one line."""
    (tmp_path / "units_env.py").write_text(UNITS_ENV)
    args = ["--model", "tiny-random", "--device", "cpu", "--episodes", "1", "--max-new-tokens-per-turn", "4"]
    done = run_agent_r1("rollout", "--env", "units_env:Newcomer/Units-v0", *args, "--out", "r.jsonl", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "token-exact" in done.stdout and [t.task_index for t in load_jsonl(tmp_path / "r.jsonl")] == [0]
    typo = run_agent_r1("rollout", "--env", "unit_env:Newcomer/Units-v0", *args, cwd=tmp_path)
    assert (typo.returncode, typo.stderr) == (
        2,
        "agent-r1 rollout: error: --env 'unit_env:Newcomer/Units-v0': No module named 'unit_env'\n",
    )
    unknown = run_agent_r1("rollout", "--env", "Newcomer/Units-v0", *args, cwd=tmp_path)  # not registered: no module
    assert unknown.returncode == 2 and unknown.stderr.startswith("agent-r1 rollout: error: --env 'Newcomer/Units-v0': ")
    assert unknown.stderr.count("\n") == 1 and not (tmp_path / "runs").exists()

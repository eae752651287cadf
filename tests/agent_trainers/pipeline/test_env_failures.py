"""A user's env that fails stops `agent-r1 train` with one line (issue 40 item 8): an env whose step raises on most
episodes (before: exit 0 after training on 100% env_error episodes at reward 0), or a reward that is not finite
(before: a traceback, "'float' object has no attribute 'numerator'"); synchronous or with the generation worker."""

from __future__ import annotations

import pytest
import yaml

from agent_trainers.pipeline.cli import main
from tests.agent_trainers.rollout.test_training import AlwaysFailing, NaNBonus  # noqa: F401  (registers them)


def write_config(tmp_path, env_id, **rl):
    data = {
        "seed": 0, "threads": 1, "output_dir": str(tmp_path / "run"), "device": "cpu",
        "model": {"name": "tiny-random"}, "env": {"id": env_id, "train_kwargs": {}, "eval_kwargs": {}},
        "rollout": {"max_turns": 2, "max_new_tokens_per_turn": 8, "max_total_tokens": 1024},
        "sft": {"enabled": False}, "rl": {"steps": 2, "num_generations": 2, "prompts_per_step": 1, **rl},
        "eval": {"tasks": 1, "every": 0, "before": False},
    }  # fmt: skip
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.filterwarnings("ignore:.*The reward is a NaN value")
@pytest.mark.parametrize(
    ("env_id", "line"),
    [
        (
            "Test/AlwaysFailing-v0",
            "agent-r1 train: error: Test/AlwaysFailing-v0: 2 of 2 episodes ended in an env error (its step raised; "
            "more than 50% stops training: rl.max_env_errors), e.g. task ",
        ),
        ("Test/NaNBonus-v0", "agent-r1 train: error: Test/NaNBonus-v0: reward term bonus = nan at turn 1 of task "),
    ],
)
# the asynchronous runs start a generation worker (~25 s each): slow tests, which CI runs after the default suite
@pytest.mark.parametrize("asynchronous", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_failing_env_stops_training_with_one_line(tmp_path, capsys, one_thread, env_id, line, asynchronous):
    assert main(["train", "--config", str(write_config(tmp_path, env_id, async_rollouts=asynchronous))]) == 2
    err = capsys.readouterr().err.strip()
    error = err[err.find("agent-r1 train: error:") :]  # after TRL's progress bar, if it drew one
    assert error.startswith(line) and "\n" not in error, err
    assert not list((tmp_path / "run" / "rl").glob("checkpoint-*"))  # nothing of the step was saved

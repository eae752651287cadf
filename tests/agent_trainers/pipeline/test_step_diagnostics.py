"""Every algorithm's RL steps carry the diagnostics (metrics.jsonl, console line, plots; PPO's TensorBoard too),
and dynamic sampling runs under every group algorithm.

On ``LookupEnv`` (4 tasks, one task list for training and evaluation: task 0 is held aside for evaluation, 1-3
are the training tasks) with the tiny random model, whose turns are all malformed: every group ties, so dynamic
sampling draws the one training task not in the step, runs out of fresh tasks, keeps the groups it could not
replace, and the alarm fires.
"""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from agent_trainers.algorithms.shared.diagnostics import DIAGNOSTICS
from agent_trainers.pipeline.config import config_from_dict
from agent_trainers.pipeline.train import run_training
from tests.conftest import LookupEnv

ENV_ID = "Test/DiagLookup-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=LookupEnv, max_episode_steps=2)


class TypedLookupEnv(LookupEnv):
    """Its tasks name a type: ``"short"`` for Peru (task 3), ``"long"`` for the others."""

    def task_type(self, task):
        return "short" if len(task.country) < 5 else "long"


TYPED_ID = "Test/DiagTypedLookup-v0"
if TYPED_ID not in gym.registry:
    gym.register(TYPED_ID, entry_point=TypedLookupEnv, max_episode_steps=2)


def _run(tmp_path, algorithm: str, section: dict, env_id: str = ENV_ID, **top) -> list[dict]:
    config = config_from_dict(
        {
            "output_dir": str(tmp_path / algorithm),
            "device": "cpu",
            "algorithm": algorithm,
            "model": {"name": "tiny-random"},
            "env": {"id": env_id, "train_kwargs": {}, "eval_kwargs": {}},
            "rollout": {"max_new_tokens_per_turn": 4, "max_total_tokens": 512, "temperature": 1.0},
            "sft": {"enabled": False},
            "rl": {"steps": 1, "num_generations": 2, "prompts_per_step": 2, "save_steps": 1},
            algorithm: section,
            "eval": {"tasks": 1, "every": 0, "before": False},
            **top,
        }
    )
    run_training(config)
    lines = (tmp_path / algorithm / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["stage"] == "rl" and "step_time" in r]


ALWAYS = {"reward", "groups/reward_std", "groups/tied", "rollout/answered", "rollout/turns", "rollout/format_errors",
          "entropy", "grad_norm", "clip", "tokens/total", "step_time"}  # fmt: skip


@pytest.mark.parametrize("algorithm", ["grpo", "rloo", "reinforce_pp_baseline", "gigpo"])
def test_dynamic_sampling_under_each_group_algorithm(tmp_path, capsys, algorithm):
    (step,) = _run(tmp_path, algorithm, {"dynamic_sampling": True, "dynamic_sampling_tries": 2})
    # entropy and clip come from the micro-batches the model ran on; every group tied, so either every
    # micro-batch is idle (advantages exactly 0) or none is (an estimator's arithmetic left them off 0)
    ran = {"entropy", "clip"} <= set(step)
    assert ran is (step["update/idle_micro_batches"] == 0.0) and (ran or step["update/skipped"] == 1.0)
    assert ALWAYS - {"entropy", "clip"} <= set(step) and step["groups/tied"] == 1.0
    assert step["rollout/format_errors"] == 1.0
    # 2 tied groups, one round of the 1 other training task (tied too), then no fresh task: 3 played, 1 dropped,
    # 2 kept
    assert step["dynamic_sampling/groups_played"] == 3.0 and step["dynamic_sampling/dropped"] == pytest.approx(1 / 3)
    assert step["dynamic_sampling/rounds"] == 1.0 and step["dynamic_sampling/kept_tied"] == 2.0
    printed = capsys.readouterr().out
    assert "| tied 1.00 | dropped 0.33 | answered 0.00 |" in printed
    assert "!! 100% of groups tied (no signal for a group baseline; its tries ran out)" in printed
    assert (tmp_path / algorithm / "plots" / "diagnostics_1.png").stat().st_size > 0
    assert not [k for k in step if "by_type" in k]  # LookupEnv names no task type: no breakdown, no plot
    assert not (tmp_path / algorithm / "plots" / "by_type_reward.png").exists()


def test_ppo_logs_the_same_diagnostics_and_writes_tensorboard(tmp_path, capsys):
    (step,) = _run(tmp_path, "ppo", {}, report_to="tensorboard")
    assert ALWAYS <= set(step) and "dynamic_sampling/dropped" not in step and "kl" not in step  # beta 0: no KL
    assert step["entropy"] == step["ppo/entropy"] > 0 and step["clip"] == step["ppo/clipfrac"]
    assert "| KL — |" in capsys.readouterr().out
    events = list((tmp_path / "ppo" / "rl" / "runs").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    assert {d.name for d in DIAGNOSTICS} >= ALWAYS


@pytest.mark.parametrize(("algorithm", "section"), [("grpo", {"dynamic_sampling": True}), ("ppo", {})])
def test_the_figures_by_task_type_are_logged_and_drawn(tmp_path, algorithm, section):
    (step,) = _run(tmp_path, algorithm, section, env_id=TYPED_ID, rl={"steps": 1, "num_generations": 2,
                   "prompts_per_step": 3, "save_steps": 1})  # fmt: skip
    # the three training tasks (1-3) in one step: Japan and Kenya are "long", Peru "short"; every turn is
    # malformed, so every group ties
    assert step["by_type/long/groups"] == 2.0 and step["by_type/short/groups"] == 1.0
    assert step["by_type/long/tied"] == step["by_type/short/tied"] == 1.0
    assert step["by_type/long/answered"] == 0.0 and step["by_type/long/turns"] == 2.0
    assert step["by_type/long/reward"] == step["by_type/short/reward"] == pytest.approx(step["reward"])
    if section:  # no fresh task is left to refill from: the three groups played are all tied
        assert step["dynamic_sampling/by_type/long/tied"] == step["dynamic_sampling/by_type/short/tied"] == 1.0
        assert step["dynamic_sampling/by_type/long/groups_played"] == 2.0
        assert step["dynamic_sampling/by_type/short/groups_played"] == 1.0
    for figure in ("reward", "tied"):
        assert (tmp_path / algorithm / "plots" / f"by_type_{figure}.png").stat().st_size > 0


def test_a_run_whose_checkpoints_will_not_fit_says_so(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    from agent_trainers.algorithms.shared import checkpoints

    monkeypatch.setattr(checkpoints, "shutil", SimpleNamespace(disk_usage=lambda _path: SimpleNamespace(free=1000)))
    _run(tmp_path, "grpo", {})
    printed = capsys.readouterr().out
    assert "  !! disk: the final model needs about 0.0 GB, 0.0 GB is free under" in printed  # the run's one save

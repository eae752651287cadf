"""A NaN loss or gradient norm stops training with a clear error and saves nothing of it (issue 25, item 8)."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest

from agent_trainers.algorithms.shared.diagnostics import StopOnNonFinite
from agent_trainers.errors import NonFiniteTrainingError
from agent_trainers.pipeline.config import config_from_dict
from agent_trainers.pipeline.train import run_training
from tests.conftest import LookupEnv

ENV_ID = "Test/NonFiniteLookup-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=LookupEnv, max_episode_steps=2)


class _State:
    global_step = 3


@pytest.mark.parametrize(("key", "value"), [("loss", math.nan), ("grad_norm", math.inf), ("ppo/value_loss", -math.inf)])
def test_the_callback_stops_at_a_non_finite_figure(key, value):
    with pytest.raises(NonFiniteTrainingError, match=rf"rl step 3: {key} {value}; training stopped"):
        StopOnNonFinite("rl").on_log(None, _State(), None, logs={"reward": 0.5, key: value})
    StopOnNonFinite("rl").on_log(None, _State(), None, logs={"loss": 0.1, "grad_norm": 2.0, "kl": math.nan})


def test_an_exploding_sft_stops_before_its_model_is_saved(tmp_path, one_thread):
    """At lr 1e30 the first update makes every weight inf/NaN; before, the run exited 0 with a NaN final model."""
    config = config_from_dict(
        {
            "output_dir": str(tmp_path / "run"),
            "device": "cpu",
            "model": {"name": "tiny-random"},
            "env": {"id": ENV_ID, "train_kwargs": {}, "eval_kwargs": {}},
            "rollout": {"max_new_tokens_per_turn": 4, "max_total_tokens": 512},
            "sft": {"episodes": 4, "batch_size": 1, "learning_rate": 1e30},
            "rl": {"enabled": False},
            "eval": {"tasks": 1, "before": False},
        }
    )
    with pytest.raises(NonFiniteTrainingError, match=r"sft step \d+: .*(nan|inf).*Lower the learning rate"):
        run_training(config)
    run = tmp_path / "run"
    assert not (run / "sft" / "DONE").exists() and not (run / "final").exists()
    rows = (
        [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        if (run / "metrics.jsonl").exists()
        else []
    )
    assert not [r for r in rows if r.get("stage") == "eval"]

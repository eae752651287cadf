"""An SFT-only run evaluates its model once: the final evaluation is the one after SFT, copied, not re-run."""

from __future__ import annotations

import json

import gymnasium as gym

from agent_trainers.pipeline import stages
from agent_trainers.pipeline.config import config_from_dict
from agent_trainers.pipeline.train import run_training
from tests.conftest import LookupEnv

ENV_ID = "Test/SFTOnlyLookup-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=LookupEnv, max_episode_steps=2)


def test_the_final_evaluation_of_an_sft_only_run_is_the_after_sft_one(tmp_path, monkeypatch):
    calls = []
    real = stages.RunState.evaluate

    def counted(self, phase, step, model=None):
        calls.append(phase)
        return real(self, phase, step, model)

    monkeypatch.setattr(stages.RunState, "evaluate", counted)
    config = config_from_dict(
        {
            "output_dir": str(tmp_path / "run"),
            "device": "cpu",
            "model": {"name": "tiny-random"},
            "env": {"id": ENV_ID, "train_kwargs": {}, "eval_kwargs": {}},
            "rollout": {"max_new_tokens_per_turn": 4, "max_total_tokens": 512},
            "sft": {"episodes": 2, "batch_size": 2, "learning_rate": 1e-3},
            "rl": {"enabled": False},
            "eval": {"tasks": 2, "before": False},
        }
    )
    result = run_training(config)
    assert calls == ["after_sft"]  # evaluated once
    assert [p for p, _ in result.evals] == ["after_sft", "final"]
    run = tmp_path / "run"
    after, final = (run / "eval" / p / "episodes.jsonl" for p in ("after_sft", "final"))
    assert after.read_text() == final.read_text() and (run / "final" / "agent_r1.json").is_file()
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if r["stage"] == "eval"]
    assert [r["phase"] for r in evals] == ["after_sft", "final"]
    assert {k: v for k, v in evals[0].items() if k != "phase"} == {k: v for k, v in evals[1].items() if k != "phase"}

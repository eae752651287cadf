"""An SFT-only run evaluates its model once: the final evaluation is the one after SFT, copied, not re-run; a resume
redoes an evaluation of the SFT model that a kill cut."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from agent_trainers.pipeline import stages
from agent_trainers.pipeline.config import config_from_dict
from agent_trainers.pipeline.train import run_training
from tests.conftest import LookupEnv

ENV_ID = "Test/SFTOnlyLookup-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=LookupEnv, max_episode_steps=2)


def sft_only(out):
    """An SFT-only run of the tiny model into ``out``: 2 oracle episodes, 2 held-aside tasks, no eval before."""
    return config_from_dict(
        {
            "output_dir": str(out),
            "device": "cpu",
            "model": {"name": "tiny-random"},
            "env": {"id": ENV_ID, "train_kwargs": {}, "eval_kwargs": {}},
            "rollout": {"max_new_tokens_per_turn": 4, "max_total_tokens": 512},
            "sft": {"episodes": 2, "batch_size": 2, "learning_rate": 1e-3},
            "rl": {"enabled": False},
            "eval": {"tasks": 2, "before": False},
        }
    )


def test_the_final_evaluation_of_an_sft_only_run_is_the_after_sft_one(tmp_path, monkeypatch):
    calls = []
    real = stages.RunState.evaluate

    def counted(self, phase, step, model=None):
        calls.append(phase)
        return real(self, phase, step, model)

    monkeypatch.setattr(stages.RunState, "evaluate", counted)
    result = run_training(sft_only(tmp_path / "run"))
    assert calls == ["after_sft"]  # evaluated once
    assert [p for p, _ in result.evals] == ["after_sft", "final"]
    run = tmp_path / "run"
    after, final = (run / "eval" / p / "episodes.jsonl" for p in ("after_sft", "final"))
    assert after.read_text() == final.read_text() and (run / "final" / "agent_r1.json").is_file()
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if r["stage"] == "eval"]
    assert [r["phase"] for r in evals] == ["after_sft", "final"]
    assert {k: v for k, v in evals[0].items() if k != "phase"} == {k: v for k, v in evals[1].items() if k != "phase"}


class Cut(Exception):
    """Stands for a kill in the middle of an evaluation."""


@pytest.mark.slow  # ~18 s; CI runs it after the default suite
def test_a_resume_redoes_the_after_sft_evaluation_a_kill_cut(tmp_path, monkeypatch):
    """Killed while evaluating the SFT model (SFT's DONE already written): the resumed run reloads SFT and evaluates
    it again, so ``eval/after_sft`` gets its summary (a sweep's report reads it); a finished one is not redone."""
    out = tmp_path / "run"
    real = stages.evaluate_model

    def cut_after_one_record(config, model, tokenizer, folder, *, phase, **kwargs):
        (folder / "episodes.jsonl").parent.mkdir(parents=True, exist_ok=True)
        (folder / "episodes.jsonl").write_text('{"task_index": 0}\n')  # what a cut evaluation leaves
        raise Cut(phase)

    monkeypatch.setattr(stages, "evaluate_model", cut_after_one_record)
    with pytest.raises(Cut, match="after_sft"):
        run_training(sft_only(out))
    assert (out / "sft" / "DONE").is_file() and not (out / "eval" / "after_sft" / "summary.json").exists()

    calls = []

    def counted(*args, phase, **kwargs):
        calls.append(phase)
        return real(*args, phase=phase, **kwargs)

    monkeypatch.setattr(stages, "evaluate_model", counted)
    result = run_training(sft_only(out), resume=True)
    assert calls == ["after_sft"]  # SFT reloaded, not retrained; its evaluation redone; the final one copied
    assert [p for p, _ in result.evals] == ["after_sft", "final"]
    summary = json.loads((out / "eval" / "after_sft" / "summary.json").read_text())
    assert summary["episodes"] == 2

    calls.clear()  # a third call on the finished run: SFT's evaluation is on disk and is not redone (eval_final
    result = run_training(sft_only(out), resume=True)  # always runs: it has no after_sft to copy)
    assert calls == ["final"]
    assert [p for p, _ in result.evals] == ["final"]

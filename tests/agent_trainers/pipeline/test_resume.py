"""Exact resume: a run killed after step k and resumed equals an uninterrupted one (metrics and weights), also when
its newest checkpoint was damaged since (it resumes from the one before)."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from agent_trainers.pipeline.config import config_from_dict
from agent_trainers.pipeline.train import run_training
from tests.conftest import VARIED_REWARD_RUBRIC, LookupEnv

ENV_ID = "Test/ResumeLookup-v0"
if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=LookupEnv, max_episode_steps=3, kwargs={"rubric": VARIED_REWARD_RUBRIC})

TIMING = (
    "step_time",
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "rl_seconds",
    "time/rollout",
)


class Crash(Exception):
    """Stands for a kill."""


class CrashAfterSaving(TrainerCallback):
    """Dies right after checkpoint ``step`` is on disk (rollout state included)."""

    def __init__(self, step: int):
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise Crash(f"killed after step {self.step}")


def config(out, algorithm, older_checkpoints="full"):
    # ppo: a separate critic and a KL reference, so the checkpoint must carry the critic and the reference reload
    section = (
        {"critic": "separate", "update_epochs": 2, "num_minibatches": 2}
        if algorithm == "ppo"
        else {"advantage": "turn"}
    )
    return config_from_dict({algorithm: section} | {
        "seed": 7, "output_dir": str(out), "device": "cpu", "algorithm": algorithm,
        "model": {"name": "tiny-random"},
        "env": {"id": ENV_ID, "train_kwargs": {}, "eval_kwargs": {}},
        "rollout": {"max_new_tokens_per_turn": 6, "max_total_tokens": 1024, "temperature": 1.0},
        "sft": {"enabled": False},
        "rl": {"steps": 3, "num_generations": 2, "prompts_per_step": 2, "learning_rate": 1e-2, "save_steps": 1,
               "beta": 0.05 if algorithm == "ppo" else 0.0, "older_checkpoints": older_checkpoints},
        "eval": {"tasks": 1, "every": 0},
    })  # fmt: skip


def rl_records(out):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows if r["stage"] == "rl" and "loss" in r]


def cut_in_half(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


DAMAGE = {  # what happened to checkpoint-2 since it was written, by algorithm (each kind once)
    "grpo": ("optimizer.pt", "optimizer.pt missing", lambda p: p.unlink()),
    "rloo": ("scheduler.pt", "scheduler.pt missing", lambda p: p.unlink()),
    "reinforce_pp": ("model.safetensors", "model.safetensors unreadable", cut_in_half),
    "reinforce_pp_baseline": ("trainer_state.json", "trainer_state.json unreadable", lambda p: p.write_text("")),
    "gigpo": ("optimizer.pt", "optimizer.pt unreadable", cut_in_half),
    "ppo": ("optimizer.bin", "optimizer.bin unreadable", cut_in_half),
}


# GRPO (TRL's checkpoints) in the default suite; PPO (accelerate's, ~35 s) and the other four damage kinds are slow
# tests (~12-35 s each; CI runs them after the default suite: scripts/test_slow.sh)
@pytest.mark.parametrize(
    "algorithm",
    [
        "grpo",
        *(
            pytest.param(a, marks=pytest.mark.slow)
            for a in ("rloo", "reinforce_pp", "reinforce_pp_baseline", "gigpo", "ppo")
        ),
    ],
)
def test_killed_and_resumed_run_equals_the_uninterrupted_one(tmp_path, one_thread, algorithm):
    """Killed after checkpoint-2, whose files were then lost, cut or emptied (the table above; transformers resumed
    from it with a fresh optimizer or schedule, or stopped with a traceback naming no file): the resume warns,
    naming the file, goes back to checkpoint-1, plays steps 2 and 3 again and ends as the uninterrupted run."""
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    run_training(config(straight, algorithm))
    with pytest.raises(Crash):
        run_training(config(broken, algorithm), callbacks=[CrashAfterSaving(2)])
    assert (broken / "rl" / "checkpoint-2" / "rollout_state.json").is_file()
    assert json.loads((broken / "rl" / "checkpoint-2" / "rollout_state.json").read_text())["calls"] == 2
    name, problem, damage = DAMAGE[algorithm]
    damage(broken / "rl" / "checkpoint-2" / name)
    (broken / "rl" / "checkpoint-3").mkdir()  # a later save that died half-way: it must not block --resume
    with pytest.warns(UserWarning) as caught:
        run_training(config(broken, algorithm), resume=True)
    skipped = [str(w.message) for w in caught if "skipping incomplete checkpoint" in str(w.message)]
    assert "checkpoint-3 (" in skipped[0] and f"checkpoint-2 ({problem}" in skipped[1], skipped
    expected = rl_records(straight)
    assert [r["step"] for r in expected] == [1, 2, 3]
    assert rl_records(broken) == expected  # same rollouts, rewards, losses, grad norms, step by step
    a = load_file(straight / "final" / "model.safetensors")
    b = load_file(broken / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    c = load_file(straight / "rl" / "checkpoint-1" / "model.safetensors")
    prefix = "policy." if algorithm == "ppo" else ""  # PPO checkpoints hold the whole actor-critic
    assert any(not torch.equal(a[k], c[prefix + k]) for k in a if prefix + k in c)  # step 1 did not end training
    if algorithm == "ppo":  # the whole actor-critic (value head, critic backbone) and the optimizer state
        a, b = (load_file(run / "rl" / "checkpoint-3" / "model.safetensors") for run in (straight, broken))
        assert any(k.startswith("critic.") for k in a) and "value_head.weight" in a
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        first = load_file(straight / "rl" / "checkpoint-1" / "model.safetensors")
        assert not torch.equal(a["value_head.weight"], first["value_head.weight"])
        opt_a, opt_b = (torch.load(run / "rl" / "checkpoint-3" / "optimizer.bin") for run in (straight, broken))
        for s_a, s_b in zip(opt_a["state"].values(), opt_b["state"].values(), strict=True):
            assert torch.equal(s_a["exp_avg"], s_b["exp_avg"]) and torch.equal(s_a["exp_avg_sq"], s_b["exp_avg_sq"])


def test_a_run_that_keeps_only_the_models_of_older_checkpoints_resumes_from_its_last(tmp_path, one_thread):
    """``rl.older_checkpoints: model``: each save leaves the older checkpoints their model only (no optimizer,
    scheduler or RNG state), the newest whole; killed after checkpoint-2 and resumed (the setting may change on
    resume), the run ends as the uninterrupted one that kept every checkpoint whole."""
    straight, pruned = tmp_path / "straight", tmp_path / "pruned"
    run_training(config(straight, "grpo"))
    with pytest.raises(Crash):
        run_training(config(pruned, "grpo", older_checkpoints="model"), callbacks=[CrashAfterSaving(2)])
    first, second = pruned / "rl" / "checkpoint-1", pruned / "rl" / "checkpoint-2"
    assert not any((first / name).exists() for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"))
    assert (first / "model.safetensors").is_file() and (first / "config.json").is_file()
    assert (second / "optimizer.pt").is_file() and (second / "rng_state.pth").is_file()
    run_training(config(pruned, "grpo"), resume=True)  # every checkpoint kept whole from here on
    assert rl_records(pruned) == rl_records(straight)
    a, b = (load_file(run / "final" / "model.safetensors") for run in (straight, pruned))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (second / "optimizer.pt").is_file() and (pruned / "rl" / "checkpoint-3" / "optimizer.pt").is_file()

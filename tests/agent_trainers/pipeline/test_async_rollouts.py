"""``rl.async_rollouts`` through the pipeline: staleness 0 is the synchronous run, a stale run resumes exactly,
every algorithm trains with it and logs what it did."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from safetensors.torch import load_file

from agent_trainers.pipeline.config import config_from_dict
from agent_trainers.pipeline.train import run_training
from tests.agent_trainers.pipeline.test_resume import Crash, CrashAfterSaving, config, rl_records

ALGORITHMS = ["grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gigpo", "ppo"]
ASYNC_KEYS = ("async/staleness", "async/trainer_wait", "async/generation_time", "async/worker_idle")


def async_config(out, algorithm, **overlap):
    c = config(out, algorithm).to_dict()
    c["rl"] |= {"async_rollouts": {"enabled": True, **overlap}}
    return config_from_dict(c)


def weights(out, where="final"):
    return load_file(out / where / "model.safetensors")


def same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def without_async(records):
    return [{k: v for k, v in r.items() if not k.startswith(("async/", "offpolicy/"))} for r in records]


@pytest.mark.slow  # ~50 s each (two runs); CI runs it after the default suite
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_staleness_0_is_the_synchronous_run(tmp_path, one_thread, algorithm):
    """Same rollouts, rewards, losses and gradient norms step by step, and the same final weights: the worker
    generates each call with the current weights and the same seeds as the trainer would."""
    sync, zero = tmp_path / "sync", tmp_path / "zero"
    run_training(config(sync, algorithm))
    run_training(async_config(zero, algorithm, max_staleness=0))
    got = rl_records(zero)
    assert [r["async/staleness"] for r in got] == [0.0, 0.0, 0.0]
    assert without_async(got) == rl_records(sync)
    assert same_weights(weights(sync), weights(zero))


@pytest.mark.slow  # ~30 s each (three runs); CI runs it after the default suite
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_a_stale_run_killed_and_resumed_equals_the_uninterrupted_one(tmp_path, one_thread, algorithm):
    """At staleness 1 the batch of step 3 was generated with the weights of step 1, before the checkpoint of
    step 2 was written: the checkpoint keeps it, so the resumed run trains on the same batch."""
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    run_training(async_config(straight, algorithm))
    with pytest.raises(Crash):
        run_training(async_config(broken, algorithm), callbacks=[CrashAfterSaving(2)])
    assert (broken / "rl" / "checkpoint-2" / "async_pending.json").is_file()
    run_training(async_config(broken, algorithm), resume=True)
    expected = rl_records(straight)
    assert [r["async/staleness"] for r in expected] == [0.0, 1.0, 1.0]
    assert without_async(rl_records(broken)) == without_async(expected)
    assert [r["async/staleness"] for r in rl_records(broken)] == [0.0, 1.0, 1.0]
    assert same_weights(weights(straight), weights(broken))
    # and stale training is not the synchronous run: the batches of steps 2 and 3 came from older weights
    sync = tmp_path / "sync"
    run_training(config(sync, algorithm))
    assert not same_weights(weights(sync), weights(straight))


@pytest.mark.slow  # ~35 s each; CI runs it after the default suite
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_trains_on_stale_batches_and_logs_it(tmp_path, one_thread, algorithm):
    out = tmp_path / algorithm
    run_training(async_config(out, algorithm, importance_sampling="token_mask", importance_cap=1.5))
    records = rl_records(out)
    assert [r["async/staleness"] for r in records] == [0.0, 1.0, 1.0]
    # 4 tasks, 2 a step: step 3 opens the second epoch, whose order the trainer predicted right
    assert [r["async/mispredicted"] for r in records] == [0.0, 0.0, 0.0]
    for r in records:
        assert all(key in r for key in ASYNC_KEYS), sorted(r)
    # the correction's figures exist for the stale steps only (absent, not 0, on the fresh first step)
    assert "offpolicy/ratio_mean" not in records[0]
    assert all(r["offpolicy/ratio_max"] >= r["offpolicy/ratio_mean"] > 0 for r in records[1:])
    assert all(0 <= r["offpolicy/capped"] <= 1 for r in records[1:])
    # the console-line table names them too: metrics.jsonl's canonical keys
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("async/staleness" in r for r in rows if r["stage"] == "rl")


@pytest.mark.slow  # a Ray instance of its own in the generation worker (~30 s); CI runs it after the default suite
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (extra `ray`)")
def test_the_worker_plays_its_envs_in_ray_actors_with_the_same_episodes(tmp_path, one_thread):
    """rollout.env_actors with async rollouts: the generation worker drives the Ray env pool (started in the
    worker); the episodes, rewards and losses are those of the run whose worker steps the envs itself."""
    plain, ray = tmp_path / "plain", tmp_path / "ray"
    for out, actors in ((plain, 0), (ray, 2)):
        c = async_config(out, "grpo").model_dump(mode="json")
        # the actors import the module that registers the test env (as a user's "module:id")
        c["env"]["id"] = "tests.agent_trainers.pipeline.test_resume:" + c["env"]["id"]
        c["rollout"]["env_actors"] = actors
        run_training(config_from_dict(c))
    assert without_async(rl_records(ray)) == without_async(rl_records(plain))
    assert same_weights(weights(plain), weights(ray))

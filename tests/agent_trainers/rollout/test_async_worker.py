"""The generation worker of ``rl.async_rollouts``: overlap, which weights generate which call, faults, checkpoints."""

from __future__ import annotations

import copy
import os
import signal
import time

import pytest
import torch

from agent_trainers.policies import tiny_random_model
from agent_trainers.rollout import RolloutConfig
from agent_trainers.rollout.async_worker import ASYNC_PENDING, AsyncRollouts, GenerationWorkerError
from agent_trainers.rollout.training import EnvRollouts, task_rows
from tests.agent_trainers.algorithms.trl_adapter.test_grpo import ENV_ID, ScriptedLookup

GENERATE_S = 0.5
"""Seconds each scripted generate() call sleeps (a call plays 2 turns: about 1 s of generation)."""


class SlowScripted(ScriptedLookup):
    def generate(self, prompts, params):
        time.sleep(GENERATE_S)
        return super().generate(prompts, params)


class Hanging(ScriptedLookup):
    def generate(self, prompts, params):
        time.sleep(3600)


def slow_scripted(model, tok, seed):
    return SlowScripted(tok)


def hanging(model, tok, seed):
    return Hanging(tok)


CONFIG = RolloutConfig(max_new_tokens_per_turn=24, max_total_tokens=1024, temperature=1.0)


def rollouts(factory=None, **kw):
    rows = task_rows(ENV_ID, range(4))
    return EnvRollouts(rows, config=CONFIG, policy_factory=factory, seed=3, **kw)


def tasks(*indices):
    return [(ENV_ID, i) for i in indices]


@pytest.fixture(scope="module")
def model():
    model, tok = tiny_random_model(seed=0)
    return model.eval(), tok


def test_the_trainer_does_not_wait_for_calls_generated_while_it_trained(model):
    """A scripted generator takes ~1 s a call and a "training step" 2 s: from the second call on, the episodes are
    ready when the trainer asks (it waits well under the generation time); the first call cannot overlap."""
    m, tok = model
    with AsyncRollouts(rollouts(slow_scripted), m, tok, max_staleness=1, timeout=60) as pool:
        pool.start()
        waits, stale = [], []
        for call in range(4):
            episodes, stats = pool.rollouts_for(
                call, tasks(call), 2, CONFIG, m, version=call, upcoming=[tasks(call + 1)] if call < 3 else []
            )
            assert [t.task_index for t in episodes] == [call, call]
            waits.append(stats["async/trainer_wait"])
            stale.append(stats["async/staleness"])
            assert stats["async/generation_time"] >= 2 * GENERATE_S
            time.sleep(4 * GENERATE_S)  # the training step
    assert waits[0] >= 2 * GENERATE_S  # nothing was generated ahead of the first call
    assert all(w < GENERATE_S for w in waits[1:]), waits
    assert stale == [0.0, 1.0, 1.0, 1.0]


@pytest.mark.slow  # ~10 s; CI runs it after the default suite
def test_two_steps_ahead_each_job_still_gets_the_weights_it_was_tagged_with(model):
    """max_staleness 2 with a slow generator and a fast trainer: when step 1 publishes v1, call 2 (tagged v0) is
    still queued behind call 1, so the trainer must wait until it has started before overwriting the shared
    weights; the worker checks the version and would fail the call otherwise."""
    m, tok = model
    with AsyncRollouts(rollouts(slow_scripted), m, tok, max_staleness=2, timeout=60) as pool:
        stale = []
        for call in range(4):
            upcoming = [tasks(c % 4) for c in range(call + 1, min(call + 3, 4))]
            _, stats = pool.rollouts_for(call, tasks(call), 2, CONFIG, m, version=call, upcoming=upcoming)
            stale.append(stats["async/staleness"])
    assert stale == [0.0, 1.0, 2.0, 2.0]


@pytest.mark.slow  # ~15 s; CI runs it after the default suite
def test_each_call_is_generated_with_the_weights_of_its_version(model, one_thread):
    """Staleness 0 gives the episodes the trainer's own process would play now; staleness 1 those the previous
    weights would have played (same seeds), token for token."""
    m, tok = model
    old = copy.deepcopy(m)
    new = copy.deepcopy(m)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.05 * torch.randn_like(p))
    here = rollouts()

    def played(weights, call, indices):
        here.calls = call
        episodes = here.play(tasks(*indices), 2, here._policy(weights, tok), CONFIG)
        return [(t.completion_ids, t.logprobs) for t in episodes]

    with AsyncRollouts(rollouts(), m, tok, max_staleness=1) as pool:
        first, s0 = pool.rollouts_for(0, tasks(0, 1), 2, CONFIG, old, version=0, upcoming=[tasks(2, 3)])
        second, s1 = pool.rollouts_for(1, tasks(2, 3), 2, CONFIG, new, version=1, upcoming=[])
    assert (s0["async/staleness"], s1["async/staleness"]) == (0.0, 1.0)
    assert [(t.completion_ids, t.logprobs) for t in first] == played(old, 0, (0, 1))
    assert [(t.completion_ids, t.logprobs) for t in second] == played(old, 1, (2, 3))  # generated before v1
    assert [(t.completion_ids, t.logprobs) for t in second] != played(new, 1, (2, 3))
    with AsyncRollouts(rollouts(), m, tok, max_staleness=0) as pool:
        pool.rollouts_for(0, tasks(0, 1), 2, CONFIG, old, version=0, upcoming=[tasks(2, 3)])
        second, s1 = pool.rollouts_for(1, tasks(2, 3), 2, CONFIG, new, version=1, upcoming=[])
    assert s1["async/staleness"] == 0.0
    assert [(t.completion_ids, t.logprobs) for t in second] == played(new, 1, (2, 3))


def test_a_call_whose_tasks_were_mispredicted_is_generated_afresh(model):
    m, tok = model
    with AsyncRollouts(rollouts(ScriptedLookupFactory()), m, tok, max_staleness=1) as pool:
        pool.rollouts_for(0, tasks(0), 2, CONFIG, m, version=0, upcoming=[tasks(3)])  # call 1 predicted as task 3
        episodes, stats = pool.rollouts_for(1, tasks(1), 2, CONFIG, m, version=1, upcoming=[tasks(2)])
        assert [t.task_index for t in episodes] == [1, 1]
        assert stats["async/mispredicted"] == 1.0 and stats["async/staleness"] == 0.0
        episodes, stats = pool.rollouts_for(2, tasks(2), 2, CONFIG, m, version=2, upcoming=[])
        assert [t.task_index for t in episodes] == [2, 2] and stats["async/mispredicted"] == 0.0


class ScriptedLookupFactory:
    """A picklable factory of the scripted policy (a class instance, as a user may pass)."""

    def __call__(self, model, tok, seed):
        return ScriptedLookup(tok)


def test_a_killed_worker_is_an_error_naming_it_within_seconds(model):
    m, tok = model
    pool = AsyncRollouts(rollouts(slow_scripted), m, tok, max_staleness=1, timeout=60)
    try:
        pool.rollouts_for(0, tasks(0), 2, CONFIG, m, version=0, upcoming=[tasks(1)])
        os.kill(pool.pid, signal.SIGKILL)
        began = time.monotonic()
        with pytest.raises(GenerationWorkerError, match=r"exited with code -9 .*last checkpoint is intact"):
            pool.rollouts_for(1, tasks(1), 2, CONFIG, m, version=1, upcoming=[])
        assert time.monotonic() - began < 5
        assert pool.pid is None  # stopped
    finally:
        pool.close()


def test_a_hung_worker_times_out_with_the_setting_named(model):
    m, tok = model
    pool = AsyncRollouts(rollouts(hanging), m, tok, max_staleness=1, timeout=2)
    try:
        pool.start()
        began = time.monotonic()
        with pytest.raises(GenerationWorkerError, match=r"sent nothing for 2 s .*rl.async_rollouts.generation_timeout"):
            pool.rollouts_for(0, tasks(0), 2, CONFIG, m, version=0, upcoming=[])
        assert time.monotonic() - began < 6
    finally:
        pool.close()


def test_a_failing_job_raises_its_traceback(model):
    m, tok = model
    with AsyncRollouts(rollouts(ScriptedLookupFactory()), m, tok) as pool:
        with pytest.raises(GenerationWorkerError, match=r"failed on call 0:[\s\S]*task_index"):
            pool.rollouts_for(0, [(ENV_ID, 99)], 2, CONFIG, m, version=0, upcoming=[])


@pytest.mark.slow  # ~13 s; CI runs it after the default suite
def test_a_checkpoint_keeps_the_calls_in_flight_and_a_new_pool_resumes_with_them(model, tmp_path):
    m, tok = model
    with AsyncRollouts(rollouts(ScriptedLookupFactory()), m, tok, max_staleness=2) as pool:
        pool.rollouts_for(0, tasks(0), 2, CONFIG, m, version=0, upcoming=[tasks(1), tasks(2)])
        pool.save(tmp_path)
    with AsyncRollouts(rollouts(ScriptedLookupFactory()), m, tok, max_staleness=2) as resumed:
        resumed.load(tmp_path)
        first, s1 = resumed.rollouts_for(1, tasks(1), 2, CONFIG, m, version=1, upcoming=[tasks(2), tasks(3)])
        second, s2 = resumed.rollouts_for(2, tasks(2), 2, CONFIG, m, version=2, upcoming=[tasks(3)])
    assert [t.task_index for t in first + second] == [1, 1, 2, 2]
    assert (s1["async/staleness"], s2["async/staleness"]) == (1.0, 2.0)  # both made with v0 before the save
    assert (tmp_path / ASYNC_PENDING).is_file()
    with AsyncRollouts(rollouts(), m, tok) as empty:
        empty.load(tmp_path / "nowhere")  # a checkpoint without the file holds no results


def test_bad_settings_are_refused(model):
    m, tok = model
    with pytest.raises(ValueError, match=r"pickled .*a lambda or a local function is not"):
        AsyncRollouts(rollouts(lambda model, tok, seed: ScriptedLookup(tok)), m, tok).start()
    with pytest.raises(ValueError, match="max_staleness must be >= 0"):
        AsyncRollouts(rollouts(), m, tok, max_staleness=-1)
    with pytest.raises(ValueError, match="timeout must be > 0"):
        AsyncRollouts(rollouts(), m, tok, timeout=0)
    with pytest.raises(ValueError, match="run on a CPU or a CUDA GPU; the model is on meta"):
        AsyncRollouts(rollouts(), copy.deepcopy(m).to("meta"), tok)

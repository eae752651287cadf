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


@pytest.mark.slow  # ~15 s; CI runs it after the default suite
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


@pytest.mark.slow  # ~18 s (a worker process); CI runs it after the default suite
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


@pytest.mark.slow  # ~18 s (a worker process); CI runs it after the default suite
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


@pytest.mark.slow  # ~18 s (a worker process); CI runs it after the default suite
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


@pytest.mark.slow  # ~18 s (a worker process); CI runs it after the default suite
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


TRAINER = """
import sys, time
import torch
from agent_trainers.policies import tiny_random_model
from agent_trainers.rollout.async_worker import AsyncRollouts
from tests.agent_trainers.rollout.test_async_worker import rollouts

if __name__ == "__main__":
    torch.set_num_threads(1)
    model, tok = tiny_random_model(seed=0)
    pool = AsyncRollouts(rollouts(), model, tok, max_staleness=1)
    pool.start()
    print(pool.pid, flush=True)
    time.sleep(600)
"""


def named_semaphores(pid):
    """The named semaphores (``/dev/shm/sem.*``) mapped by process ``pid``."""
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split("/dev/shm/", 1)[1].strip() for line in maps if "/dev/shm/sem." in line}


def gone(pid, within_s=30.0):
    """Whether process ``pid`` has ended (a zombie counts as ended) within ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.2)
    return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc (Linux)")
@pytest.mark.slow  # ~12-28 s each (two processes); CI runs it after the default suite
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_the_worker_dies_with_its_trainer_and_holds_no_named_semaphore(how):
    """A trainer killed (kill -9, or SIGTERM) takes its generation worker with it, and neither ever mapped a named
    semaphore (a multiprocessing queue, lock or value would: /dev/shm/sem.*, left there by a kill of both)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        worker = int(trainer.stdout.readline())
        semaphores = named_semaphores(trainer.pid) | named_semaphores(worker)
        trainer.send_signal(how)
        trainer.wait(timeout=30)
        assert gone(worker), f"the worker {worker} outlived its trainer"
        assert semaphores == set()
    finally:
        trainer.kill()
        trainer.wait()


class Planted:
    """A pickle that runs code when read: it creates the file ``path``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def a_result(call):
    from agent_trainers.rollout.async_process import GenerationResult
    from agent_trainers.rollout.types import Trajectory, TurnSpan

    turn = TurnSpan(0, 2, 3, reward=0.5, reward_terms={"answer": 0.5})
    traj = Trajectory(ENV_ID, {}, 3, "t0", 0, 0, [1, 2], [3, 4, 5], [1, 1, 0], [-0.25, -1e-9, 0.0], [turn])
    rng = torch.get_rng_state()
    return GenerationResult(call, ((ENV_ID, 0),), 1, [traj], {"x": 1.5}, 0.25, 0.0, rng_state=rng.numpy().tobytes())


def test_a_checkpoint_keeps_pending_results_as_json_and_a_resume_reads_no_pickle(model, tmp_path):
    """The results in flight go to async_pending.json and come back equal (trajectories, RNG state); a pickle
    planted in the checkpoint is never read (it would run its code), only named in a warning."""
    import json
    import pickle

    m, tok = model
    pool = AsyncRollouts(rollouts(), m, tok)
    pool._done = {2: a_result(2), 3: a_result(3)}
    pool.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [ASYNC_PENDING] and ASYNC_PENDING.endswith(".json")
    json.loads((tmp_path / ASYNC_PENDING).read_text())  # plain JSON
    resumed = AsyncRollouts(rollouts(), m, tok)
    resumed.load(tmp_path)
    assert resumed._done == pool._done

    planted, marker = tmp_path / "planted", tmp_path / "code-ran"
    planted.mkdir()
    (planted / "async_pending.pkl").write_bytes(pickle.dumps({"results": Planted(marker)}))
    with pytest.warns(UserWarning, match=r"async_pending.pkl is not read .*not exact"):
        AsyncRollouts(rollouts(), m, tok).load(planted)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [("{", "Expecting"), ('{"format": 1, "results": [{"call": 1}]}', "not a generation result"), ("[]", "layout")],
)
def test_a_damaged_pending_file_is_an_error_naming_it(model, tmp_path, text, message):
    m, tok = model
    (tmp_path / ASYNC_PENDING).write_text(text)
    with pytest.raises(ValueError, match=rf"{ASYNC_PENDING}: .*{message}"):
        AsyncRollouts(rollouts(), m, tok).load(tmp_path)

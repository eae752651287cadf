"""A sweep's training child does not outlive the sweep: an exception in the sweep terminates it, and on Linux the
kernel sends it SIGTERM when the sweep dies, SIGKILL included (a killed sweep used to leave its run training on)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import psutil
import pytest

from agent_trainers.experiments import runner

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _wait_for(predicate, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_an_exception_in_the_sweep_terminates_its_child(monkeypatch):
    seen = []
    real_sleep = time.sleep

    def interrupted(seconds):
        if seen:  # the clean-up's own waits
            return real_sleep(seconds)
        seen.extend(psutil.Process().children())
        raise KeyboardInterrupt  # Ctrl-C while the sweep waits for its run

    monkeypatch.setattr(runner.time, "sleep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.watch_child(SLEEPER)
    monkeypatch.setattr(runner.time, "sleep", real_sleep)
    assert len(seen) == 1
    assert not seen[0].is_running() or seen[0].status() == psutil.STATUS_ZOMBIE


def test_a_finished_child_reports_its_status_and_memory():
    code, cost = runner.watch_child([sys.executable, "-c", "import sys; sys.exit(3)"])
    assert code == 3 and cost.wall_s > 0 and cost.peak_rss_mb is not None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_sweep_killed_by_sigkill_takes_its_child_with_it(tmp_path):
    script = textwrap.dedent(f"""
        from agent_trainers.experiments.runner import watch_child
        watch_child({SLEEPER!r})
    """)
    sweep = subprocess.Popen([sys.executable, "-c", script], cwd=os.getcwd())
    try:
        parent = psutil.Process(sweep.pid)
        assert _wait_for(lambda: len(parent.children()) == 1), "the sweep never started its child"
        (child,) = parent.children()
        os.kill(sweep.pid, signal.SIGKILL)
        sweep.wait()
        assert _wait_for(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE), (
            "the child outlived the killed sweep"
        )
    finally:
        sweep.kill()
        for p in psutil.Process().children(recursive=True):
            p.kill()


def _fake_run(folder, done=False):
    config = SimpleNamespace(algorithm="grpo", rl=SimpleNamespace(enabled=True))
    return SimpleNamespace(name="grpo/seed0", done=done, config=config, folder=folder)


def _costs(out):
    return json.loads((out / runner.COSTS).read_text())


def test_a_run_s_cost_adds_up_its_invocations_and_a_new_run_starts_afresh(tmp_path):
    """A run that a killed sweep left unfinished keeps its time; the resumed invocation adds to it."""

    def killed(run):
        raise RuntimeError("run grpo/seed0 failed (exit -9)")

    with pytest.raises(RuntimeError):
        runner.run_all([_fake_run(tmp_path)], tmp_path, runner=killed, say=lambda _: None)
    first = _costs(tmp_path)["grpo/seed0"]
    assert first["finished"] is False and first["invocations"] == 1 and first["peak_rss_mb"] is None
    assert first["wall_s"] > 0

    costs = runner.run_all([_fake_run(tmp_path)], tmp_path, runner=lambda run: runner.Cost(5.0, 100.0),
                           say=lambda _: None)  # fmt: skip
    assert costs["grpo/seed0"] == {"wall_s": first["wall_s"] + 5.0, "peak_rss_mb": 100.0, "invocations": 2}
    assert _costs(tmp_path) == costs

    runner.run_all([_fake_run(tmp_path, done=True)], tmp_path, runner=killed, say=lambda _: None)  # skipped
    assert _costs(tmp_path) == costs
    # a finished run's entry, its folder since removed: trained again, it is a new run
    again = runner.run_all([_fake_run(tmp_path)], tmp_path, runner=lambda run: runner.Cost(2.0, 50.0),
                           say=lambda _: None)  # fmt: skip
    assert again["grpo/seed0"] == {"wall_s": 2.0, "peak_rss_mb": 50.0, "invocations": 1}


def test_a_training_run_s_entry_is_kept_current_while_it_trains(tmp_path):
    """The clock writes the unfinished entry while the run trains, so a SIGKILL loses at most one beat."""
    seen = []

    def training(run):
        path = tmp_path / runner.COSTS
        assert _wait_for(lambda: path.exists() and "grpo/seed0" in json.loads(path.read_text())), "no entry"
        seen.append(_costs(tmp_path)["grpo/seed0"])
        return runner.Cost(1.0, None)

    costs = runner.run_all([_fake_run(tmp_path)], tmp_path, runner=training, say=lambda _: None, heartbeat_s=0.05)
    assert seen[0]["finished"] is False and seen[0]["invocations"] == 1 and seen[0]["wall_s"] > 0
    assert costs["grpo/seed0"] == {"wall_s": 1.0, "peak_rss_mb": None, "invocations": 1}

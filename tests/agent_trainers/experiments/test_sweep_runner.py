"""A sweep's training child does not outlive the sweep: an exception in the sweep terminates it, and on Linux the
kernel sends it SIGTERM when the sweep dies, SIGKILL included (a killed sweep used to leave its run training on)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

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

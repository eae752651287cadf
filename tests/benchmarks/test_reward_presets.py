"""benchmarks/reward_presets.py: the paired gap (answered minus never answered, per task) and the replay of an
episode's actions under another preset."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agent_trainers.rollout.types import Trajectory, TurnSpan
from tests.conftest import load_script

bench = load_script("benchmarks/reward_presets.py", "bench_reward_presets")


def _row(task: int, answered: bool, value: float) -> dict:
    return {"task_index": task, "answered": answered, "returns": {"process": value}}


def test_the_paired_gap_is_the_mean_over_tasks_with_both_kinds():
    rows = [_row(0, True, 1.0), _row(0, True, 0.5), _row(0, False, 0.2),  # task 0: 0.75 - 0.2 = 0.55
            _row(1, True, 0.3),                                            # task 1: no unanswered -> left out
            _row(2, True, 0.0), _row(2, False, 0.4), _row(2, False, 0.6)]  # task 2: 0.0 - 0.5 = -0.5  # fmt: skip
    mean, low, high, n = bench.paired_gap(rows, "process")
    assert (round(mean, 6), n) == (0.025, 2)
    assert -0.5 <= low <= mean <= high <= 0.55  # a bootstrap over the two gaps stays between them
    assert bench.paired_gap([_row(0, True, 1.0)], "process") is None  # no task has both kinds: absent


def test_a_replay_under_the_played_preset_gives_the_played_return():
    """HotpotQA's embedded task 0 in the tags format: a search that finds a gold passage, then the right answer."""
    kwargs = {"action_format": "tags"}
    env = gym.make("AgentR1/HotpotQA-v0", **kwargs, reward="process")
    env.reset(seed=0, options={"task_index": 0})
    actions = ["<search>Odile Marchetti</search>", "<answer>River Lisse</answer>"]
    played = [env.step(a)[1] for a in actions]
    assert played[0] == pytest.approx(0.09)  # process: evidence 0.1 - step cost 0.01 (as the OpenEnv test states)
    messages = [{"role": "assistant", "content": a} for a in actions]
    traj = Trajectory("AgentR1/HotpotQA-v0", kwargs, 0, "t", 0, 0, messages=messages,
                      turns=[TurnSpan(0, 1, 1), TurnSpan(1, 2, 2)])  # fmt: skip
    assert bench.replay_return("AgentR1/HotpotQA-v0", kwargs, traj, "process") == pytest.approx(sum(played))
    assert bench.replay_return("AgentR1/HotpotQA-v0", kwargs, traj, "outcome") == pytest.approx(1.0)

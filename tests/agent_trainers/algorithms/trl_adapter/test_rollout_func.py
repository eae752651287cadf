"""Episode metrics: averaged over the episodes that report them, never filled with 0.0."""

from __future__ import annotations

import math

import pytest

from agent_trainers.algorithms.trl_adapter.rollout_func import EnvRolloutFunc, env_reward, episode_metrics
from agent_trainers.rollout import Trajectory, TurnSpan


def episode(*, answered, metrics=None, turns=2, reason=None):
    t = Trajectory("e", {}, 0, "t", 0, 0, terminated=answered, truncated=not answered)
    t.turns = [TurnSpan(0, 0, 0, 0.5) for _ in range(turns)]
    t.metrics = dict(metrics or {})
    t.stop_reason = reason or ("answer" if answered else "max_turns")
    return t


def test_metrics_of_unanswered_episodes_are_absent_not_zero():
    trajs = [
        episode(answered=True, metrics={"answer_em": 1.0, "turns": 2.0}),
        episode(answered=False, turns=4),  # truncated: the env reported no metrics
        episode(answered=True, metrics={"answer_em": 0.0, "turns": 3.0, "answer_close": 1.0}, turns=3),
    ]
    m = episode_metrics(trajs)
    assert m["episode/answer_em"] == 0.5  # over the two answered episodes, not 1/3
    assert m["rollout/turns"] == pytest.approx(3.0)  # model turns of every episode: (2 + 4 + 3) / 3
    assert m["episode/turns"] == 2.5  # the env's own count, from the answered episodes only
    assert m["episode/answer_close"] == 1.0 and m["rollout/answered"] == pytest.approx(2 / 3)
    assert m["rollout/stop/max_turns"] == pytest.approx(1 / 3) and m["rollout/stop/answer"] == pytest.approx(2 / 3)


def test_a_metric_nobody_reports_is_omitted():
    m = episode_metrics([episode(answered=False), episode(answered=False, reason="token_budget")])
    assert not any(k.startswith("episode/answer_") for k in m)
    assert not any(k.startswith("episode/") for k in m)
    assert m["rollout/answered"] == 0.0 and m["rollout/stop/token_budget"] == 0.5
    nan = episode_metrics([episode(answered=True, metrics={"answer_f1": math.nan})])
    assert "episode/answer_f1" not in nan
    assert episode_metrics([]) == {}


def test_env_reward_logs_the_metrics_through_trls_hook():
    logged = {}
    trajs = [episode(answered=True, metrics={"answer_em": 1.0}), episode(answered=False)]
    assert env_reward(["a", "b"], trajectory=trajs, log_metric=logged.__setitem__) == [1.0, 1.0]
    assert logged == episode_metrics(trajs)


def test_rollout_state_round_trips_and_checks_the_seed():
    fn = EnvRolloutFunc([], seed=3)
    fn.calls = 7
    other = EnvRolloutFunc([], seed=3)
    other.load_state_dict(fn.state_dict())
    assert other.calls == 7
    with pytest.raises(ValueError, match="rollout seed 3, this run uses 4"):
        EnvRolloutFunc([], seed=4).load_state_dict(fn.state_dict())

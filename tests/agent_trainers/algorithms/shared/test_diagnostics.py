"""The step diagnostics: rollout figures by hand, one name per diagnostic whoever logs it, the console line, alarms."""

from __future__ import annotations

import pytest

from agent_trainers.algorithms.shared.diagnostics import DIAGNOSTICS, alarms, canonical, step_line
from agent_trainers.rollout.training import episode_metrics
from agent_trainers.rollout.types import Trajectory, TurnSpan


def _traj(group: int, rewards: list[float], *, errors: int = 0, found: int = 0, total: int = 0, answered=True):
    t = Trajectory(env_id="E", env_kwargs={}, seed=0, task_id=f"t{group}", task_index=group, group_id=group)
    t.prompt_ids, t.completion_ids = [1] * 10, [2] * 7
    t.turns = [TurnSpan(2 * k, 2 * k + 2, 2 * k + 3, reward=r, format_errors=["bad"] if k < errors else [])
               for k, r in enumerate(rewards)]  # fmt: skip
    t.evidence_found, t.evidence_total = found, total
    t.terminated, t.stop_reason = answered, "answer" if answered else "max_turns"
    return t


def test_episode_metrics_by_hand():
    trajs = [
        _traj(0, [0.1, 0.9], found=1, total=2),  # group 0: returns 1.0 and 0.0
        _traj(0, [0.0], errors=1, found=0, total=2, answered=False),
        _traj(1, [0.5], found=2, total=2),  # group 1: 0.5 and 0.5, tied
        _traj(1, [0.2, 0.3], errors=2, total=0),  # a task without evidence: not in rollout/evidence
    ]
    m = episode_metrics(trajs)
    assert m["groups/tied"] == 0.5
    assert m["groups/reward_std"] == pytest.approx((0.5 + 0.0) / 2)  # population sd of (1, 0) is 0.5
    assert m["rollout/evidence"] == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert m["rollout/format_errors"] == pytest.approx(3 / 6)  # 3 of the 6 turns refused
    assert m["rollout/answered"] == 0.75 and m["rollout/turns"] == 6 / 4
    assert m["tokens/model"] == 6 * 2 and m["tokens/total"] == 4 * 17


def test_the_figures_by_task_type_by_hand():
    trajs = [
        _traj(0, [0.1, 0.9]),  # shopping group 0: returns 1.0 and 0.0
        _traj(0, [0.0], answered=False),
        _traj(1, [0.5]),  # shopping group 1: 0.5 and 0.5, tied
        _traj(1, [0.2, 0.3]),
        _traj(2, [1.0]),  # trip group 2: 1.0 and 1.0, tied
        _traj(2, [1.0]),
        _traj(3, [0.0, 0.0, 0.0]),  # no type: in no breakdown
    ]
    for t, kind in zip(trajs, ["shopping"] * 4 + ["trip/a"] * 2 + [None], strict=True):
        t.task_type = kind
    m = episode_metrics(trajs)
    shopping = {k.removeprefix("by_type/shopping/"): v for k, v in m.items() if k.startswith("by_type/shopping/")}
    assert shopping == pytest.approx({"reward": 2.0 / 4, "answered": 3 / 4, "turns": 6 / 4, "groups": 2, "tied": 0.5})
    assert m["by_type/trip_a/reward"] == 1.0 and m["by_type/trip_a/tied"] == 1.0  # "/" would add a level
    assert m["by_type/trip_a/groups"] == 1.0 and m["by_type/trip_a/turns"] == 1.0
    assert {k.split("/")[1] for k in m if k.startswith("by_type/")} == {"shopping", "trip_a"}
    assert m["groups/tied"] == 3 / 4  # the overall figure counts every group: 1, 2 and the one-episode group 3


def test_no_task_type_means_no_breakdown():
    assert not [k for k in episode_metrics([_traj(0, [1.0]), _traj(0, [0.0])]) if k.startswith("by_type/")]


def test_no_evidence_anywhere_leaves_it_absent():
    assert "rollout/evidence" not in episode_metrics([_traj(0, [1.0]), _traj(0, [0.0])])


def test_each_trainer_s_names_map_to_one_diagnostic():
    trl = {"reward": 0.5, "entropy": 0.7, "clip_ratio/region_mean": 0.01, "grad_norm": 2.0, "kl": 0.003}
    ppo = {"reward": 0.5, "ppo/entropy": 0.7, "ppo/clipfrac": 0.01, "grad_norm": 2.0, "ppo/kl_ref": 0.003}
    reinforce = {"reward": 0.5, "entropy": 0.7, "kl_reward/mean": 0.003}
    want = {"reward": 0.5, "entropy": 0.7, "clip": 0.01, "grad_norm": 2.0, "kl": 0.003}
    assert canonical(trl) == want and canonical(ppo) == want
    assert canonical(reinforce) == {"reward": 0.5, "entropy": 0.7, "kl": 0.003}
    assert canonical({"loss": 1.0}) == {}  # nothing invented: absent stays absent


def test_the_step_line_shows_every_diagnostic_and_dashes_the_absent():
    diag = {"reward": 0.25, "groups/tied": 0.5, "rollout/answered": 0.875, "tokens/total": 4321.0, "kl": 0.00012}
    line = step_line(3, 10, [10.0, 20.0, 30.0], diag)
    assert line == (
        "RL step 3/10: 30.0 s (mean 20.0 s/step, ETA 2.3 min) | reward 0.250 | in-group sd — | tied 0.50 | "
        "dropped — | answered 0.88 | turns — | evidence — | format err — | KL 0.0001 | entropy — | |grad| — | "
        "skipped — | clip — | tokens 4321"
    )
    assert len([d for d in DIAGNOSTICS if not d.optional]) == line.count(" | ") + 1  # all but step_time, + the head
    assert "stale" not in line and "IS " not in line  # async rows are left out when async rollouts are off


def test_the_step_line_shows_the_async_figures_when_logged():
    diag = {"reward": 0.25, "async/staleness": 1.0, "async/trainer_wait": 0.42, "offpolicy/ratio_mean": 1.0134}
    line = step_line(3, 10, [10.0, 20.0, 30.0], diag)
    assert line.endswith("| tokens — | stale 1 | wait s 0.4 | IS mean 1.013")


def test_alarms_fire_on_tied_groups_and_falling_answers_only():
    first = {"rollout/answered": 0.9, "rollout/format_errors": 0.05}
    assert alarms({"groups/tied": 0.5, "rollout/answered": 0.75, "rollout/format_errors": 0.2}, first) == []
    assert alarms({"groups/tied": 0.625}, first) == [
        "62% of groups tied (no signal for a group baseline; dynamic_sampling: true refills them)"
    ]
    assert alarms({"rollout/answered": 0.6, "rollout/format_errors": 0.3}, first) == [
        "answer rate fell 0.90 -> 0.60 since the first step",
        "format errors rose 0.05 -> 0.30 since the first step",
    ]
    assert alarms({"groups/tied": 1.0, "dynamic_sampling/dropped": 0.75}, first) == [
        "100% of groups tied (no signal for a group baseline; its tries ran out)"
    ]
    assert alarms({"rollout/answered": 0.0}, None) == []  # the first step has nothing to compare with

"""Dynamic sampling (DAPO): tied groups are dropped and refilled with fresh tasks, boundedly, reproducibly.

The groups are made by hand: ``_play_tasks`` is replaced by a table of returns per task, so every figure
below is known in advance.
"""

from __future__ import annotations

import pytest

from agent_trainers.rollout.training import EnvRollouts, returns_tie
from agent_trainers.rollout.types import Trajectory, TurnSpan

G = 2
ENV = "AgentR1/Bandit-v0"


def _traj(task: int, member: int, ret: float) -> Trajectory:
    t = Trajectory(env_id=ENV, env_kwargs={}, seed=member, task_id=f"t{task}", task_index=task, group_id=99)
    t.turns = [TurnSpan(0, 1, 1, reward=ret)]
    return t


def _rollouts(returns: dict[int, tuple[float, ...]], tries: int = 3) -> tuple[EnvRollouts, list]:
    rows = [{"prompt": [{"role": "user", "content": f"task {k}"}], "task_index": k, "env_id": ENV} for k in returns]
    er = EnvRollouts(rows, dynamic_sampling=True, dynamic_sampling_tries=tries)
    played: list[list[tuple[str, int]]] = []

    def fake_play(tasks, group, policy, config, seed):
        played.append(list(tasks))
        return [_traj(i, g, returns[i][g]) for _, i in tasks for g in range(group)]

    er._play_tasks = fake_play  # type: ignore[method-assign]
    return er, played


def test_returns_tie_is_exact_up_to_1e_9():
    assert returns_tie([_traj(0, 0, 0.5), _traj(0, 1, 0.5 + 1e-12)])
    assert not returns_tie([_traj(0, 0, 0.5), _traj(0, 1, 0.5 + 1e-6)])


def test_tied_groups_are_replaced_by_fresh_groups_that_vary():
    # tasks 0 and 1 are played; 1 ties. One round plays REFILL_FACTOR = 2 fresh tasks: 2 ties, 3 varies.
    returns = {0: (0.0, 1.0), 1: (1.0, 1.0), 2: (0.0, 0.0), 3: (0.2, 0.9), 4: (0.0, 1.0)}
    er, played = _rollouts(returns)
    out = er.play([(ENV, 0), (ENV, 1)], G, policy=None, config=None)
    assert [t.task_index for t in out] == [0, 0, 3, 3]  # slot 1 now holds task 3
    assert [t.group_id for t in out] == [0, 0, 1, 1]  # renumbered to their slots
    assert not any(returns_tie(out[k : k + G]) for k in range(0, len(out), G))
    assert played == [[(ENV, 0), (ENV, 1)], [(ENV, 2), (ENV, 3)]]  # the step, then one batched round (seeded draw)
    assert er.last_stats == {
        "dynamic_sampling/groups_played": 4.0,  # 0, 1, 2, 3
        "dynamic_sampling/dropped": 2 / 4,  # 1 (replaced) and 2 (tied)
        "dynamic_sampling/rounds": 1.0,
        "dynamic_sampling/kept_tied": 0.0,
    }


def test_the_tied_share_by_task_type_counts_every_group_played():
    # played: 0 (even, varies), 1 (odd, tied), then 2 (even, tied) and 3 (odd, varies) replace 1
    returns = {0: (0.0, 1.0), 1: (1.0, 1.0), 2: (0.0, 0.0), 3: (0.2, 0.9), 4: (0.0, 1.0)}
    er, _ = _rollouts(returns)
    base = er._play_tasks

    def typed(*args):
        out = base(*args)
        for t in out:
            t.task_type = "even" if t.task_index % 2 == 0 else "odd"
        return out

    er._play_tasks = typed  # type: ignore[method-assign]
    out = er.play([(ENV, 0), (ENV, 1)], G, policy=None, config=None)
    assert [t.task_index for t in out] == [0, 0, 3, 3]  # no tied group kept: the kept figures would show none
    assert er.last_stats["dynamic_sampling/by_type/even/tied"] == 1 / 2  # 0 varies, 2 tied
    assert er.last_stats["dynamic_sampling/by_type/odd/tied"] == 1 / 2  # 1 tied, 3 varies
    assert er.last_stats["dynamic_sampling/by_type/even/groups_played"] == 2.0
    assert er.last_stats["dynamic_sampling/by_type/odd/groups_played"] == 2.0
    assert len([k for k in er.last_stats if "by_type" in k]) == 4


def test_surplus_groups_with_signal_are_left_out():
    returns = {0: (1.0, 1.0), 1: (0.0, 1.0), 2: (0.1, 0.2), 3: (0.3, 0.4)}
    er, played = _rollouts(returns)
    out = er.play([(ENV, 0), (ENV, 1)], G, policy=None, config=None)
    assert played[1] == [(ENV, 2), (ENV, 3)] and [t.task_index for t in out] == [2, 2, 1, 1]
    assert er.last_stats["dynamic_sampling/dropped"] == 2 / 4  # 0 (replaced by 2) and 3 (surplus)


def test_the_refill_is_bounded_and_keeps_the_groups_it_could_not_replace():
    returns = {k: (0.5, 0.5) for k in range(20)}  # everything ties
    er, played = _rollouts(returns, tries=2)
    out = er.play([(ENV, 0), (ENV, 1)], G, policy=None, config=None)
    assert [len(r) for r in played] == [2, 4, 4]  # the step, then two rounds of 2 x 2 fresh groups
    assert [t.task_index for t in out] == [0, 0, 1, 1]  # the first groups stay
    assert er.last_stats == {
        "dynamic_sampling/groups_played": 10.0,
        "dynamic_sampling/dropped": 8 / 10,
        "dynamic_sampling/rounds": 2.0,
        "dynamic_sampling/kept_tied": 2.0,
    }


def test_the_refill_stops_when_no_fresh_task_is_left():
    returns = {0: (1.0, 1.0), 1: (0.0, 1.0)}  # the only other task is in the step already
    er, played = _rollouts(returns, tries=5)
    out = er.play([(ENV, 0), (ENV, 1)], G, policy=None, config=None)
    assert len(played) == 1 and [t.task_index for t in out] == [0, 0, 1, 1]
    assert er.last_stats["dynamic_sampling/rounds"] == 0.0 and er.last_stats["dynamic_sampling/kept_tied"] == 1.0


def test_the_draw_depends_only_on_the_seed_and_the_call_counter():
    returns = {k: ((0.0, 1.0) if k % 3 == 0 else (1.0, 1.0)) for k in range(30)}
    a, played_a = _rollouts(returns)
    b, played_b = _rollouts(returns)
    a.calls = b.calls = 7
    a.play([(ENV, 1), (ENV, 2)], G, None, None)
    b.play([(ENV, 1), (ENV, 2)], G, None, None)
    assert played_a == played_b
    c, played_c = _rollouts(returns)
    c.calls = 8
    c.play([(ENV, 1), (ENV, 2)], G, None, None)
    assert played_c != played_a


def test_off_by_default_and_then_no_stats():
    er, played = _rollouts({0: (1.0, 1.0), 1: (0.0, 0.0)})
    er.dynamic_sampling = False
    out = er.play([(ENV, 0), (ENV, 1)], G, None, None)
    assert [t.task_index for t in out] == [0, 0, 1, 1] and er.last_stats == {} and len(played) == 1


@pytest.mark.parametrize("algorithm", ["reinforce_pp", "ppo"])
def test_algorithms_without_a_group_baseline_refuse_it(algorithm):
    from agent_trainers.errors import one_line
    from agent_trainers.pipeline.config import config_from_dict

    with pytest.raises(ValueError) as info:
        config_from_dict(
            {"algorithm": algorithm, algorithm: {"dynamic_sampling": True}, "rollout": {"temperature": 1.0}}
        )
    assert one_line(info.value).startswith(f"{algorithm}.dynamic_sampling: not a setting")

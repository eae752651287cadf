"""GiGPO against numbers computed by hand: the episode advantage plus omega times the anchor-state step advantage.

The main group (3 rollouts of one task, prompt ``[100]``, width T = 5)::

    row 0: turn 0 = model [0, 2) + env [2, 4) = (50, 51), reward 0;   turn 1 = model [4, 5), reward 1
    row 1: turn 0 = model [0, 1) + env [1, 3) = (50, 51), reward 0.5; turn 1 = model [3, 5), reward 0
    row 2: turn 0 = model [0, 2) + env [2, 3) = (60,),    reward 0;   turn 1 = model [3, 4), reward 0.25

Anchor states (``observation``): every turn 0 is taken from the prompt (one anchor group of 3); turns 1 of
rows 0 and 1 follow the same env tokens (50, 51) (a group of 2); row 2's turn 1 follows (60,) alone (A_step 0).

gamma = 1: R = [1, 0.5, 0.25]; turn-1 values (the return from turn 1 on) of rows 0, 1: [1, 0]; row 2's 0.25.
gamma = 0.5: R = [0 + 0.5 * 1, 0.5 + 0.5 * 0, 0 + 0.5 * 0.25] = [0.5, 0.5, 0.125]; turn-1 values as for gamma 1.
Turn 0's value is the episode return, so its step advantage equals the episode advantage. (Row 2's turn-1 value
is not the mean of rows 0 and 1's, so comparing it with them would change their advantages even unscaled.)
Standard deviations are Bessel-corrected and get eps = 1e-4.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_trainers.algorithms.shared.batch import AgentBatch, turn_states
from agent_trainers.rollout import Trajectory, TurnSpan
from tests.agent_trainers.conftest import advantages_of

Z = 0.0  # padding
PROMPT = [100]


def traj(ids, spans, rewards, loss_mask, prompt=PROMPT):
    """A token-mode trajectory: ``spans`` are (start, end, env_end) of each turn in ``ids``."""
    t = Trajectory("Test/Lookup-v0", {}, 0, "t", 0, 0, prompt_ids=list(prompt))
    t.completion_ids, t.loss_mask = list(ids), list(loss_mask)
    t.turns = [TurnSpan(s, e, v, r) for (s, e, v), r in zip(spans, rewards, strict=True)]
    return t


@pytest.fixture(scope="module")
def group():
    return [
        traj([1, 2, 50, 51, 3], [(0, 2, 4), (4, 5, 5)], [0.0, 1.0], [1, 1, 0, 0, 1]),
        traj([4, 50, 51, 5, 6], [(0, 1, 3), (3, 5, 5)], [0.5, 0.0], [1, 0, 0, 1, 1]),
        traj([7, 8, 60, 9], [(0, 2, 3), (3, 4, 4)], [0.0, 0.25], [1, 1, 0, 1]),
    ]


def per_token(a0, a1, b0, b1, c0, c1):
    """The main group's layout: row 0 = 4 tokens of turn 0 + 1 of turn 1, row 1 = 3 + 2, row 2 = 3 + 1 + padding."""
    return torch.tensor([[a0] * 4 + [a1], [b0] * 3 + [b1] * 2, [c0] * 3 + [c1, Z]])


def gigpo(trajectories, *, width, group_size=None, anchor="observation", **kw):
    batch = AgentBatch.from_trajectories(
        trajectories, group_size=group_size or len(trajectories), width=width, anchor=anchor
    )
    return advantages_of(batch, "gigpo", advantage="turn", **kw)


# Each case: per-turn advantages (row 0 turn 0, row 0 turn 1, row 1 turn 0, row 1 turn 1, row 2 turn 0, row 2 turn 1).
# gamma 1, scale group: episode (R - 0.583333) / (0.381881 + eps) = [1.090804, -0.218161, -0.872643] (also A_step
# of turn 0); turn 1 of rows 0, 1: (1 - 0.5) / (0.707107 + eps) = +-0.707007; row 2's turn 1: 0.
# gamma 0.5, scale group: episode (R - 0.375) / (0.216506 + eps) = [0.577084, 0.577084, -1.154167].
# scale none only centres: gamma 1 -> [5/12, -1/12, -1/3] and turn 1 +-0.5; gamma 0.5 -> [1/8, 1/8, -1/4].
CASES = {
    (1.0, "group", 1.0): (2.181608, 1.090804 + 0.707007, -0.436322, -0.218161 - 0.707007, -1.745286, -0.872643),
    (1.0, "group", 0.5): (1.636206, 1.090804 + 0.353504, -0.327241, -0.218161 - 0.353504, -1.308965, -0.872643),
    (0.5, "group", 1.0): (1.154167, 0.577084 + 0.707007, 1.154167, 0.577084 - 0.707007, -2.308335, -1.154167),
    (0.5, "group", 0.5): (0.865626, 0.577084 + 0.353504, 0.865626, 0.577084 - 0.353504, -1.731251, -1.154167),
    (1.0, "none", 1.0): (5 / 6, 5 / 12 + 0.5, -1 / 6, -1 / 12 - 0.5, -2 / 3, -1 / 3),
    (1.0, "none", 0.5): (0.625, 5 / 12 + 0.25, -0.125, -1 / 12 - 0.25, -0.5, -1 / 3),
    (0.5, "none", 1.0): (0.25, 1 / 8 + 0.5, 0.25, 1 / 8 - 0.5, -0.5, -1 / 4),
    (0.5, "none", 0.5): (0.1875, 1 / 8 + 0.25, 0.1875, 1 / 8 - 0.25, -0.375, -1 / 4),
}


@pytest.mark.parametrize(("gamma", "scale", "omega"), sorted(CASES))
def test_two_rollouts_sharing_a_state_are_compared_there_and_the_third_is_not(group, gamma, scale, omega):
    got = gigpo(group, width=5, gamma=gamma, scale_rewards=scale, step_weight=omega)
    assert torch.allclose(got, per_token(*CASES[gamma, scale, omega]), atol=1e-5)


def test_batch_scale_divides_the_step_advantage_by_the_std_of_every_turn_value(group):
    # the six turn values [1, 0.5, 0.25 | 1, 0, 0.25] have std 0.418330 (+ eps): turn 0 steps (R - 0.583333) /
    # 0.418430 = [0.995786, -0.199157, -0.796629], turn 1 +-0.5 / 0.418430 = +-1.194943; the episode part is the
    # group's (its one group's std, 0.381881, as for scale group)
    got = gigpo(group, width=5, gamma=1.0, scale_rewards="batch")
    expected = per_token(
        1.090804 + 0.995786, 1.090804 + 1.194943, -0.218161 - 0.199157, -0.218161 - 1.194943, -1.669272, -0.872643
    )
    assert torch.allclose(got, expected, atol=1e-5)


def test_a_state_repeated_within_a_rollout_counts_once_per_visit():
    # row 0 searches twice and sees (50, 51) both times; row 1 sees it once: one anchor group of three turns.
    # gamma 0.5: row 0's turn values [0.25, 0.5, 1.0] (R0 = 0.25), row 1's [0, 0] (R1 = 0).
    # episode and turn 0: +-0.125 / (0.176777 + eps) = +-0.706707; anchor (50, 51): [0.5, 1.0, 0.0], mean 0.5,
    # std 0.5 -> [0, 0.5, -0.5] / 0.5001 = [0, 0.999800, -0.999800]
    rows = [
        traj([1, 50, 51, 2, 50, 51, 3], [(0, 1, 3), (3, 4, 6), (6, 7, 7)], [0.0, 0.0, 1.0], [1, 0, 0, 1, 0, 0, 1]),
        traj([4, 50, 51, 5], [(0, 1, 3), (3, 4, 4)], [0.0, 0.0], [1, 0, 0, 1]),
    ]
    expected = torch.tensor(
        [
            [1.413414] * 3 + [0.706707 + 0.0] * 3 + [0.706707 + 0.999800],
            [-1.413414] * 3 + [-0.706707 - 0.999800] + [Z] * 3,
        ]
    )
    assert torch.allclose(gigpo(rows, width=7, gamma=0.5), expected, atol=1e-5)


def test_observation_and_history_anchors_differ_when_only_the_last_observation_is_shared():
    # both rows see (50,) before turn 1, after different turn-0 actions (1 vs 3); row 0 earns 1, row 1 earns 0.
    # episode and turn 0: +-0.707007. observation: turn 1 is compared too (+-0.707007); history: not (0).
    rows = [
        traj([1, 50, 2], [(0, 1, 2), (2, 3, 3)], [0.0, 1.0], [1, 0, 1]),
        traj([3, 50, 4], [(0, 1, 2), (2, 3, 3)], [0.0, 0.0], [1, 0, 1]),
    ]
    assert [turn_states(t, "observation") for t in rows] == [[(100,), (50,)], [(100,), (50,)]]
    assert [turn_states(t, "history") for t in rows] == [[(100,), (100, 1, 50)], [(100,), (100, 3, 50)]]
    observation = torch.tensor([[1.414014] * 3, [-1.414014] * 3])
    history = torch.tensor([[1.414014, 1.414014, 0.707007], [-1.414014, -1.414014, -0.707007]])
    assert torch.allclose(gigpo(rows, width=3), observation, atol=1e-5)
    assert torch.allclose(gigpo(rows, width=3, anchor="history"), history, atol=1e-5)


@pytest.mark.parametrize("mode", ["outcome", "turn"])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_omega_zero_is_grpos_outcome_advantage(group, mode, scale):
    batch = AgentBatch.from_trajectories(group, group_size=3, width=5)
    grpo = advantages_of(batch, "grpo", advantage="outcome", gamma=0.5, scale_rewards=scale)
    got = advantages_of(batch, "gigpo", advantage=mode, gamma=0.5, scale_rewards=scale, step_weight=0.0)
    assert torch.equal(got, grpo)
    assert not torch.equal(advantages_of(batch, "gigpo", advantage=mode, gamma=0.5, scale_rewards=scale), grpo)


@st.composite
def distinct_state_batches(draw):
    """Whole groups of 1-3 turn rollouts whose every token id, prompt included, is unique: no state repeats."""
    group_size, groups = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    rows, next_id = [], 1
    for b in range(group_size * groups):
        spans, rewards, mask, n = [], [], [], draw(st.integers(1, 3))
        for k in range(n):
            model, env = draw(st.integers(1, 3)), draw(st.integers(1 if k < n - 1 else 0, 2))  # an env reply between
            start = len(mask)
            spans.append((start, start + model, start + model + env))
            mask += [1] * model + [0] * env
            rewards.append(draw(st.floats(-1, 1, width=32)))
        rows.append(traj(range(next_id, next_id + len(mask)), spans, rewards, mask, prompt=[-1 - b]))
        next_id += len(mask)
    return rows, group_size


@settings(max_examples=40, deadline=None)
@given(
    distinct_state_batches(),
    st.sampled_from(["outcome", "turn"]),
    st.sampled_from(["group", "batch", "none"]),
    st.sampled_from([0.5, 1.0]),
)
def test_without_a_repeated_state_gigpo_is_grpos_outcome_advantage(drawn, mode, scale, gamma):
    rows, group_size = drawn
    batch = AgentBatch.from_trajectories(rows, group_size=group_size, width=max(len(t.completion_ids) for t in rows))
    grpo = advantages_of(batch, "grpo", advantage="outcome", gamma=gamma, scale_rewards=scale)
    assert torch.equal(
        advantages_of(batch, "gigpo", advantage=mode, gamma=gamma, scale_rewards=scale, step_weight=0.7), grpo
    )


def test_outcome_mode_values_each_turn_by_its_episode_return(group):
    # gamma 0.5, scale none: turn-1 units are the episode returns of rows 0, 1: [0.5, 0.5], a tie -> A_step 0;
    # turn 0 as in turn mode (its value is the return either way): A = 2 * [1/8, 1/8, -1/4] there
    got = advantages_of(
        AgentBatch.from_trajectories(group, group_size=3, width=5), "gigpo", gamma=0.5, scale_rewards="none"
    )
    assert torch.allclose(got, per_token(0.25, 0.125, 0.25, 0.125, -0.5, -0.25), atol=1e-6)


def test_a_negative_step_weight_is_refused(group):
    with pytest.raises(ValueError, match=r"step_weight\n.*greater than or equal to 0"):
        gigpo(group, width=5, step_weight=-0.5)

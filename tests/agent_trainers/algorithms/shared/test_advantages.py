"""Every advantage estimator against numbers computed by hand: gamma < 1, several turns, several groups.

The batch (group size 2, width T = 6, gamma = 0.5)::

    row 0 (group 0): turn 0 = model [0, 2) + env [2, 3), reward 0.2; turn 1 = model [3, 5), reward 1.0
    row 1 (group 0): turn 0 = model [0, 1) + env [1, 3), reward -0.1; turn 1 = model [3, 4) + env [4, 5),
                     reward 0.0; turn 2 = model [5, 6), reward 0.5
    row 2 (group 1): turn 0 = model [0, 3), reward 1.0
    row 3 (group 1): turn 0 = model [0, 1) + env [1, 2), reward 0; turn 1 = model [2, 4), reward 0

Rewards sit on the last model token of their turn; returns-to-go discount by 0.5 per turn boundary:

    G0 = [0.7, 0.7, 0.5, 1.0, 1.0, 0]        (0.2 + 0.5 * 1.0 = 0.7; the env token of turn 0 gets 0.5 * 1.0)
    G1 = [0.025, 0.125, 0.125, 0.25, 0.25, 0.5]   (-0.1 + 0.5 * (0 + 0.5 * 0.5) = 0.025)
    G2 = [1, 1, 1, 0, 0, 0];  G3 = 0
    episode returns R = G[:, 0] = [0.7, 0.025, 1.0, 0.0]; undiscounted scores [1.2, 0.4, 1.0, 0.0]

Standard deviations are Bessel-corrected and get eps = 1e-4, as in TRL.
"""

from __future__ import annotations

import pytest
import torch

from agent_trainers.algorithms import ESTIMATORS, Algorithm, GRPOSettings, compute_advantages
from agent_trainers.algorithms.shared.batch import AgentBatch
from agent_trainers.rollout import Trajectory, TurnSpan
from tests.agent_trainers.conftest import advantages_of

Z = 0.0  # padding


def traj(spans, rewards, loss_mask):
    t = Trajectory("Test/Lookup-v0", {}, 0, "t", 0, 0)
    t.completion_ids = list(range(1, len(loss_mask) + 1))
    t.loss_mask = list(loss_mask)
    t.logprobs = [-0.5 if m else 0.0 for m in loss_mask]
    t.turns = [TurnSpan(s, e, v, r) for (s, e, v), r in zip(spans, rewards, strict=True)]
    return t


@pytest.fixture(scope="module")
def batch():
    rows = [
        traj([(0, 2, 3), (3, 5, 5)], [0.2, 1.0], [1, 1, 0, 1, 1]),
        traj([(0, 1, 3), (3, 4, 5), (5, 6, 6)], [-0.1, 0.0, 0.5], [1, 0, 0, 1, 0, 1]),
        traj([(0, 3, 3)], [1.0], [1, 1, 1]),
        traj([(0, 1, 2), (2, 4, 4)], [0.0, 0.0], [1, 0, 1, 1]),
    ]
    return AgentBatch.from_trajectories(rows, group_size=2, width=6)


def adv(batch, algorithm, mode, **kw):
    return advantages_of(batch, algorithm, advantage=mode, gamma=0.5, **kw)


def rows_of(a, b, c, d):
    return torch.tensor([a, b, c, d], dtype=torch.float32)


def test_grpo_outcome(batch):
    # group 0: R = [0.7, 0.025], mean 0.3625, std 0.675 / sqrt(2) = 0.477297 -> 0.3375 / 0.477397 = 0.706959
    # group 1: R = [1, 0], mean 0.5, std 0.707107 -> 0.5 / 0.707207 = 0.707007
    a, b = 0.706959, 0.707007
    expected = rows_of([a] * 5 + [Z], [-a] * 6, [b] * 3 + [Z] * 3, [-b] * 4 + [Z] * 2)
    assert torch.allclose(adv(batch, "grpo", "outcome"), expected, atol=1e-5)


def test_grpo_outcome_scaled_by_the_batch_std_or_not_at_all(batch):
    # std of all four returns [0.7, 0.025, 1, 0] = 0.498919 -> 0.3375 / 0.499019 = 0.676346, 0.5 / 0.499019 = 1.001994
    got = adv(batch, "grpo", "outcome", scale_rewards="batch")
    assert torch.allclose(got[:, 0], torch.tensor([0.676346, -0.676346, 1.001994, -1.001994]), atol=1e-5)
    got = adv(batch, "grpo", "outcome", scale_rewards="none")
    assert torch.allclose(got[:, 0], torch.tensor([0.3375, -0.3375, 0.5, -0.5]), atol=1e-6)


def test_grpo_turn_compares_each_turn_with_the_same_turn_of_the_group(batch):
    # group 0, turn 0: values [0.7 | 0.025], mean 0.3625, std 0.477297 -> (0.7 - 0.3625) / 0.477397 = 0.706959
    #   (a turn's env tokens share its advantage)
    # group 0, turn 1: [1.0 | 0.25], mean 0.625, std 0.530330 -> +-0.375 / 0.530430 = +-0.706973
    # group 0, turn 2: only row 1 reached it -> 0.  Group 1, turn 0: [1 | 0] -> +-0.707007; turn 1: only row 3 -> 0
    expected = rows_of(
        [0.706959, 0.706959, 0.706959, 0.706973, 0.706973, Z],
        [-0.706959, -0.706959, -0.706959, -0.706973, -0.706973, 0.0],
        [0.707007] * 3 + [Z] * 3,
        [-0.707007, -0.707007, 0.0, 0.0, Z, Z],
    )
    assert torch.allclose(adv(batch, "grpo", "turn"), expected, atol=1e-5)
    # scale="batch": the std of all eight turn values [0.7, 1, 0.025, 0.25, 0.5, 1, 0, 0] = 0.429898 (+ eps)
    got = adv(batch, "grpo", "turn", scale_rewards="batch")
    assert torch.allclose(got[0, :4], torch.tensor([0.784892, 0.784892, 0.784892, 0.872102]), atol=1e-5)
    assert torch.allclose(got[2, 0], torch.tensor(1.162802), atol=1e-5)


def test_grpo_turn_unscaled_and_a_batch_without_turns(batch):
    # scale="none" only centres: turn 0 of group 0 by 0.3625, turn 1 by 0.625; group 1's turn 0 by 0.5
    expected = rows_of(
        [0.3375, 0.3375, 0.3375, 0.375, 0.375, Z],
        [-0.3375, -0.3375, -0.3375, -0.375, -0.375, 0.0],
        [0.5] * 3 + [Z] * 3,
        [-0.5, -0.5, 0.0, 0.0, Z, Z],
    )
    assert torch.allclose(adv(batch, "grpo", "turn", scale_rewards="none"), expected, atol=1e-6)
    empty = AgentBatch.from_trajectories([traj([], [], []), traj([], [], [])], group_size=2, width=0)
    for scale in ("group", "batch", "none"):
        assert advantages_of(empty, "grpo", advantage="turn", scale_rewards=scale).shape == (2, 0)


def test_turn_mode_does_not_judge_the_last_turn_below_average_for_being_last():
    # Every rollout searches (process reward 0.1) and then answers with the same score 0.5: the answer turns
    # are all alike, so none of them may be pushed down. (Pooling all turns into one baseline gave every
    # answer turn -0.93 (GRPO; RLOO -0.1): the bias that taught the main job's agent to stop answering.)
    rows = [traj([(0, 1, 2), (2, 3, 3)], [0.1, 0.5], [1, 0, 1]) for _ in range(4)]
    b = AgentBatch.from_trajectories(rows, group_size=4, width=3)
    for name in ("grpo", "rloo", "reinforce_pp_baseline"):
        got = advantages_of(b, name, advantage="turn")
        assert torch.allclose(got[b.model_mask], torch.zeros(8)), name  # the search and the answer tokens


def test_rloo_subtracts_the_other_members_mean_return(batch):
    # baselines: row 0 <- R1 = 0.025, row 1 <- R0 = 0.7, row 2 <- R3 = 0, row 3 <- R2 = 1
    outcome = rows_of([0.675] * 5 + [Z], [-0.675] * 6, [1.0] * 3 + [Z] * 3, [-1.0] * 4 + [Z] * 2)
    assert torch.allclose(adv(batch, "rloo", "outcome"), outcome, atol=1e-6)
    # turn: per step, the other member's value at the same turn; a turn no other member reached gets 0
    # row 0: turn 0 <- 0.025, turn 1 <- 0.25; row 1: turn 0 <- 0.7, turn 1 <- 1.0, turn 2 -> 0;
    # row 2: turn 0 <- 0; row 3: turn 0 <- 1, turn 1 -> 0
    turn = rows_of(
        [0.675, 0.675, 0.475, 0.75, 0.75, Z],
        [-0.675, -0.575, -0.575, -0.75, -0.75, 0.0],
        [1.0, 1.0, 1.0, Z, Z, Z],
        [-1.0, -1.0, 0.0, 0.0, Z, Z],
    )
    assert torch.allclose(adv(batch, "rloo", "turn"), turn, atol=1e-6)


def test_reinforce_pp_normalises_over_all_model_tokens_of_the_batch(batch):
    # outcome: 13 model tokens valued 0.7 (x4), 0.025 (x3), 1.0 (x3), 0 (x3): mean 0.451923, std 0.438447
    a = [0.565680, -0.973495, 1.249757, -1.030501]
    expected = rows_of([a[0]] * 5 + [Z], [a[1]] * 6, [a[2]] * 3 + [Z] * 3, [a[3]] * 4 + [Z] * 2)
    assert torch.allclose(adv(batch, "reinforce_pp", "outcome"), expected, atol=1e-5)
    # turn: the model tokens' returns-to-go, mean 0.551923, std 0.440934
    expected = rows_of(
        [0.335749, 0.335749, -0.117730, 1.015968, 1.015968, Z],
        [-1.194744, -0.968004, -0.968004, -0.684580, -0.684580, -0.117730],
        [1.015968] * 3 + [Z] * 3,
        [-1.251429] * 4 + [Z] * 2,
    )
    assert torch.allclose(adv(batch, "reinforce_pp", "turn"), expected, atol=1e-5)


def test_reinforce_pp_baseline_subtracts_the_group_mean_then_normalises_globally(batch):
    # outcome: R - group mean = [0.3375, -0.3375, 0.5, -0.5]; over the 13 model tokens mean 0.025962, std 0.436709
    a = [0.713214, -0.832083, 1.085229, -1.204098]
    expected = rows_of([a[0]] * 5 + [Z], [a[1]] * 6, [a[2]] * 3 + [Z] * 3, [a[3]] * 4 + [Z] * 2)
    assert torch.allclose(adv(batch, "reinforce_pp_baseline", "outcome"), expected, atol=1e-5)
    # turn: minus the group's mean value at the same turn -> model tokens [0.3375, 0.3375, 0.375, 0.375 |
    # -0.3375, -0.375, 0 | 0.5 x3 | -0.5, 0, 0]: mean 0.131731, std 0.358004
    expected = rows_of(
        [0.574607, 0.574607, 0.016110, 0.679325, 0.679325, Z],
        [-1.310319, -1.031071, -1.031071, -1.415037, -1.415037, -0.367856],
        [1.028385] * 3 + [Z] * 3,
        [-1.764097, -1.764097, -0.367856, -0.367856, Z, Z],
    )
    assert torch.allclose(adv(batch, "reinforce_pp_baseline", "turn"), expected, atol=1e-5)


def test_kl_penalty_enters_the_reward_of_the_reinforce_family_only():
    # one row: turn 0 = model [0, 2) + env [2, 3), reward 0; turn 1 = model [3, 4), reward 1; KL 0.2 per model token
    # beta 0.5 -> token rewards [-0.1, -0.1, 0, 0.9]; gamma 1 -> G = [0.7, 0.8, 0.9, 0.9]
    one = AgentBatch.from_trajectories([traj([(0, 2, 3), (3, 4, 4)], [0.0, 1.0], [1, 1, 0, 1])], group_size=1, width=4)
    kl = torch.tensor([[0.2, 0.2, 0.0, 0.2]])
    got = advantages_of(one, "reinforce_pp", advantage="turn", kl_coef=0.5, kl=kl)
    # model-token returns [0.7, 0.8, 0.9]: mean 0.8, std 0.1 -> (x - 0.8) / 0.1001
    assert torch.allclose(got, torch.tensor([[-0.999001, 0.0, 0.999001, 0.999001]]), atol=1e-5)
    same = advantages_of(one, "reinforce_pp", advantage="turn")
    assert not torch.allclose(got, same)
    grpo_kl = advantages_of(one, "grpo", advantage="turn", kl_coef=0.5, kl=kl)
    assert torch.equal(grpo_kl, advantages_of(one, "grpo", advantage="turn"))  # GRPO keeps KL in TRL's loss
    with pytest.raises(ValueError, match="needs the per-token KL"):
        advantages_of(one, "reinforce_pp_baseline", kl_coef=0.5)


def test_single_turn_episodes_make_turn_mode_equal_outcome_mode():
    rows = [traj([(0, 3, 3)], [r], [1, 1, 1]) for r in (1.0, 0.0, 0.5, 0.25)]
    b = AgentBatch.from_trajectories(rows, group_size=2, width=3)
    for name in ESTIMATORS:
        assert torch.allclose(advantages_of(b, name, advantage="turn"), advantages_of(b, name, advantage="outcome"))


def test_registry_and_argument_errors(batch):
    assert set(ESTIMATORS) == {a.value for a in Algorithm} - {"ppo"}  # ppo has its own trainer (GAE + critic)
    with pytest.raises(KeyError, match=r"no advantage estimator 'ppo'; registered: \['gigpo', 'grpo', 'reinforce_pp'"):
        advantages_of(batch, "ppo")
    with pytest.raises(ValueError, match=r"gamma\n.*greater than 0"):  # the section refuses it
        advantages_of(batch, "grpo", gamma=0.0)
    with pytest.raises(TypeError, match="gigpo reads a GiGPOSettings section \\(got GRPOSettings\\)"):
        compute_advantages(batch, "gigpo", GRPOSettings())
    with pytest.raises(ValueError, match="rloo needs groups of at least 2"):
        advantages_of(AgentBatch.from_trajectories([traj([(0, 1, 1)], [1.0], [1])], group_size=1, width=1), "rloo")


def test_rft_keeps_the_episodes_whose_return_passes_the_threshold(batch):
    # undiscounted scores [1.2, 0.4, 1.0, 0.0]: above 0.5 rows 0 and 2; the groups' best: rows 0 and 2 again
    from agent_trainers.algorithms import RFTSettings

    kept = compute_advantages(batch, "rft", RFTSettings(threshold=0.5))
    valid = batch.valid.float()
    assert torch.equal(kept, valid * torch.tensor([1.0, 0.0, 1.0, 0.0])[:, None])
    loose = compute_advantages(batch, "rft", RFTSettings(threshold=-1.0))
    assert torch.equal(loose, valid)  # every episode passes
    best = compute_advantages(batch, "rft", RFTSettings(threshold=-1.0, best_of_group=True))
    assert torch.equal(best, valid * torch.tensor([1.0, 0.0, 1.0, 0.0])[:, None])  # one per group: its best
    assert not ESTIMATORS["rft"].kl_in_reward

"""``ppo.value: step``: the critic values each step at its last prompt token and GAE runs over steps (issue 24,
item 3). Hand-computed cases, the stated equivalence (gamma = lam = 1: Monte-Carlo returns minus values) and the
trainer's wiring on the scripted batch."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_trainers.algorithms.ppo.config import check_ppo_settings
from agent_trainers.algorithms.ppo.core import step_gae
from agent_trainers.rollout import RolloutConfig
from tests.agent_trainers.algorithms.ppo.test_ppo import make_trainer
from tests.agent_trainers.algorithms.ppo.test_ppo import settings as ppo_settings

# one row: turn 0 = tokens 0-3 (model 0-1, env 2-3), turn 1 = tokens 4-5 (model 4, env 5), turn 2 = token 6
TURNS = torch.tensor([[0, 0, 0, 0, 1, 1, 2, -1]])
STARTS = [[0, 4, 6]]
REWARDS = torch.tensor([[0.0, 0.1, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]])  # turn 0 pays 0.1, turn 2 pays 1
VALUES = torch.tensor([[0.2, 9.0, 9.0, 9.0, 0.4, 9.0, 0.6, 9.0]])  # V_0 = 0.2, V_1 = 0.4, V_2 = 0.6


def test_gamma_lam_one_gives_returns_minus_values():
    adv, ret, at = step_gae(REWARDS, VALUES, TURNS, STARTS, gamma=1.0, lam=1.0)
    # returns from each step: 1.1, 1.0, 1.0; minus V: 0.9, 0.6, 0.4
    assert adv[0].tolist() == pytest.approx([0.9, 0.9, 0.9, 0.9, 0.6, 0.6, 0.4, 0.0])
    assert ret[0].tolist() == pytest.approx([1.1, 0, 0, 0, 1.0, 0, 1.0, 0])
    assert at[0].tolist() == [True, False, False, False, True, False, True, False]


def test_gamma_and_lam_below_one_by_hand():
    adv, ret, _ = step_gae(REWARDS, VALUES, TURNS, STARTS, gamma=0.5, lam=0.5)
    # delta_2 = 1 - 0.6 = 0.4; delta_1 = 0 + 0.5 * 0.6 - 0.4 = -0.1; delta_0 = 0.1 + 0.5 * 0.4 - 0.2 = 0.1
    # A_2 = 0.4; A_1 = -0.1 + 0.25 * 0.4 = 0.0; A_0 = 0.1 + 0.25 * 0.0 = 0.1
    assert adv[0].tolist() == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.0, 0.0, 0.4, 0.0])
    assert ret[0].tolist() == pytest.approx([0.3, 0, 0, 0, 0.4, 0, 1.0, 0])


def test_lam_apart_from_gamma_by_hand():
    adv, ret, _ = step_gae(REWARDS, VALUES, TURNS, STARTS, gamma=1.0, lam=0.5)
    # delta_2 = 1 - 0.6 = 0.4; delta_1 = 0.6 - 0.4 = 0.2; delta_0 = 0.1 + 0.4 - 0.2 = 0.3
    # A_2 = 0.4; A_1 = 0.2 + 0.5 * 0.4 = 0.4; A_0 = 0.3 + 0.5 * 0.4 = 0.5
    assert adv[0, [0, 4, 6]].tolist() == pytest.approx([0.5, 0.4, 0.4])
    assert ret[0, [0, 4, 6]].tolist() == pytest.approx([0.7, 0.8, 1.0])


def test_a_per_token_penalty_is_summed_into_its_step():
    kl = torch.tensor([[0.05, 0.05, 0.0, 0.0, 0.2, 0.0, 0.1, 0.0]])  # on model tokens, as the trainer puts it
    adv, _, _ = step_gae(REWARDS - kl, torch.zeros_like(VALUES), TURNS, STARTS, gamma=1.0, lam=1.0)
    # step rewards 0.1 - 0.1 = 0, -0.2, 1 - 0.1 = 0.9; values 0: A = returns-to-go 0.7, 0.7, 0.9
    assert adv[0, [0, 4, 6]].tolist() == pytest.approx([0.7, 0.7, 0.9])


@settings(max_examples=60, deadline=None)
@given(
    turns=st.lists(st.tuples(st.integers(1, 4), st.floats(-1, 1), st.floats(-2, 2)), min_size=1, max_size=6),
    pad=st.integers(0, 3),
)
def test_monte_carlo_equivalence_on_random_rows(turns, pad):
    """gamma = lam = 1: every token of step k gets (sum of the rewards from step k on) - V_k."""
    index, rewards, values, starts = [], [], [], []
    for k, (length, reward, value) in enumerate(turns):
        starts.append(len(index))
        index += [k] * length
        rewards += [0.0] * (length - 1) + [reward]
        values += [value] + [99.0] * (length - 1)
    index += [-1] * pad
    rewards += [0.0] * pad
    values += [0.0] * pad
    adv, _, _ = step_gae(torch.tensor([rewards]), torch.tensor([values]), torch.tensor([index]), [starts],
                         gamma=1.0, lam=1.0)  # fmt: skip
    want = []
    for k, (length, _, value) in enumerate(turns):
        want += [sum(r for _, r, _ in turns[k:]) - value] * length
    assert adv[0].tolist() == pytest.approx(want + [0.0] * pad, abs=1e-5)


def test_the_trainer_trains_the_critic_at_the_steps_only(tmp_path, one_thread):
    from tests.agent_trainers.algorithms.ppo.test_ppo import play

    token = make_trainer(tmp_path / "token", norm_adv=False)
    step = make_trainer(tmp_path / "step", norm_adv=False, value="step")
    episodes = play(token)
    a, b = token.prepare(episodes), step.prepare(episodes)
    assert int(b.advantage_mask.sum()) == sum(len(t.turns) for t in episodes)  # one value target per step
    for row, t in enumerate(episodes):
        assert b.advantage_mask[row].nonzero().flatten().tolist() == [turn.start for turn in t.turns]
        for turn in t.turns:  # each token of a turn shares its step's advantage
            span = b.advantages[row, turn.start : turn.end]
            assert torch.all(span == span[0])
    # the value head starts at 0, so with gamma = lam = 1 both levels give each agent token its return-to-go
    agent = a.model_mask
    assert torch.allclose(a.advantages[agent], b.advantages[agent])
    step.train()  # a real update runs on the step-level batch
    assert step.state.global_step == 2


def test_step_values_refuse_gae_over_every_token():
    with pytest.raises(ValueError, match=r"ppo\.value: step runs GAE over steps"):
        check_ppo_settings(*ppo_settings(value="step", advantage_mask=False), RolloutConfig())

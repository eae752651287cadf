import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from agent_trainers.advantages import returns_to_go, turn_level_advantages


def test_returns_to_go_discounts_later_rewards():
    assert returns_to_go([1.0, 0.0, 2.0], gamma=0.5) == [1.5, 1.0, 2.0]
    assert returns_to_go([], gamma=0.9) == []


def test_turns_with_different_rewards_get_different_advantages():
    # group of two 2-turn rollouts; rollout 0 finds evidence on turn 1, rollout 1 wastes turn 1
    rewards = [[0.5, 1.0], [-0.2, 1.0]]
    spans = [[(0, 3), (5, 8)], [(0, 2), (4, 6)]]
    adv = turn_level_advantages(rewards, spans, group_size=2, length=8)
    assert adv.shape == (2, 8)
    # tokens of one turn share one value; the two turns of a rollout differ
    assert torch.unique(adv[0, 0:3]).numel() == 1 and torch.unique(adv[0, 5:8]).numel() == 1
    assert adv[0, 0] != adv[0, 5]
    assert adv[1, 0] != adv[1, 4]
    # better first turn -> higher advantage than the other rollout's first turn
    assert adv[0, 0] > adv[1, 0]
    # env tokens between turns and padding stay 0
    assert torch.all(adv[0, 3:5] == 0) and torch.all(adv[1, 2:4] == 0) and torch.all(adv[1, 6:] == 0)


def test_single_turn_reduces_to_outcome_grpo():
    totals = [1.0, 0.0, 0.5, 0.25]
    adv = turn_level_advantages([[r] for r in totals], [[(0, 1)]] * 4, group_size=4, length=1)
    t = torch.tensor(totals)
    expected = (t - t.mean()) / (t.std(unbiased=False) + 1e-4)
    assert torch.allclose(adv[:, 0], expected, atol=1e-5)


def test_groups_are_normalised_separately():
    adv = turn_level_advantages([[1.0], [0.0], [100.0], [50.0]], [[(0, 1)]] * 4, group_size=2, length=1)
    assert torch.allclose(adv[:2, 0], adv[2:, 0], atol=1e-3)


@pytest.mark.parametrize(
    ("rewards", "spans", "group", "match"),
    [
        ([[1.0]] * 3, [[(0, 1)]] * 3, 2, "divisible"),
        ([[1.0], [1.0]], [[(0, 1)], [(0, 9)]], 2, "outside"),
        ([[1.0], [1.0]], [[(0, 1)], []], 2, "spans"),
    ],
)
def test_bad_input_is_a_clear_error(rewards, spans, group, match):
    with pytest.raises(ValueError, match=match):
        turn_level_advantages(rewards, spans, group_size=group, length=4)


@given(
    st.lists(st.lists(st.floats(-2, 2), min_size=1, max_size=4), min_size=2, max_size=2),
    st.floats(0.5, 1.0),
)
def test_group_advantages_are_centred(rewards, gamma):
    spans = [[(k, k + 1) for k in range(len(r))] for r in rewards]
    adv = turn_level_advantages(rewards, spans, group_size=2, length=4, gamma=gamma, scale=False)
    values = [adv[b, k].item() for b, r in enumerate(rewards) for k in range(len(r))]
    assert abs(sum(values)) < 1e-4 * max(1, len(values))

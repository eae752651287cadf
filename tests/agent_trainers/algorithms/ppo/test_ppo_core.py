"""PPO's tensor functions against hand-computed values: GAE with and without the advantage mask, whitening, losses."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from agent_trainers.algorithms.ppo.core import (
    clipped_surrogate,
    clipped_value_loss,
    explained_variance,
    kl_k1,
    kl_k3,
    masked_gae,
    masked_mean,
    masked_whiten,
)

# Six tokens: two agent tokens (turn 1, reward 0.5 on its last), two env tokens, two agent tokens (turn 2, reward 1).
REWARDS = torch.tensor([[0.0, 0.5, 0.0, 0.0, 0.0, 1.0]])
VALUES = torch.tensor([[0.2, 0.4, 0.9, 0.7, 0.3, 0.6]])
AGENT = torch.tensor([[True, True, False, False, True, True]])
EVERY = torch.ones_like(AGENT)
GAMMA, LAM = 0.9, 0.8  # gamma * lam = 0.72


def test_gae_over_agent_tokens_skips_env_tokens_and_bootstraps_across_them():
    adv, ret = masked_gae(REWARDS, VALUES, AGENT, gamma=GAMMA, lam=LAM)
    # by hand, over a0 a1 a4 a5 (env values 0.9 and 0.7 never read):
    #   a5: d = 1.0 - 0.6 = 0.4                      A = 0.4
    #   a4: d = 0.9 * 0.6 - 0.3 = 0.24               A = 0.24 + 0.72 * 0.4 = 0.528
    #   a1: d = 0.5 + 0.9 * 0.3 - 0.4 = 0.37         A = 0.37 + 0.72 * 0.528 = 0.75016   (V(a4) bootstraps a1)
    #   a0: d = 0.9 * 0.4 - 0.2 = 0.16               A = 0.16 + 0.72 * 0.75016 = 0.7001152
    # env tokens carry the next agent token's advantage (0.528); their return is 0 (never a value target)
    expected = torch.tensor([[0.7001152, 0.75016, 0.528, 0.528, 0.528, 0.4]])
    assert torch.allclose(adv, expected, atol=1e-6)
    assert torch.allclose(ret, torch.tensor([[0.9001152, 1.15016, 0.0, 0.0, 0.828, 1.0]]), atol=1e-6)


def test_gae_without_the_mask_discounts_and_bootstraps_through_env_tokens():
    adv, ret = masked_gae(REWARDS, VALUES, EVERY, gamma=GAMMA, lam=LAM)
    #   t5: A = 0.4;  t4: A = 0.528 (as above)
    #   t3 (env): d = 0.9 * 0.3 - 0.7 = -0.43       A = -0.43 + 0.72 * 0.528 = -0.04984
    #   t2 (env): d = 0.9 * 0.7 - 0.9 = -0.27       A = -0.27 + 0.72 * -0.04984 = -0.3058848
    #   t1: d = 0.5 + 0.9 * 0.9 - 0.4 = 0.91        A = 0.91 + 0.72 * -0.3058848 = 0.689762944
    #   t0: d = 0.9 * 0.4 - 0.2 = 0.16              A = 0.16 + 0.72 * 0.689762944 = 0.65662932
    expected = torch.tensor([[0.65662932, 0.689762944, -0.3058848, -0.04984, 0.528, 0.4]])
    assert torch.allclose(adv, expected, atol=1e-6)
    assert torch.allclose(ret, expected + VALUES, atol=1e-6)


def test_with_gamma_and_lambda_one_the_mask_changes_nothing_on_agent_tokens():
    """The sums telescope: A_t = (rewards from t on) - V(s_t) either way."""
    masked, _ = masked_gae(REWARDS, VALUES, AGENT, gamma=1.0, lam=1.0)
    plain, _ = masked_gae(REWARDS, VALUES, EVERY, gamma=1.0, lam=1.0)
    assert torch.allclose(masked[AGENT], plain[AGENT])
    assert torch.allclose(masked[0, AGENT[0]], torch.tensor([1.5 - 0.2, 1.5 - 0.4, 1.0 - 0.3, 1.0 - 0.6]))


def test_padding_after_the_episode_gets_nothing_and_rows_are_independent():
    rewards = torch.cat([REWARDS, torch.tensor([[0.0, 2.0, 0.0, 0.0, 0.0, 0.0]])])
    values = torch.cat([VALUES, torch.tensor([[1.0, 0.5, 0.0, 0.0, 0.0, 0.0]])])
    mask = torch.cat([AGENT, torch.tensor([[True, True, False, False, False, False]])])  # row 2: 2 tokens + padding
    adv, ret = masked_gae(rewards, values, mask, gamma=GAMMA, lam=LAM)
    solo, _ = masked_gae(REWARDS, VALUES, AGENT, gamma=GAMMA, lam=LAM)
    assert torch.allclose(adv[0], solo[0])
    # row 2: t1: d = 2 - 0.5 = 1.5; t0: d = 0.9 * 0.5 - 1 = -0.55, A = -0.55 + 0.72 * 1.5 = 0.53
    assert torch.allclose(adv[1], torch.tensor([0.53, 1.5, 0.0, 0.0, 0.0, 0.0]), atol=1e-6)


@given(
    st.lists(st.tuples(st.floats(-1, 1), st.floats(-1, 1), st.booleans()), min_size=1, max_size=12),
)
def test_gamma_lambda_one_advantage_is_reward_to_go_minus_value(tokens):
    r = torch.tensor([[t[0] for t in tokens]], dtype=torch.float64)
    v = torch.tensor([[t[1] for t in tokens]], dtype=torch.float64)
    m = torch.tensor([[t[2] for t in tokens]])
    adv, ret = masked_gae(r, v, m, gamma=1.0, lam=1.0)
    for t in range(len(tokens)):
        if m[0, t]:
            to_go = float((r[0, t:] * m[0, t:]).sum())
            assert math.isclose(float(adv[0, t]), to_go - float(v[0, t]), abs_tol=1e-9)
            assert math.isclose(float(ret[0, t]), to_go, abs_tol=1e-9)
        else:
            assert float(ret[0, t]) == 0.0


def test_masked_whiten_uses_only_masked_entries_with_bessel_correction():
    x = torch.tensor([[1.0, 100.0, 3.0], [5.0, -50.0, 0.0]])
    mask = torch.tensor([[True, False, True], [True, False, False]])
    out = masked_whiten(x, mask)
    # masked values 1, 3, 5: mean 3, sample variance (4 + 0 + 4) / 2 = 4, std 2
    assert torch.allclose(out, torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]), atol=1e-6)
    with pytest.raises(ValueError, match="at least 2"):
        masked_whiten(x, torch.tensor([[True, False, False], [False, False, False]]))
    # two entries are enough; eps is added to the variance: [1, 3] has mean 2, variance 2 -> +-1 / sqrt(2 + 1)
    two = masked_whiten(x, torch.tensor([[True, False, True], [False, False, False]]), eps=1.0)
    assert torch.allclose(two, torch.tensor([[-(3**-0.5), 0.0, 3**-0.5], [0.0, 0.0, 0.0]]), atol=1e-6)


def test_masked_mean_is_nan_when_nothing_is_masked():
    assert math.isnan(float(masked_mean(torch.ones(2, 2), torch.zeros(2, 2, dtype=torch.bool))))
    assert float(masked_mean(torch.tensor([[2.0, 9.0]]), torch.tensor([[True, False]]))) == 2.0
    assert float(masked_mean(torch.tensor([[2.0, 9.0, 4.0]]), torch.tensor([[1, 0, 1]]))) == 3.0  # int masks too


def test_clipped_surrogate_by_hand():
    old = torch.zeros(4)
    logp = torch.log(torch.tensor([1.5, 0.5, 1.5, 0.5]))  # ratios 1.5, 0.5, 1.5, 0.5
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    loss, clipped = clipped_surrogate(logp, old, adv, clip_coef=0.2)
    # A > 0, r = 1.5: max(-1.5, -1.2) = -1.2 (clipped: no gain past 1 + eps)
    # A > 0, r = 0.5: max(-0.5, -0.8) = -0.5 (unclipped: the loss keeps pushing r up)
    # A < 0, r = 1.5: max(1.5, 1.2) = 1.5 (unclipped: keeps pushing r down)
    # A < 0, r = 0.5: max(0.5, 0.8) = 0.8 (clipped: no gain below 1 - eps)
    assert torch.allclose(loss, torch.tensor([-1.2, -0.5, 1.5, 0.8]), atol=1e-6)
    assert clipped.tolist() == [True, False, False, True]


def test_clipped_surrogate_gradient_vanishes_only_where_clipped():
    logp = torch.log(torch.tensor([1.5, 0.5, 1.5, 0.5])).requires_grad_(True)
    loss, _ = clipped_surrogate(logp, torch.zeros(4), torch.tensor([1.0, 1.0, -1.0, -1.0]), clip_coef=0.2)
    loss.sum().backward()
    # d/dlogp of -A * r = -A * r: [0 (clipped), -0.5, 1.5, 0 (clipped)]
    assert torch.allclose(logp.grad, torch.tensor([0.0, -0.5, 1.5, 0.0]), atol=1e-6)


def test_clipped_value_loss_by_hand():
    old = torch.tensor([0.0, 0.0, 0.0])
    new = torch.tensor([0.5, 0.5, 0.1])
    ret = torch.tensor([1.0, 0.0, 1.0])
    loss, clipped = clipped_value_loss(new, old, ret, clip=0.2)
    # 0: plain (0.5-1)^2 = 0.25, clipped V 0.2: (0.2-1)^2 = 0.64 -> 0.5 * 0.64 = 0.32 (clip bites)
    # 1: plain 0.25, clipped (0.2-0)^2 = 0.04 -> 0.5 * 0.25 = 0.125
    # 2: inside the clip range: 0.5 * 0.81 = 0.405
    assert torch.allclose(loss, torch.tensor([0.32, 0.125, 0.405]), atol=1e-6)
    assert clipped.tolist() == [True, False, False]
    plain, never = clipped_value_loss(new, old, ret, clip=None)
    assert torch.allclose(plain, torch.tensor([0.125, 0.125, 0.405])) and not never.any()
    assert never.dtype == torch.bool and never.shape == (3,)  # a mask, like the clipped case's
    # moving down past the clip: V = -0.5 from 0 is clipped to -0.2; R = -1: max(0.25, 0.64) / 2 = 0.32
    down, clipped = clipped_value_loss(torch.tensor([-0.5]), torch.tensor([0.0]), torch.tensor([-1.0]), clip=0.2)
    assert torch.allclose(down, torch.tensor([0.32])) and clipped.tolist() == [True]


def test_kl_estimators():
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -2.0])
    assert torch.allclose(kl_k1(logp, ref), torch.tensor([0.5, 0.0]))
    # k3 = exp(-0.5) - (-0.5) - 1 = 0.10653066
    assert torch.allclose(kl_k3(logp, ref), torch.tensor([math.exp(-0.5) + 0.5 - 1.0, 0.0]), atol=1e-7)


def test_explained_variance():
    ret = torch.tensor([[1.0, 2.0, 3.0, 99.0]])
    mask = torch.tensor([[True, True, True, False]])
    assert explained_variance(ret, ret, mask) == 1.0
    assert explained_variance(torch.zeros_like(ret) + 2.0, ret, mask) == 0.0
    assert math.isnan(explained_variance(ret, torch.ones_like(ret), mask))  # constant returns: undefined


def test_explained_variance_by_hand():
    ret = torch.tensor([[1.0, 2.0, 4.0, 99.0]])
    values = torch.tensor([[1.5, 2.0, 3.0, -50.0]])
    mask = torch.tensor([[1, 1, 1, 0]])  # the masked-out pair would dominate both variances
    # Var(R) over [1, 2, 4] = 7/3; R - V = [-0.5, 0, 1], Var = 7/12 -> 1 - (7/12) / (7/3) = 0.75
    assert explained_variance(values, ret, mask) == pytest.approx(0.75)
    # two entries are enough: R = [1, 2], V = [1.5, 2]: Var(R) = 0.5, Var(R - V) = 0.125 -> 0.75
    two = torch.tensor([[1, 1, 0, 0]])
    assert explained_variance(values, ret, two) == pytest.approx(0.75)
    assert math.isnan(explained_variance(values, ret, torch.tensor([[1, 0, 0, 0]])))  # one entry: no variance

"""Bootstrap intervals, paired differences and the dataset average, against hand-computed numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent_trainers.evaluation.stats import (
    Interval,
    bootstrap_average,
    bootstrap_mean,
    paired_difference,
)


def test_the_mean_is_exact_and_the_interval_contains_it():
    iv = bootstrap_mean([1.0, 0.0, 0.0, 1.0, 1.0], resamples=500, seed=3)
    assert (iv.mean, iv.n) == (0.6, 5)
    assert 0.0 <= iv.low <= 0.6 <= iv.high <= 1.0


def test_a_constant_sample_has_a_zero_width_interval():
    assert bootstrap_mean([0.25] * 7) == Interval(0.25, 0.25, 0.25, 7)


def test_the_interval_matches_the_normal_approximation_for_a_bernoulli_sample():
    # 30 correct of 100: sd of the mean = sqrt(0.3 * 0.7 / 100) = 0.0458, so 95% ~ 0.3 -/+ 0.0898
    values = [1.0] * 30 + [0.0] * 70
    iv = bootstrap_mean(values, resamples=4000, seed=0)
    half = 1.96 * math.sqrt(0.3 * 0.7 / 100)
    assert iv.mean == pytest.approx(0.3)
    assert iv.low == pytest.approx(0.3 - half, abs=0.02) and iv.high == pytest.approx(0.3 + half, abs=0.02)


def test_it_is_seeded():
    values = list(np.linspace(0, 1, 13))
    assert bootstrap_mean(values, seed=7) == bootstrap_mean(values, seed=7)
    assert bootstrap_mean(values, seed=7) != bootstrap_mean(values, seed=8)


def test_an_empty_sample_is_an_error_not_zero():
    with pytest.raises(ValueError, match="at least one value"):
        bootstrap_mean([])


def test_the_average_is_the_mean_of_the_dataset_means_not_the_pooled_mean():
    # dataset A: 2 of 2 right; dataset B: 0 of 4 -> average 0.5 (pooled would be 2/6)
    iv = bootstrap_average([[1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    assert iv == Interval(0.5, 0.5, 0.5, 6)
    mixed = bootstrap_average([[1.0, 0.0], [1.0, 1.0, 1.0, 0.0]], resamples=2000, seed=0)
    assert mixed.mean == pytest.approx((0.5 + 0.75) / 2)
    assert mixed.low < mixed.mean < mixed.high


def test_paired_difference_by_hand():
    a = {"q1": 1.0, "q2": 0.5, "q3": 0.0, "q4": 1.0, "only_a": 1.0}
    b = {"q1": 0.0, "q2": 0.5, "q3": 0.5, "q4": 1.0, "only_b": 0.0}
    c = paired_difference(a, b, "f1")
    # shared q1..q4: differences +1, 0, -0.5, 0 -> mean 0.125
    assert c.difference.mean == pytest.approx(0.125) and c.difference.n == 4
    assert (c.a_mean, c.b_mean) == (pytest.approx(0.625), pytest.approx(0.5))
    assert (c.wins, c.losses, c.ties) == (1, 1, 2)
    assert c.difference.low <= 0.125 <= c.difference.high


def test_pairing_makes_a_consistent_gain_significant():
    # every question improves by exactly 0.1: the paired interval is [0.1, 0.1] however noisy the scores are
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 0.9, size=40)
    a = {f"q{i}": float(x + 0.1) for i, x in enumerate(base)}
    b = {f"q{i}": float(x) for i, x in enumerate(base)}
    c = paired_difference(a, b, "f1")
    assert c.difference.mean == pytest.approx(0.1)
    assert c.difference.low == pytest.approx(0.1) and c.difference.high == pytest.approx(0.1)
    assert c.significant
    unpaired_a, unpaired_b = bootstrap_mean(list(a.values())), bootstrap_mean(list(b.values()))
    assert unpaired_a.low < unpaired_b.high  # the two separate intervals overlap: only pairing shows the gain


def test_no_shared_question_is_an_error():
    with pytest.raises(ValueError, match="share no question"):
        paired_difference({"a": 1.0}, {"b": 1.0}, "em")


def test_interval_formatting():
    assert Interval(0.12, 0.06, 0.19, 100).format() == "0.120 [0.060, 0.190]"
    assert Interval(0.1, -0.01, 0.25, 30).format(2, signed=True) == "+0.10 [-0.01, +0.25]"


def test_the_interval_ends_by_hand_for_three_values():
    # resampled means of [0, 0, 1] are 0, 1/3, 2/3, 1 with probabilities 8/27, 12/27, 6/27, 1/27:
    # P(mean = 1) = 3.7% > 2.5%, so the 95% interval reaches 1; a 90% one stops at 2/3 (P(mean >= 2/3) = 26%)
    iv = bootstrap_mean([0.0, 0.0, 1.0], resamples=4000, seed=0)
    assert (iv.low, iv.high) == (0.0, 1.0) and iv.mean == pytest.approx(1 / 3)
    narrower = bootstrap_mean([0.0, 0.0, 1.0], resamples=4000, seed=0, confidence=0.90)
    assert (narrower.low, narrower.high) == (0.0, pytest.approx(2 / 3))

"""Truncated importance sampling for stale batches: every mode against hand-computed weights and statistics."""

from __future__ import annotations

import math

import pytest
import torch

from agent_trainers.algorithms.shared.names import ISCorrection
from agent_trainers.algorithms.shared.offpolicy import importance_weights

LN = math.log
# behaviour log-probs are 0; the trained policy's are the log of the ratio wanted
# row 0 (stale): ratios 3, 0.25, 1 on the masked tokens, the 4th token outside the loss
# row 1 (fresh): its ratios must not count
# row 2 (stale): ratios 4, 4 on two masked tokens
TRAIN = torch.tensor(
    [
        [LN(3.0), LN(0.25), 0.0, LN(1.5)],
        [LN(8.0), LN(8.0), LN(8.0), LN(8.0)],
        [LN(4.0), LN(4.0), LN(9.0), 0.0],
    ]
)
BEHAVIOUR = torch.zeros(3, 4)
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
STALE = torch.tensor([True, False, True])


def weights(mode, cap=2.0):
    w, stats = importance_weights(TRAIN, BEHAVIOUR, MASK, STALE, mode, cap)
    return [[round(v, 6) for v in row] for row in w.tolist()], {k: round(v, 6) for k, v in stats.items()}


def test_token_truncate_caps_each_token_ratio():
    w, stats = weights("token_truncate")
    assert w == [[2.0, 0.25, 1.0, 1.0], [1.0] * 4, [2.0, 2.0, 1.0, 1.0]]
    # over the stale rows' masked tokens: 3, 0.25, 1, 4, 4
    assert stats == {"offpolicy/ratio_mean": 2.45, "offpolicy/ratio_max": 4.0, "offpolicy/capped": 0.6}


def test_token_mask_drops_tokens_outside_the_band():
    w, stats = weights("token_mask")  # kept: ratios within [0.5, 2]
    assert w == [[0.0, 0.0, 1.0, 1.0], [1.0] * 4, [0.0, 0.0, 1.0, 1.0]]
    assert stats["offpolicy/capped"] == 0.8  # 3, 0.25, 4 and 4 of the five
    # a band of [0.2, 5] keeps every ratio as it is
    w5, _ = importance_weights(TRAIN, BEHAVIOUR, MASK, STALE, "token_mask", 5.0)
    kept = [[round(v, 6) for v in row] for row in w5.tolist()]
    assert kept == [[3.0, 0.25, 1.0, 1.0], [1.0] * 4, [4.0, 4.0, 1.0, 1.0]]


def test_sequence_modes_use_the_product_over_the_sequence():
    w, stats = weights("sequence_truncate")  # row 0: 3 * 0.25 * 1 = 0.75; row 2: 4 * 4 = 16 -> 2
    assert w == [[0.75, 0.75, 0.75, 1.0], [1.0] * 4, [2.0, 2.0, 1.0, 1.0]]
    assert stats == {"offpolicy/ratio_mean": 8.375, "offpolicy/ratio_max": 16.0, "offpolicy/capped": 0.5}
    w, stats = weights("sequence_mask")
    assert w == [[0.75, 0.75, 0.75, 1.0], [1.0] * 4, [0.0, 0.0, 1.0, 1.0]]
    assert stats["offpolicy/capped"] == 0.5


def test_fresh_batches_and_mode_none_are_untouched_and_report_nothing():
    for stale, mode in ((torch.tensor([False, False, False]), "token_truncate"), (STALE, "none")):
        w, stats = importance_weights(TRAIN, BEHAVIOUR, MASK, stale, mode, 2.0)
        assert torch.equal(w, torch.ones(3, 4)) and stats == {}  # absent, not 0


def test_weights_are_detached_and_bad_arguments_are_refused():
    train = TRAIN.clone().requires_grad_(True)
    w, _ = importance_weights(train, BEHAVIOUR, MASK, STALE, ISCorrection.TOKEN_TRUNCATE, 2.0)
    assert not w.requires_grad
    with pytest.raises(ValueError, match="cap must be > 1"):
        importance_weights(TRAIN, BEHAVIOUR, MASK, STALE, "token_truncate", 1.0)
    with pytest.raises(ValueError, match="one shape"):
        importance_weights(TRAIN, BEHAVIOUR[:, :3], MASK, STALE, "token_truncate", 2.0)
    with pytest.raises(ValueError):
        importance_weights(TRAIN, BEHAVIOUR, MASK, STALE, "token_clip", 2.0)

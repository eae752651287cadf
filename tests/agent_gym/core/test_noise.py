import numpy as np
import pytest

from agent_gym.core.history import ToolResult
from agent_gym.core.noise import RetrievalNoise, ToolNoise, coerce_noise


def test_default_is_no_noise():
    r = ToolResult("x")
    assert ToolNoise().apply("t", r, np.random.default_rng(0)) == (r, ())


def test_failure_and_timeout_rates():
    noise = ToolNoise(failure_prob=0.3, timeout_prob=0.2)
    rng = np.random.default_rng(0)
    events = [noise.apply("t", ToolResult("x"), rng)[1] for _ in range(4000)]
    fail = sum(e == ("failure",) for e in events) / 4000
    timeout = sum(e == ("timeout",) for e in events) / 4000
    assert abs(fail - 0.3) < 0.03 and abs(timeout - 0.2) < 0.03


def test_truncation_fixed_length():
    out, ev = ToolNoise(truncate_prob=1.0, truncate_length=3).apply("t", ToolResult("abcdef"), np.random.default_rng(0))
    assert out.content == "abc [truncated]" and ev == ("truncate",)


def test_exempt_tools():
    noise = ToolNoise(failure_prob=1.0, exempt_tools=("finish",))
    assert noise.apply("finish", ToolResult("ok"), np.random.default_rng(0))[0].ok


def test_retrieval_noise_seeded_and_effective():
    noise = RetrievalNoise(drop_prob=0.3, shuffle_prob=0.5, distractor_prob=0.3)
    ranked, pool = list("abcde"), list("abcdefghij")
    a = noise.apply(ranked, pool, np.random.default_rng(5))
    b = noise.apply(ranked, pool, np.random.default_rng(5))
    assert a == b
    outcomes = {tuple(noise.apply(ranked, pool, np.random.default_rng(s))[0]) for s in range(50)}
    assert len(outcomes) > 10
    assert RetrievalNoise().apply(ranked, pool, np.random.default_rng(0)) == (ranked, ())


@pytest.mark.parametrize(
    "bad", [{"failure_prob": 1.5}, {"failure_prob": 0.6, "timeout_prob": 0.6}, {"truncate_length": -1}]
)
def test_validation(bad):
    with pytest.raises(ValueError):
        ToolNoise(**bad)


def test_coerce_from_dict():
    n = coerce_noise({"failure_prob": 0.1, "retrieval": {"drop_prob": 0.2}, "exempt_tools": ["x"]})
    assert n.retrieval.drop_prob == 0.2 and n.exempt_tools == ("x",)
    with pytest.raises(TypeError, match="unknown"):
        coerce_noise({"fail": 1})

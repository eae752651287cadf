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


# ---------------------------------------------------------------------------- exact draws (issue 16)
RANKED, POOL = list("abcde"), list("abcdefghij")


def _next_after(draws) -> float:
    """The generator's next uniform after ``draws`` (a function of a fresh seed-7 generator)."""
    rng = np.random.default_rng(7)
    draws(rng)
    return rng.random()


def test_drop_keeps_the_items_whose_uniform_draw_is_at_least_the_probability():
    rng = np.random.default_rng(7)
    items, events = RetrievalNoise(drop_prob=0.5).apply(RANKED, POOL, rng)
    u = np.random.default_rng(7).random(5)  # one vector draw, one number per item
    assert items == [x for x, ux in zip(RANKED, u, strict=True) if ux >= 0.5]
    assert events == (("drop",) if len(items) < 5 else ())
    assert rng.random() == _next_after(lambda r: r.random(5))  # the only draw: knobs at 0 draw nothing


def test_every_item_is_replaced_by_an_unretrieved_distractor_at_probability_one():
    rng = np.random.default_rng(7)
    items, events = RetrievalNoise(distractor_prob=1.0).apply(RANKED, POOL, rng)
    assert len(items) == 5 and not set(items) & set(RANKED) and len(set(items)) == 5  # drawn without replacement
    assert events == ("distractor",) * 5
    # per item: one uniform, then one integer among the candidates left (5, 4, ..., 1)
    expected = np.random.default_rng(7)
    for left in range(5, 0, -1):
        expected.random()
        expected.integers(left)
    assert rng.random() == expected.random()


def test_distractors_run_out_with_the_candidates():
    items, events = RetrievalNoise(distractor_prob=1.0).apply(list("abc"), list("abcd"), np.random.default_rng(0))
    assert items.count("d") == 1 and events == ("distractor",)  # one candidate: one replacement
    assert RetrievalNoise(distractor_prob=1.0).apply([], POOL, np.random.default_rng(0)) == ([], ())


def test_shuffle_needs_two_items_and_fires_at_probability_one():
    rng = np.random.default_rng(7)
    assert RetrievalNoise(shuffle_prob=1.0).apply(["a"], POOL, rng) == (["a"], ())
    assert rng.random() == _next_after(lambda r: None)  # a single item draws nothing
    items, events = RetrievalNoise(shuffle_prob=1.0).apply(["a", "b"], POOL, np.random.default_rng(7))
    assert sorted(items) == ["a", "b"] and events == ("shuffle",)


@pytest.mark.parametrize(
    ("knob", "draws"),
    [
        ({"drop_prob": 0.3}, lambda r: r.random(5)),
        ({"shuffle_prob": 0.01}, lambda r: r.random()),  # drawn, and (at this seed) no shuffle
    ],
)
def test_a_knob_at_zero_draws_nothing(knob, draws):
    """Turning one knob on leaves the draws of the others as they were: disabled knobs consume no randomness."""
    rng = np.random.default_rng(7)
    RetrievalNoise(**knob).apply(RANKED, POOL, rng)
    assert rng.random() == _next_after(draws)


# ---------------------------------------------------------------------------- ToolNoise by hand
def _draws(seed: int, n: int) -> list[float]:
    return list(np.random.default_rng(seed).random(n))


@pytest.mark.parametrize("seed", range(20))
def test_one_uniform_decides_failure_then_timeout(seed):
    noise = ToolNoise(failure_prob=0.3, timeout_prob=0.2)
    result, events = noise.apply("search", ToolResult("hits"), np.random.default_rng(seed))
    (u,) = _draws(seed, 1)
    if u < 0.3:
        assert (result.content, result.metadata, events) == (
            "Error: search is temporarily unavailable, try again",
            {"reason": "failure"},
            ("failure",),
        )
    elif u < 0.5:
        assert (result.content, result.metadata, events) == (
            "Error: search timed out",
            {"reason": "timeout"},
            ("timeout",),
        )
    else:
        assert result == ToolResult("hits") and events == ()


@pytest.mark.parametrize("seed", range(10))
def test_truncation_at_a_random_point_uses_a_second_draw(seed):
    noise = ToolNoise(truncate_prob=0.5)
    rng = np.random.default_rng(seed)
    result, events = noise.apply("t", ToolResult("abcdef"), rng)
    expected = np.random.default_rng(seed)
    expected.random()  # the failure/timeout draw
    if expected.random() < 0.5:
        cut = int(expected.integers(7))
        if cut < 6:
            assert result.content == "abcdef"[:cut] + " [truncated]" and events == ("truncate",)
        else:
            assert result.content == "abcdef" and events == ()  # a cut at the end cuts nothing
    else:
        assert result.content == "abcdef" and events == ()
    assert rng.random() == expected.random()


def test_failed_results_are_not_truncated_and_exempt_or_quiet_tools_draw_nothing():
    rng = np.random.default_rng(3)
    error = ToolResult.error("boom")
    assert ToolNoise(truncate_prob=1.0, truncate_length=1).apply("t", error, rng) == (error, ())
    assert ToolNoise(truncate_prob=1.0, exempt_tools=("t",)).apply("t", ToolResult("abc"), rng) == (
        ToolResult("abc"),
        (),
    )
    assert ToolNoise(retrieval=RetrievalNoise(drop_prob=1.0)).apply("t", ToolResult("abc"), rng) == (
        ToolResult("abc"),
        (),
    )  # retrieval noise is the retrieval tool's business
    assert rng.random() == np.random.default_rng(3).random(2)[1]  # only the failed result's fault draw was made


def test_a_truncation_length_at_or_beyond_the_text_changes_nothing():
    for length in (3, 10):
        assert ToolNoise(truncate_prob=1.0, truncate_length=length).apply(
            "t", ToolResult("abc"), np.random.default_rng(0)
        ) == (ToolResult("abc"), ())
    out, events = ToolNoise(truncate_prob=1.0, truncate_length=0).apply(
        "t", ToolResult("abc"), np.random.default_rng(0)
    )
    assert out.content == " [truncated]" and events == ("truncate",)


@pytest.mark.parametrize(
    "noise",
    [
        {"failure_prob": 1.0},
        {"failure_prob": 0.0, "timeout_prob": 0.0, "truncate_prob": 0.0},
        {"failure_prob": 0.5, "timeout_prob": 0.5},
        {"truncate_length": 0},
    ],
)
def test_edge_probabilities_and_lengths_are_valid(noise):
    assert ToolNoise(**noise) == coerce_noise(noise)


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (ToolNoise, {"failure_prob": 1.5}, "ToolNoise.failure_prob must lie in [0, 1] (got 1.5)"),
        (ToolNoise, {"timeout_prob": -0.1}, "ToolNoise.timeout_prob must lie in [0, 1] (got -0.1)"),
        (ToolNoise, {"truncate_prob": 2}, "ToolNoise.truncate_prob must lie in [0, 1] (got 2)"),
        (
            ToolNoise,
            {"failure_prob": 0.6, "timeout_prob": 0.5},
            "failure_prob + timeout_prob must be <= 1 (got 0.6 + 0.5)",
        ),
        (ToolNoise, {"truncate_length": -1}, "truncate_length must be >= 0 (got -1)"),
        (RetrievalNoise, {"drop_prob": 1.01}, "RetrievalNoise.drop_prob must lie in [0, 1] (got 1.01)"),
        (RetrievalNoise, {"shuffle_prob": -1}, "RetrievalNoise.shuffle_prob must lie in [0, 1] (got -1)"),
        (RetrievalNoise, {"distractor_prob": 3}, "RetrievalNoise.distractor_prob must lie in [0, 1] (got 3)"),
    ],
)
def test_invalid_noise_is_named(cls, kwargs, message):
    with pytest.raises(ValueError) as caught:
        cls(**kwargs)
    assert str(caught.value) == message


def test_coerce_noise_forms():
    noise = ToolNoise(failure_prob=0.1)
    assert coerce_noise(noise) is noise and coerce_noise(None) == ToolNoise()
    assert coerce_noise({"retrieval": RetrievalNoise(shuffle_prob=0.5)}).retrieval == RetrievalNoise(shuffle_prob=0.5)
    with pytest.raises(TypeError) as caught:
        coerce_noise({"fail": 1, "failure_prob": 0.1})
    assert str(caught.value) == (
        "unknown tool_noise fields ['fail']; known: ['failure_prob', 'timeout_prob', 'truncate_prob', "
        "'truncate_length', 'retrieval', 'exempt_tools']"
    )
    with pytest.raises(TypeError) as caught:
        coerce_noise(0.5)
    assert str(caught.value) == "tool_noise must be a ToolNoise, a dict or None, got float"


def test_active_means_a_generic_fault_can_fire():
    assert not ToolNoise().active and not ToolNoise(retrieval=RetrievalNoise(drop_prob=1.0)).active
    assert all(ToolNoise(**{k: 0.1}).active for k in ("failure_prob", "timeout_prob", "truncate_prob"))
    assert not RetrievalNoise().active
    assert all(RetrievalNoise(**{k: 0.1}).active for k in ("drop_prob", "shuffle_prob", "distractor_prob"))


def test_tool_noise_without_truncation_draws_one_uniform_per_call():
    """truncate_prob = 0 consumes no randomness: the next draw is the one after one uniform per call."""
    rng = np.random.default_rng(3)
    noise = ToolNoise(failure_prob=0.2, timeout_prob=0.1)
    for _ in range(6):
        noise.apply("t", ToolResult("abcdef"), rng)
    assert rng.random() == np.random.default_rng(3).random(7)[-1]

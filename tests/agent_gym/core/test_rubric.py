"""Rubric: per-kind bounds, the exact reward_range, loud failures."""

import pytest

from agent_gym.core.parsing import ParsedAction
from agent_gym.core.rubric import RewardError, RewardTerm, Rubric, Transition

FINAL = Transition(turn=2, action=ParsedAction("<answer>a</answer>", answer="a"), terminated=True)
NONFINAL = Transition(turn=1, action=ParsedAction("x", errors=("e",)))


def _const(value):
    return lambda t: value


def test_reward_range_is_the_envelope_of_final_and_nonfinal_steps():
    rubric = Rubric(
        [
            RewardTerm("a", _const(0.0), 2.0, (-1.0, 1.0), final_bounds=(0.0, 1.0), nonfinal_bounds=(-1.0, 0.0)),
            RewardTerm("b", _const(0.0), 0.5, (0.0, 1.0), final_bounds=(0.0, 0.0)),
            RewardTerm("c", _const(0.0), -1.0, (0.0, 1.0)),  # a negative weight flips the bounds
        ]
    )
    assert rubric.step_range(True) == pytest.approx((0.0 + 0.0 - 1.0, 2.0 + 0.0 + 0.0))
    assert rubric.step_range(False) == pytest.approx((-2.0 + 0.0 - 1.0, 0.0 + 0.5 + 0.0))
    assert rubric.reward_range == pytest.approx((-3.0, 2.0))


def test_the_bounds_of_the_step_kind_are_enforced():
    term = RewardTerm("x", _const(0.5), bounds=(0.0, 1.0), final_bounds=(0.0, 0.0))
    rubric = Rubric([term])
    assert rubric.score(NONFINAL) == ({"x": 0.5}, {"x": 0.5})
    with pytest.raises(RewardError, match=r"'x' returned 0.5 on a final step, outside its bounds \(0.0, 0.0\)"):
        rubric.score(FINAL)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bounds": (1.0, 0.0)},
        {"bounds": (0.0, 1.0), "final_bounds": (0.0, 2.0)},
        {"bounds": (0.0, 1.0), "nonfinal_bounds": (-0.5, 0.5)},
        {"bounds": (0.0, float("inf"))},
        {"weight": float("nan")},
    ],
)
def test_bad_bounds_or_weights_fail_at_construction(kwargs):
    with pytest.raises(ValueError, match="term 'x'"):
        RewardTerm("x", _const(0.0), **kwargs)


def test_with_weights_keeps_the_per_kind_bounds():
    rubric = Rubric([RewardTerm("x", _const(0.0), 1.0, (0.0, 1.0), final_bounds=(0.0, 0.0))]).with_weights(x=3.0)
    assert rubric.terms[0].final_bounds == (0.0, 0.0) and rubric.reward_range == (0.0, 3.0)
    with pytest.raises(KeyError, match="unknown reward terms"):
        rubric.with_weights(y=1.0)


@pytest.mark.parametrize(
    ("value", "message"),
    [(float("nan"), "not a finite number"), (True, "not a finite number"), ("1", "not a finite number")],
)
def test_non_numbers_fail_loudly(value, message):
    with pytest.raises(RewardError, match=message):
        Rubric([RewardTerm("x", _const(value))]).score(NONFINAL)


def test_a_raising_term_names_itself():
    def boom(t):
        raise ZeroDivisionError("no")

    with pytest.raises(RewardError, match="'x' raised ZeroDivisionError: no"):
        Rubric([RewardTerm("x", boom)]).score(NONFINAL)


def test_describe_lists_every_bound():
    (entry,) = Rubric([RewardTerm("x", _const(0.0), 0.5, (-1.0, 1.0), nonfinal_bounds=(-1.0, 0.0))]).describe()
    assert entry == {
        "name": "x",
        "weight": 0.5,
        "bounds": [-1.0, 1.0],
        "final_bounds": [-1.0, 1.0],
        "nonfinal_bounds": [-1.0, 0.0],
    }


# ---------------------------------------------------------------------------- edges, exactly (issue 16)
@pytest.mark.parametrize(
    "kwargs",
    [
        {"bounds": (0.0, 0.0)},  # a constant term
        {"bounds": (-1.0, 1.0), "final_bounds": (-1.0, 1.0), "nonfinal_bounds": (1.0, 1.0)},  # kinds at the edges
        {"weight": -2.0},
    ],
)
def test_edge_bounds_and_weights_are_valid(kwargs):
    RewardTerm("x", _const(0.0), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bounds": (1.0, 0.0)}, "term 'x': bounds must be finite, ordered and inside bounds (got (1.0, 0.0))"),
        (
            {"bounds": (0.0, 1.0), "final_bounds": (-0.5, 0.5)},
            "term 'x': final_bounds must be finite, ordered and inside bounds (got (-0.5, 0.5))",
        ),
        (
            {"bounds": (0.0, 1.0), "nonfinal_bounds": (0.5, 1.5)},
            "term 'x': nonfinal_bounds must be finite, ordered and inside bounds (got (0.5, 1.5))",
        ),
        (
            {"bounds": (float("-inf"), 0.0)},
            "term 'x': bounds must be finite, ordered and inside bounds (got (-inf, 0.0))",
        ),
        ({"weight": float("inf")}, "term 'x': weight must be finite (got inf)"),
    ],
)
def test_bad_terms_are_named_exactly(kwargs, message):
    with pytest.raises(ValueError) as caught:
        RewardTerm("x", _const(0.0), **kwargs)
    assert str(caught.value) == message


def test_weighted_bounds_per_kind_and_for_any_step():
    term = RewardTerm("x", _const(0.0), -2.0, (-1.0, 3.0), final_bounds=(0.0, 1.0), nonfinal_bounds=(-1.0, 0.0))
    assert term.weighted_bounds() == (-6.0, 2.0)  # any step: the negative weight flips the ends
    assert term.weighted_bounds(True) == (-2.0, 0.0) and term.weighted_bounds(False) == (0.0, 2.0)
    assert term.bounds_for(True) == (0.0, 1.0) and term.bounds_for(False) == (-1.0, 0.0)
    plain = RewardTerm("y", _const(0.0), 0.5, (-1.0, 3.0))
    assert plain.bounds_for(True) == plain.bounds_for(False) == (-1.0, 3.0)
    assert Rubric([term, plain]).step_range(True) == (-2.0 - 0.5, 0.0 + 1.5)


def test_duplicate_term_names_are_named():
    with pytest.raises(ValueError) as caught:
        Rubric([RewardTerm("a", _const(0.0)), RewardTerm("b", _const(0.0)), RewardTerm("a", _const(0.0))])
    assert str(caught.value) == "reward term names must be unique (got ['a', 'b', 'a'])"


def test_scores_are_weighted_floats_and_bounds_have_a_1e9_tolerance():
    rubric = Rubric(
        [
            RewardTerm("x", _const(1), 0.25, (0.0, 1.0)),
            RewardTerm("y", _const(1.0 + 5e-10), 1.0, (0.0, 1.0)),
            RewardTerm("w", _const(1), 2, (0, 1)),  # integers in, floats out
        ]
    )
    weighted, raw = rubric.score(NONFINAL)
    assert weighted == {"x": 0.25, "y": 1.0 + 5e-10, "w": 2.0} and raw == {"x": 1.0, "y": 1.0 + 5e-10, "w": 1.0}
    assert all(type(v) is float for v in [*weighted.values(), *raw.values()])
    with pytest.raises(RewardError) as caught:
        Rubric([RewardTerm("y", _const(1.0 + 1e-8), 1.0, (0.0, 1.0))]).score(NONFINAL)
    assert str(caught.value) == "reward term 'y' returned 1.00000001 on a non-final step, outside its bounds (0.0, 1.0)"
    low = Rubric([RewardTerm("z", _const(-5e-10), 1.0, (0.0, 1.0))]).score(NONFINAL)[1]
    assert low == {"z": -5e-10}


def test_with_weights_returns_a_new_rubric_and_names_unknown_terms():
    rubric = Rubric([RewardTerm("a", _const(0.0), 1.0), RewardTerm("b", _const(0.0), 2.0)])
    heavier = rubric.with_weights(a=3.0)
    assert [t.weight for t in heavier.terms] == [3.0, 2.0] and [t.weight for t in rubric.terms] == [1.0, 2.0]
    with pytest.raises(KeyError) as caught:
        rubric.with_weights(c=1.0, d=2.0)
    assert caught.value.args == ("unknown reward terms ['c', 'd']; known: ['a', 'b']",)


@pytest.mark.parametrize("value", [-0.5, 1.5, -1e-6, 1 + 1e-6])
def test_values_outside_the_bounds_on_either_side_are_refused(value):
    """Only float rounding (1e-9) is tolerated at each end: half a unit or a millionth outside is an error."""
    rubric = Rubric([RewardTerm("x", _const(value), bounds=(0.0, 1.0))])
    with pytest.raises(RewardError, match=r"'x' returned .* outside its bounds \(0.0, 1.0\)"):
        rubric.score(NONFINAL)
    end = min(max(value, 0.0), 1.0)
    edge = Rubric([RewardTerm("x", _const(end + (1e-10 if value > 1 else -1e-10)), bounds=(0.0, 1.0))])
    assert edge.score(NONFINAL)[0]["x"] == pytest.approx(end, abs=1e-9)  # within the tolerance

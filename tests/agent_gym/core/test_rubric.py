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

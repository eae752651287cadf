"""Each reward term's raw value by hand, on final and non-final steps (agent_gym.rewards)."""

import pytest

from agent_gym.core.parsing import ParsedAction
from agent_gym.core.rubric import Transition
from agent_gym.rewards import (
    AnswerMetric,
    Preset,
    answer_score,
    evidence_gain,
    format_penalty,
    make_rubric,
    outcome_agent_r1,
    repeated_call,
    shaping,
    step_cost,
)

CALL = ParsedAction('<tool_call>{"name": "s", "arguments": {}}</tool_call>')
BROKEN = ParsedAction("junk", errors=("no <tool_call> and no <answer> found",))
ANSWER = ParsedAction("<answer>x</answer>", answer="x")
SCORES = {"em": 0.0, "f1": 0.5, "substring": 1.0}


def _step(**kwargs) -> Transition:
    return Transition(**{"turn": 1, "action": CALL, **kwargs})


def test_format_penalty():
    assert format_penalty(_step(action=BROKEN)) == -1.0 and format_penalty(_step()) == 0.0


@pytest.mark.parametrize(
    ("new", "total", "gain"), [(1, 4, 0.25), (3, 4, 0.75), (1, 2, 0.5), (2, 3, 2 / 3), (0, 4, 0.0), (0, 0, 0.0)]
)
def test_evidence_gain_is_the_fraction_first_revealed(new, total, gain):
    assert evidence_gain(_step(new_evidence=frozenset(map(str, range(new))), evidence_total=total)) == gain


@pytest.mark.parametrize(("repeats", "value"), [(0, 0.0), (1, -1.0), (3, -1.0)])
def test_repeated_call_is_minus_one_however_many_repeats(repeats, value):
    assert repeated_call(_step(repeated_calls=repeats)) == value


def test_step_cost_is_paid_on_every_step_but_the_answer():
    assert step_cost(_step()) == -1.0 and step_cost(_step(action=ANSWER, terminated=True)) == 0.0


def test_answer_score_reads_the_metric_at_the_end_only():
    final = _step(action=ANSWER, terminated=True, answer_scores=SCORES)
    assert answer_score(final) == 0.5  # F1 by default
    assert answer_score(final, AnswerMetric.EM) == 0.0
    assert answer_score(_step(answer_scores=SCORES)) == 0.0  # not the end
    with pytest.raises(KeyError) as caught:
        answer_score(_step(action=ANSWER, terminated=True, answer_scores={"em": 1.0}))
    assert caught.value.args == ("the env reported no 'f1' answer score (got ['em'])",)


@pytest.mark.parametrize(
    ("turn", "malformed", "value"),
    [(1, 0, 0.0), (4, 0, 0.0), (4, 1, 0.75 - 1.0), (4, 3, 0.25 - 1.0), (5, 4, 0.2 - 1.0)],
)
def test_outcome_is_the_score_when_always_well_formed_else_the_well_formed_fraction_minus_one(turn, malformed, value):
    final = _step(turn=turn, action=ANSWER, terminated=True, answer_scores=SCORES, episode_malformed=malformed)
    assert outcome_agent_r1(final) == pytest.approx(value)  # EM by default
    assert outcome_agent_r1(_step(turn=turn, episode_malformed=malformed)) == 0.0  # nothing before the end


@pytest.mark.parametrize(
    ("before", "after", "gamma", "value"), [(0.0, 0.5, 1.0, 0.5), (0.5, 1.0, 0.9, 0.4), (1.0, 1.0, 0.5, -0.5)]
)
def test_shaping_by_hand(before, after, gamma, value):
    assert shaping(_step(potential_before=before, potential_after=after), gamma) == pytest.approx(value)


def test_make_rubric_accepts_enums_and_integer_gammas():
    rubric = make_rubric(Preset.PROCESS, answer_metric=AnswerMetric.EM, shaping_gamma=1)
    assert [t.name for t in rubric.terms][-1] == "shaping" and rubric.terms[-1].bounds == (0.0, 1.0)
    final = _step(action=ANSWER, terminated=True, answer_scores=SCORES)
    assert rubric.score(final)[1]["answer"] == 0.0  # EM, not the default F1
    with pytest.raises(ValueError) as caught:
        make_rubric(shaping_gamma=True)
    assert str(caught.value) == "shaping_gamma must be a number in (0, 1] or None (got True)"


def test_weights_override_by_name():
    rubric = make_rubric("process", weights={"format": 0.5, "answer": 2.0})
    assert {t.name: t.weight for t in rubric.terms} == {
        "format": 0.5,
        "evidence": 0.2,
        "repeat": 0.05,
        "step_cost": 0.01,
        "answer": 2.0,
    }
    with pytest.raises(KeyError, match="unknown reward terms"):
        make_rubric("outcome", weights={"format": 1.0})


def test_shaping_is_undiscounted_by_default():
    assert shaping(_step(potential_before=0.25, potential_after=0.75)) == 0.5


@pytest.mark.parametrize(("terminated", "found", "value"), [(True, 0.5, 0.5), (True, 0.0, 0.0), (False, 1.0, 0.0)])
def test_evidence_at_answer_pays_the_episode_s_evidence_on_the_answer_only(terminated, found, value):
    from agent_gym.rewards import evidence_at_answer

    t = Transition(
        turn=3, action=ParsedAction("x"), terminated=terminated, potential_before=found, potential_after=found
    )
    assert evidence_at_answer(t) == value

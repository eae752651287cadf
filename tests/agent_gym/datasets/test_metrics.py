"""Answer metrics against hand-computed cases (HotpotQA's official rules)."""

from __future__ import annotations

import math

import pytest

from agent_gym.datasets.metrics import exact_match, f1_score, normalize_answer, score_answer, substring_match


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("  an   Apple, a day! ", "apple day"),
        ("Theatre of the Absurd", "theatre of absurd"),  # "the" inside "theatre" is kept
        ("U.S.A.", "usa"),
        ("rock-'n'-roll", "rocknroll"),
        ("", ""),
        ("A", ""),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_exact_match_uses_normalisation_and_aliases() -> None:
    assert exact_match("the Eiffel Tower.", "Eiffel Tower") == 1.0
    assert exact_match("Eiffel", "Eiffel Tower") == 0.0
    assert exact_match("NYC", ["New York City", "NYC"]) == 1.0
    assert exact_match("Paris, France", ["Paris"]) == 0.0


def test_f1_hand_computed() -> None:
    # pred tokens {eiffel, tower, in, paris}, gold {eiffel, tower}: P = 2/4, R = 2/2, F1 = 2/3
    assert math.isclose(f1_score("Eiffel Tower in Paris", "the Eiffel Tower"), 2 / 3)
    # pred {new, york}, gold {new, york, city}: P = 1, R = 2/3, F1 = 0.8
    assert math.isclose(f1_score("New York", "New York City"), 0.8)
    # tokens count with multiplicity: pred {red: 2}, gold {red: 1}: P = 1/2, R = 1
    assert math.isclose(f1_score("red red", "red"), 2 / 3)
    assert f1_score("Berlin", "Paris") == 0.0


def test_f1_is_maximised_over_aliases() -> None:
    assert math.isclose(f1_score("New York", ["Big Apple", "New York City"]), 0.8)
    assert f1_score("Big Apple", ["Big Apple", "New York City"]) == 1.0


def test_f1_official_yes_no_rule() -> None:
    assert f1_score("yes", "no") == 0.0
    assert f1_score("yes", "yes") == 1.0
    # "yes it is" shares the token "yes" with the gold "yes", but the official rule zeroes it
    assert f1_score("yes it is", "yes") == 0.0
    assert f1_score("noanswer", "no answer") == 0.0


def test_substring_match() -> None:
    assert substring_match("It was the Eiffel Tower, in Paris", "Eiffel Tower") == 1.0
    assert substring_match("Eiffel", "Eiffel Tower") == 0.0
    # gaming: naming both candidates of a comparison question scores
    assert substring_match("Bram Oosterveld or Odile Marchetti", "Bram Oosterveld") == 1.0
    # a gold answer that normalises to nothing never matches
    assert substring_match("anything", ["the"]) == 0.0


def test_score_answer_reports_all_three() -> None:
    scores = score_answer("the River Lisse", ("River Lisse", "Lisse"))
    assert scores == {"em": 1.0, "f1": 1.0, "substring": 1.0}
    scores = score_answer("Lisse river valley", ("River Lisse",))
    assert scores["em"] == 0.0
    assert math.isclose(scores["f1"], 2 * (2 / 3) * 1 / (2 / 3 + 1))  # P = 2/3, R = 1
    assert scores["substring"] == 0.0


def test_no_gold_answer_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one gold answer"):
        exact_match("x", [])

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


# ---------------------------------------------------------------------------- the official script's rules (issue 16)
# HotpotQA's hotpot_evaluate_v1.py lower-cases, then drops ASCII punctuation, then the words a/an/the, then
# collapses whitespace; F1 counts tokens as a multiset (collections.Counter), and a prediction or gold answer
# that normalises to yes/no/noanswer scores F1 0 unless the two normalise to the same string.


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The-End", "theend"),  # punctuation goes first, so "the" is no longer a word of its own
        ("THE Beatles", "beatles"),  # lower-cased before the articles are dropped
        ("an anthem, a theory", "anthem theory"),  # articles only as whole words
        ("New\tYork\n  City ", "new york city"),  # any whitespace run is one space
        ("3.14", "314"),  # the decimal point is punctuation too
        ("1,000", "1000"),
        ("Zürich–Genève", "zürich–genève"),  # only ASCII punctuation is dropped; the en dash stays
        ("ÉCOLE", "école"),
    ],
)
def test_normalisation_order_and_scope_follow_the_official_script(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_f1_counts_tokens_as_a_multiset() -> None:
    # A set-based F1 disagrees with every case below.
    # pred {red: 2}, gold {red: 2, blue: 1}: overlap 2, P = 2/2, R = 2/3, F1 = 0.8 (sets: overlap 1 -> 0.4 or 2/3)
    assert math.isclose(f1_score("red red", "red red blue"), 0.8)
    # pred {paris: 1}, gold {paris: 2}: P = 1, R = 1/2, F1 = 2/3 (sets of tokens: 1.0)
    assert math.isclose(f1_score("Paris", "Paris Paris"), 2 / 3)
    # "New York, New York" vs "New York, New York City": overlap 4, P = 4/4, R = 4/5, F1 = 8/9 (sets: 2 shared -> 4/9)
    assert math.isclose(f1_score("New York, New York", "New York, New York City"), 8 / 9)


@pytest.mark.parametrize(
    ("prediction", "gold", "f1"),
    [
        ("Yes.", "yes", 1.0),  # the special words are compared after normalisation
        ("no way", "no", 0.0),  # the gold is special and the strings differ: 0 despite the shared token
        ("no", "no way", 0.0),  # the prediction is special
        ("noanswer", "noanswer", 1.0),
        ("no answer", "noanswer", 0.0),
        ("yes and no", "yes and no", 1.0),  # neither side is exactly a special word
    ],
)
def test_f1_special_answers_follow_the_official_script(prediction: str, gold: str, f1: float) -> None:
    assert f1_score(prediction, gold) == f1


def test_answers_that_normalise_to_nothing() -> None:
    # The official script compares normalised strings for EM, so "" equals "the"; its F1 has no common token: 0.
    assert exact_match("", "the") == 1.0
    assert f1_score("", "the") == 0.0
    assert f1_score("", "Paris") == 0.0 and exact_match("", "Paris") == 0.0
    # substring match ignores gold answers that normalise to nothing (else every prediction would match)
    assert substring_match("", "the") == 0.0


def test_exact_match_compares_whole_normalised_strings() -> None:
    assert exact_match("3.14", "314") == 1.0  # the official normalisation drops the decimal point
    assert exact_match("The Who", "who") == 1.0
    assert exact_match("Who", "The Who band") == 0.0


def test_no_gold_answer_is_an_error_in_every_metric() -> None:
    for metric in (exact_match, f1_score, substring_match, score_answer):
        with pytest.raises(ValueError, match=r"^at least one gold answer is needed$"):
            metric("x", [])

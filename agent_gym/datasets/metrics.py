"""Answer metrics of multi-hop QA: the official HotpotQA normalisation, EM, F1, substring.

All three are maximised over every gold answer and alias.

* :func:`normalize_answer` - lower-case, drop punctuation, drop the articles
  *a*, *an*, *the*, collapse whitespace (the HotpotQA / SQuAD evaluation rule).
* :func:`exact_match` - normalised strings are equal.
* :func:`f1_score` - token F1 over normalised tokens, with the official rule
  that ``yes``, ``no`` and ``noanswer`` score 0 unless matched exactly.
* :func:`substring_match` - a normalised gold answer occurs inside the
  normalised prediction (the metric Agent-R1's code reports as "acc"). It is
  easy to game by listing candidates; report it, do not train on it.

Example:
    >>> exact_match("The Eiffel Tower!", ["eiffel tower"])
    1.0
    >>> round(f1_score("Eiffel Tower in Paris", ["the Eiffel Tower"]), 3)
    0.667
    >>> f1_score("yes", ["no"])
    0.0
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

__all__ = ["exact_match", "f1_score", "normalize_answer", "score_answer", "substring_match"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_SPECIAL = frozenset({"yes", "no", "noanswer"})


def normalize_answer(text: str) -> str:
    """Lower-case, strip ASCII punctuation and articles, and collapse whitespace."""
    text = text.lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(answers: str | Iterable[str]) -> list[str]:
    golds = [answers] if isinstance(answers, str) else list(answers)
    if not golds:
        raise ValueError("at least one gold answer is needed")
    return golds


def _f1_one(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _SPECIAL or ref in _SPECIAL) and pred != ref:
        return 0.0
    common = Counter(pred.split()) & Counter(ref.split())
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred.split())
    recall = same / len(ref.split())
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, answers: str | Iterable[str]) -> float:
    """1.0 if the normalised prediction equals a normalised gold answer, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _golds(answers)))


def f1_score(prediction: str, answers: str | Iterable[str]) -> float:
    """The best token F1 of ``prediction`` against any gold answer (official HotpotQA rule)."""
    return max(_f1_one(prediction, g) for g in _golds(answers))


def substring_match(prediction: str, answers: str | Iterable[str]) -> float:
    """1.0 if some non-empty normalised gold answer occurs in the normalised prediction."""
    pred = normalize_answer(prediction)
    return float(any((g := normalize_answer(gold)) and g in pred for gold in _golds(answers)))


def score_answer(prediction: str, answers: str | Iterable[str]) -> dict[str, float]:
    """``{"em", "f1", "substring"}`` of ``prediction`` against the gold answers."""
    golds = _golds(answers)
    return {
        "em": exact_match(prediction, golds),
        "f1": f1_score(prediction, golds),
        "substring": substring_match(prediction, golds),
    }

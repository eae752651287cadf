"""The one table of evaluation metrics: :data:`METRICS`.

Every reader of evaluation results takes its metrics from here: the
per-question values (:meth:`~agent_trainers.evaluation.records.EpisodeRecord.metric`),
the summaries (:func:`~agent_trainers.evaluation.stats.summarize_records`, ``summary.json``),
the Table-3 report, the paired comparison and its change statement
(:mod:`~agent_trainers.evaluation.compare`), the training run's plots and its
console table. Adding a metric is one row here.

==================  ==========  =================  ==============  =====================================
metric              better      aggregated         may be absent   shown in
==================  ==========  =================  ==============  =====================================
em                  higher      mean, all          env may lack    compare, statement, plot, console
f1                  higher      mean, all          env may lack    compare, statement, plot, console
substring           higher      mean, all          env may lack    compare
answer_rate         higher      mean, all          no              compare, statement, console
tool_call_rate      neither     mean, all          no              compare, statement, plot, console
tool_calls          neither     mean, all          no              -
turns               neither     mean, all          no              console
evidence_recall     higher      mean, present      yes             compare
format_error_rate   lower       mean, present      yes             compare, statement
reward              higher      mean, all          no              plot, console
answer_words        neither     mean, present      yes             -
query_words         neither     mean, present      yes             -
query_copied        neither     mean, present      yes             -
==================  ==========  =================  ==============  =====================================

The last three say how the agent works rather than how well (the results
pages' "what RL changed"): the final answer's length in words (absent when it
gave none), and over the queries it wrote (tool calls with a ``query``
argument: a search's keywords, an SQL statement; absent when it wrote none)
their mean length in words and the share that copy a span of the question
word for word (case and punctuation aside; a search query copied from the
question is the untrained agent's habit).

The answer scores (``em``, ``f1``, ``substring``) are the env's own: an
unanswered question scores 0 (a missing answer is a wrong one), an env that
does not report one leaves it absent, and an answered episode that lacks one
the env names is an error. An absent value is absent - never 0.0.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "ANSWER_METRICS",
    "METRICS",
    "Aggregation",
    "Direction",
    "Metric",
    "View",
    "copies_a_span",
    "metric_spec",
    "shown_in",
]


class Direction(StrEnum):
    """Which way a metric improves."""

    HIGHER = "higher"
    """Higher is better."""
    LOWER = "lower"
    """Lower is better."""
    NEITHER = "neither"
    """Descriptive (how the agent works, not how well)."""


class Aggregation(StrEnum):
    """How per-question values become a method's figure (each with a bootstrap interval over questions)."""

    MEAN = "mean"
    """The mean over every question (each has a value)."""
    MEAN_OF_PRESENT = "mean_of_present"
    """The mean over the questions that have a value (e.g. tasks with gold evidence); absent when none has."""


class View(StrEnum):
    """Where a metric is shown besides ``summary.json`` (which holds every metric)."""

    COMPARE = "compare"
    """A column of the comparison table of several methods."""
    STATEMENT = "statement"
    """Looked at by the change statement ("SFT changed f1 +0.085 [...]")."""
    PLOT = "plot"
    """A panel of the training run's held-aside eval plot."""
    CONSOLE = "console"
    """A column of ``agent-r1 train``'s console table."""


@dataclass(frozen=True)
class Metric:
    """One row of the table.

    Attributes:
        name: The key in summaries, records and ``metrics.jsonl``.
        title: Its column title in the console table.
        direction: Which way it improves.
        aggregation: How per-question values are combined.
        may_be_absent: A question (or a whole method or env) may have no value; it is then left out, never 0.0.
        answer: An answer score reported by the env (``info["metrics"]["answer_<name>"]``), also per question type.
        rate: A fraction in [0, 1] (three decimals; other metrics get two).
        views: Where it is shown.
        value: The per-question value of a record (``None``: absent); answer scores come from ``record.scores``.
    """

    name: str
    title: str
    direction: Direction
    aggregation: Aggregation
    may_be_absent: bool
    answer: bool
    rate: bool
    views: frozenset[View]
    value: Callable[[Any], float | None] | None = None

    @property
    def digits(self) -> int:
        """Decimals when shown."""
        return 3 if self.rate else 2


def _format_error_rate(record: Any) -> float | None:
    if record.format_errors is None or record.model_turns == 0:
        return None
    return record.format_errors / record.model_turns


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _answer_words(record: Any) -> float | None:
    return None if record.answer is None else float(len(_words(record.answer)))


def _query_words(record: Any) -> float | None:
    queries = record.queries()
    return sum(len(_words(q)) for q in queries) / len(queries) if queries else None


def copies_a_span(query: str, question: str) -> bool:
    """Whether ``query``'s words (lower-cased, punctuation dropped) occur consecutively in ``question``'s.

    Example:
        >>> copies_a_span("the Labrador Retriever", "Which is a gun dog, the Labrador Retriever or the Pug?")
        True
        >>> copies_a_span("Labrador dog", "Which is a gun dog, the Labrador Retriever or the Pug?")
        False
    """
    q, text = _words(query), _words(question)
    return bool(q) and any(text[i : i + len(q)] == q for i in range(len(text) - len(q) + 1))


def _query_copied(record: Any) -> float | None:
    queries = record.queries()
    return sum(copies_a_span(q, record.question) for q in queries) / len(queries) if queries else None


def _answer(name: str, title: str, views: set[View]) -> Metric:
    return Metric(name, title, Direction.HIGHER, Aggregation.MEAN, True, True, True, frozenset(views))


_C, _S, _P, _K = View.COMPARE, View.STATEMENT, View.PLOT, View.CONSOLE
_MEAN, _PRESENT = Aggregation.MEAN, Aggregation.MEAN_OF_PRESENT

METRICS: tuple[Metric, ...] = (
    _answer("em", "EM", {_C, _S, _P, _K}),
    _answer("f1", "F1", {_C, _S, _P, _K}),
    _answer("substring", "substring", {_C}),
    Metric(
        "answer_rate", "answer rate", Direction.HIGHER, _MEAN, False, False, True, frozenset({_C, _S, _K}),
        lambda r: float(r.answered),
    ),
    Metric(
        "tool_call_rate", "tool-call rate", Direction.NEITHER, _MEAN, False, False, True,
        frozenset({_C, _S, _P, _K}), lambda r: float(r.tool_calls > 0),
    ),
    Metric(
        "tool_calls", "tool calls", Direction.NEITHER, _MEAN, False, False, False, frozenset(),
        lambda r: float(r.tool_calls),
    ),
    Metric(
        "turns", "turns", Direction.NEITHER, _MEAN, False, False, False, frozenset({_K}),
        lambda r: float(r.model_turns),
    ),
    Metric(
        "evidence_recall", "evidence recall", Direction.HIGHER, _PRESENT, True, False, True, frozenset({_C}),
        lambda r: r.evidence_recall,
    ),
    Metric(
        "format_error_rate", "format-error rate", Direction.LOWER, _PRESENT, True, False, True,
        frozenset({_C, _S}), _format_error_rate,
    ),
    Metric(
        "reward", "reward", Direction.HIGHER, _MEAN, False, False, False, frozenset({_P, _K}),
        lambda r: r.reward,
    ),
    Metric(
        "answer_words", "answer words", Direction.NEITHER, _PRESENT, True, False, False, frozenset(),
        _answer_words,
    ),
    Metric(
        "query_words", "query words", Direction.NEITHER, _PRESENT, True, False, False, frozenset(), _query_words,
    ),
    Metric(
        "query_copied", "queries copied", Direction.NEITHER, _PRESENT, True, False, True, frozenset(),
        _query_copied,
    ),
)  # fmt: skip
"""The metrics, in the order summaries and tables show them (answer scores first)."""

_BY_NAME = {m.name: m for m in METRICS}

ANSWER_METRICS: tuple[str, ...] = tuple(m.name for m in METRICS if m.answer)
"""The answer scores of the QA envs; another env may report only some of them (the rest are absent)."""


def metric_spec(name: str) -> Metric:
    """The table's row of ``name``; a name it does not list (another env's answer score) gets a plain answer row."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    return Metric(name, name, Direction.HIGHER, Aggregation.MEAN, True, True, False, frozenset())


def shown_in(view: View) -> tuple[str, ...]:
    """The names of the metrics shown in ``view``, in table order."""
    return tuple(m.name for m in METRICS if view in m.views)

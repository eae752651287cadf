"""The one metrics table: each metric's direction, aggregation and absence, and every reader takes it from there."""

from __future__ import annotations

import pytest

from agent_trainers.evaluation import METRICS, Aggregation, Direction, EvalSummary, View, metric_spec
from agent_trainers.evaluation.compare import COMPARE_METRICS, STATEMENT_METRICS
from agent_trainers.evaluation.metrics import ANSWER_METRICS, shown_in
from agent_trainers.evaluation.stats import summarize_records
from agent_trainers.pipeline.report import print_table
from tests.agent_trainers.evaluation.test_records import make


def test_the_table_states_each_metric_once_with_its_direction_aggregation_and_absence():
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    assert {m.name: m.direction for m in METRICS} == {
        "em": Direction.HIGHER,
        "f1": Direction.HIGHER,
        "substring": Direction.HIGHER,
        "answer_rate": Direction.HIGHER,
        "tool_call_rate": Direction.NEITHER,
        "tool_calls": Direction.NEITHER,
        "turns": Direction.NEITHER,
        "evidence_recall": Direction.HIGHER,
        "format_error_rate": Direction.LOWER,
        "reward": Direction.HIGHER,
        "answer_words": Direction.NEITHER,
        "query_words": Direction.NEITHER,
        "query_copied": Direction.NEITHER,
    }
    behaviour = ["answer_words", "query_words", "query_copied"]  # how the agent works; absent when not observed
    present = ["evidence_recall", "format_error_rate", *behaviour]
    assert [m.name for m in METRICS if m.aggregation is Aggregation.MEAN_OF_PRESENT] == present
    assert [m.name for m in METRICS if m.may_be_absent] == [*ANSWER_METRICS, *present]
    assert ANSWER_METRICS == ("em", "f1", "substring")
    for m in METRICS:  # one source per metric: the env's answer score, or the table's own per-question value
        assert (m.value is None) == m.answer, m.name


def test_the_readers_views():
    assert COMPARE_METRICS == shown_in(View.COMPARE) == (
        "em", "f1", "substring", "answer_rate", "tool_call_rate", "evidence_recall", "format_error_rate",
    )  # fmt: skip
    assert STATEMENT_METRICS == ("em", "f1", "answer_rate", "tool_call_rate", "format_error_rate")
    assert shown_in(View.PLOT) == ("em", "f1", "tool_call_rate", "reward")
    assert shown_in(View.CONSOLE) == ("em", "f1", "answer_rate", "tool_call_rate", "turns", "reward")
    assert metric_spec("em").digits == 3 and metric_spec("reward").digits == 2 and metric_spec("turns").digits == 2
    other = metric_spec("exact")  # another env's answer score: a plain answer row
    assert other.answer and other.may_be_absent and other.digits == 2


def test_summaries_follow_the_table_order_and_aggregations():
    records = [make(0, em=1.0, recall=None, fmt=None), make(1, em=0.0, recall=0.5, fmt=1)]
    summary = summarize_records(records, resamples=100)
    table = [m.name for m in METRICS if m.name in summary]
    assert list(summary) == table  # answer scores first, then the table's order
    assert summary["evidence_recall"].n == 1 and summary["format_error_rate"].n == 1  # means of the present ones
    broken = make(2)
    broken.scores.pop("f1")  # a mean over every question that one question lacks: an error, not a smaller mean
    with pytest.raises(ValueError, match="f1 is a mean over every question, but 1 of 3 have none"):
        summarize_records([*records, broken], resamples=100)


def test_the_summary_round_trips_and_reads_metrics_as_attributes():
    summary = EvalSummary.from_records([make(0, em=1.0, recall=None), make(1, recall=None)], resamples=100)
    assert EvalSummary.from_json(summary.to_json()) == summary
    assert summary.em == 0.5 and summary.evidence_recall is None and "evidence_recall" not in summary.means()
    with pytest.raises(AttributeError):
        _ = summary.acc


def test_the_console_table_reads_the_table(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one line per row: no title wrapped
    summary = EvalSummary.from_records([make(0, em=1.0, f1=0.5)], resamples=100)
    absent = EvalSummary(1, {k: v for k, v in summary.metrics.items() if k != "em"})
    print_table([("final", summary), ("other env", absent)], title="t")
    out = capsys.readouterr().out
    for m in METRICS:
        assert (m.title in out) == (View.CONSOLE in m.views), m.name
    assert "1.000" in out and "0.500" in out and "—" in out  # absent is shown as absent, not 0

"""Per-question values behind each metric; absent stays absent (never 0.0); summaries by hand."""

from __future__ import annotations

import json

import pytest

from agent_trainers.evaluation import EpisodeRecord, MissingMetricError, summarize_by_type, summarize_records
from agent_trainers.evaluation.records import answer_scores


def make(i, em=0.0, f1=0.0, *, answered=True, turns=2, calls=1, fmt=0, recall=0.5, qtype="bridge", sub=None):
    scores = {"em": em, "f1": f1} | ({"substring": sub} if sub is not None else {})
    return EpisodeRecord(i, f"t{i}", f"q{i}", ["gold"], qtype, "a" if answered else None, answered, scores,
                         turns, calls, fmt, recall, 0.1, "answer" if answered else "max_turns")  # fmt: skip


def test_each_metric_of_one_record():
    r = make(0, em=1.0, f1=1.0, turns=4, calls=2, fmt=1, recall=0.5)
    assert [r.metric(m) for m in ("em", "answer_rate", "tool_call_rate", "turns", "tool_calls")] == [1, 1, 1, 4, 2]
    assert (r.metric("format_error_rate"), r.metric("evidence_recall"), r.metric("reward")) == (0.25, 0.5, 0.1)
    with pytest.raises(KeyError, match="unknown metric 'acc'"):
        r.metric("acc")


def test_absent_values_are_none():
    assert make(0, recall=None).metric("evidence_recall") is None
    assert make(0, fmt=None).metric("format_error_rate") is None
    assert make(0, turns=0, fmt=0).metric("format_error_rate") is None  # no model turn: no rate


def with_searches(record, *queries, malformed=()):
    """``record`` with a trajectory whose assistant turns searched ``queries`` (JSON-string arguments, as the
    engine writes them), plus a calculator call (no query) and ``malformed`` raw argument strings."""
    calls = [{"function": {"name": "search", "arguments": json.dumps({"query": q})}} for q in queries]
    calls += [{"function": {"name": "calculator", "arguments": {"expression": "1+1"}}}]
    calls += [{"function": {"name": "search", "arguments": raw}} for raw in malformed]
    messages = [{"role": "user", "content": record.question}]
    messages += [{"role": "assistant", "content": "", "tool_calls": [c]} for c in calls]
    messages += [{"role": "tool", "content": '{"query": "not the model\'s"}'}]
    record.trajectory = {"messages": messages}
    return record


def test_behaviour_metrics_by_hand():
    r = make(0)
    r.question = "Who is older, Carrie Akre or Shifty Shellshock?"
    r.answer = "Carrie Akre"
    with_searches(r, "Carrie Akre", "shifty shellshock?", "Carrie Akre born", malformed=("{not json",))
    assert r.queries() == ["Carrie Akre", "shifty shellshock?", "Carrie Akre born"]  # the model's, in order
    assert r.metric("answer_words") == 2
    assert r.metric("query_words") == pytest.approx((2 + 2 + 3) / 3)
    assert r.metric("query_copied") == pytest.approx(2 / 3)  # case and punctuation aside; "born" is not there
    silent = make(1, answered=False)  # no answer, no trajectory: absent, not 0
    assert silent.queries() == [] and [silent.metric(m) for m in ("answer_words", "query_words")] == [None, None]
    assert with_searches(make(2)).metric("query_copied") is None  # a calculator call is not a query
    s = summarize_records([r, silent, make(3)], resamples=100)
    assert s["query_words"].n == 1 and s["answer_words"].n == 2 and s["answer_words"].mean == 1.5  # "a": 1 word


def test_summary_by_hand():
    records = [
        make(0, em=1.0, f1=1.0, recall=1.0, calls=2),
        make(1, em=0.0, f1=0.5, recall=0.5, calls=0),
        make(2, em=0.0, f1=0.0, recall=None, answered=False, fmt=2),  # no gold evidence for this task
        make(3, em=1.0, f1=1.0, recall=0.0, qtype="comparison"),
    ]
    s = summarize_records(records, resamples=200)
    assert s["em"].mean == 0.5 and s["f1"].mean == pytest.approx(2.5 / 4)
    assert s["evidence_recall"].mean == pytest.approx(1.5 / 3) and s["evidence_recall"].n == 3
    assert (
        s["answer_rate"].mean == 0.75 and s["tool_call_rate"].mean == 0.75 and s["tool_calls"].mean == 1.0
    )  # (2 + 0 + 1 + 1) / 4
    assert s["format_error_rate"].mean == pytest.approx((0 + 0 + 1.0 + 0) / 4)
    assert "substring" not in s  # the env reported none: absent, not 0
    by_type = summarize_by_type(records, resamples=200)
    assert by_type["bridge"]["em"].mean == pytest.approx(1 / 3) and by_type["bridge"]["em"].n == 3
    assert by_type["comparison"]["f1"].mean == 1.0


def test_metrics_no_question_has_are_left_out():
    s = summarize_records([make(0, recall=None, fmt=None), make(1, recall=None, fmt=None)])
    assert "evidence_recall" not in s and "format_error_rate" not in s
    with pytest.raises(ValueError, match="at least one record"):
        summarize_records([])
    assert summarize_by_type([make(0, qtype=None)]) == {}


def test_answer_scores():
    assert answer_scores({}, False, ("em", "f1"), "t") == {"em": 0.0, "f1": 0.0}  # no answer is a wrong answer
    metrics = {"answer_em": 1.0, "answer_f1": 1.0, "turns": 2.0}
    assert answer_scores(metrics, True, ("em", "f1"), "t") == {"em": 1.0, "f1": 1.0}
    with pytest.raises(MissingMetricError, match="lack 'answer_substring'"):
        answer_scores(metrics, True, ("em", "substring"), "t")


def test_records_round_trip_and_refuse_unknown_fields():
    r = make(0, em=1.0)
    assert EpisodeRecord.from_dict(r.to_dict()) == r
    with pytest.raises(ValueError, match="unknown \\['acc'\\]"):
        EpisodeRecord.from_dict({**r.to_dict(), "acc": 1.0})

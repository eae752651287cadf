"""Several methods on the same questions: a table with intervals, and what changed between two of them.

Example:
    >>> runs = [load_run(f"runs/demo/eval/{p}") for p in ("before", "after_sft", "final")]  # doctest: +SKIP
    >>> print(comparison_markdown(runs))  # doctest: +SKIP
    >>> print(change_statement("SFT", runs[1], runs[0]))  # doctest: +SKIP
    SFT changed f1 +0.085 [+0.031, +0.142], answer_rate +0.900 [...] (vs base tool call; 30 questions, ...)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_trainers.evaluation.metrics import View, metric_spec, shown_in
from agent_trainers.evaluation.outputs import EPISODES, SUMMARY, markdown_row, read_records
from agent_trainers.evaluation.records import EpisodeRecord
from agent_trainers.evaluation.stats import PairedComparison, paired_difference, summarize_records

__all__ = [
    "COMPARE_METRICS",
    "Run",
    "change_statement",
    "changed_answers",
    "comparison_markdown",
    "comparison_rows",
    "load_run",
    "paired",
]

COMPARE_METRICS = shown_in(View.COMPARE)
"""Columns of the comparison table (the metrics table's ``compare`` view)."""
STATEMENT_METRICS = shown_in(View.STATEMENT)
"""Metrics a change statement looks at (the metrics table's ``statement`` view)."""


@dataclass
class Run:
    """One finished evaluation folder.

    Attributes:
        label: Its row name.
        folder: Where it is.
        summary: ``summary.json``.
        records: The per-question records.
    """

    label: str
    folder: Path
    summary: dict[str, Any]
    records: list[EpisodeRecord]


def load_run(folder: str | Path) -> Run:
    """Read a finished evaluation folder.

    Raises:
        FileNotFoundError: It has no ``summary.json``.
    """
    path = Path(folder)
    if not (path / SUMMARY).is_file():
        raise FileNotFoundError(f"{path} has no {SUMMARY}: not a finished evaluation")
    summary = json.loads((path / SUMMARY).read_text(encoding="utf-8"))
    return Run(summary["label"], path, summary, read_records(path / EPISODES))


def _cells(run: Run, metrics: Sequence[str]) -> list[str]:
    summary = summarize_records(run.records)
    return [summary[m].format(metric_spec(m).digits) if m in summary else "—" for m in metrics]


def comparison_rows(runs: Sequence[Run], metrics: Sequence[str] = COMPARE_METRICS) -> list[list[str]]:
    """Header, then one row per run: ``label, metric cells..., n`` (``—`` where a metric is absent).

    The intervals are recomputed from the per-question records (seed 0, as ``summary.json``).
    """
    header = ["method", *metrics, "n"]
    return [header] + [[r.label, *_cells(r, metrics), str(len(r.records))] for r in runs]


def comparison_markdown(runs: Sequence[Run], metrics: Sequence[str] = COMPARE_METRICS) -> str:
    """The comparison table in Markdown (mean [bootstrap 95% interval] per cell)."""
    rows = comparison_rows(runs, metrics)
    lines = [markdown_row(rows[0]), "|---" * len(rows[0]) + "|"]
    return "\n".join(lines + [markdown_row(r) for r in rows[1:]]) + "\n"


def _key(r: EpisodeRecord) -> str:
    return f"{r.task_index}:{r.task_id}"


def paired(a: Run, b: Run, metric: str, *, seed: int = 0) -> PairedComparison | None:
    """``a - b`` on the questions both have, or ``None`` when either lacks the metric."""
    va = {_key(r): v for r in a.records if (v := r.metric(metric)) is not None}
    vb = {_key(r): v for r in b.records if (v := r.metric(metric)) is not None}
    if not (set(va) & set(vb)):
        return None
    return paired_difference(va, vb, metric, seed=seed)


def changed_answers(a: Run, b: Run) -> tuple[int, int]:
    """``(questions whose final answer differs, questions both have)``."""
    answers = {_key(r): r.answer for r in b.records}
    shared = [r for r in a.records if _key(r) in answers]
    return sum(1 for r in shared if r.answer != answers[_key(r)]), len(shared)


def change_statement(what: str, a: Run, b: Run, metrics: Sequence[str] = STATEMENT_METRICS) -> str:
    """One plain line: the metrics whose paired difference ``a - b`` has a 95% interval excluding 0, or none.

    Example: ``"SFT changed f1 +0.085 [+0.031, +0.142], answer_rate +0.900 [+0.800, +1.000]
    (vs base tool call; 30 questions, 27 answers changed)"``.
    """
    comparisons = [c for m in metrics if (c := paired(a, b, m)) is not None]
    moved = [c for c in comparisons if c.significant]
    changed, n = changed_answers(a, b)
    context = f"(vs {b.label}; {n} questions, {changed} answers changed)"
    if moved:
        parts = [f"{c.metric} {c.difference.format(3, signed=True)}" for c in moved]
        return f"{what} changed {', '.join(parts)} {context}"
    main = next((c for c in comparisons if c.metric == "f1"), comparisons[0] if comparisons else None)
    detail = f"; f1 {main.difference.format(3, signed=True)}" if main is not None and main.metric == "f1" else ""
    return f"{what} changed no metric measurably (every 95% interval includes 0{detail}) {context}"

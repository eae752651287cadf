"""Printing evaluation results (rich tables): the console columns are the metrics table's ``console`` view."""

from __future__ import annotations

from collections.abc import Sequence

from agent_trainers.evaluation.metrics import View, metric_spec, shown_in
from agent_trainers.evaluation.summary import EvalSummary

__all__ = ["print_table"]


def print_table(rows: Sequence[tuple[str, EvalSummary]], title: str = "") -> None:
    """Print ``(phase, summary)`` rows as a table: one column per console metric (``—`` where absent)."""
    from rich.console import Console
    from rich.table import Table

    names = shown_in(View.CONSOLE)
    table = Table(title=title or None)
    table.add_column("phase", justify="left")
    for name in names:
        table.add_column(metric_spec(name).title, justify="right")
    table.add_column("episodes", justify="right")
    for phase, summary in rows:
        cells = [_cell(summary.mean(n), metric_spec(n).digits) for n in names]
        table.add_row(phase, *cells, str(summary.episodes))
    Console().print(table)


def _cell(mean: float | None, digits: int) -> str:
    return "—" if mean is None else f"{mean:.{digits}f}"

"""Printing evaluation results (rich tables)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["print_table"]


def print_table(rows: Sequence[tuple[str, Any]], title: str = "") -> None:
    """Print ``(phase, EvalResult)`` rows as a table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title or None)
    for col in ("phase", "reward", "EM", "F1", "tool-call rate", "answer rate", "turns", "episodes"):
        table.add_column(col, justify="right" if col != "phase" else "left")
    for phase, r in rows:
        table.add_row(
            phase,
            f"{r.reward:.3f}",
            f"{r.em:.3f}",
            f"{r.f1:.3f}",
            f"{r.tool_call_rate:.0%}",
            f"{r.answer_rate:.0%}",
            f"{r.turns:.2f}",
            str(r.episodes),
        )
    Console().print(table)

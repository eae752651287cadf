"""The paper's Table 3 from several evaluation folders: :func:`build_report`.

Rows are methods (each folder's label), columns the datasets (HotpotQA,
2Wiki, MuSiQue, then any other), then their average; each cell is the mean
of one metric (EM by default) with its bootstrap 95% interval, recomputed from
the folder's per-question records. Columns are marked in-domain or
out-of-domain (the paper trains on HotpotQA and 2Wiki; MuSiQue is
out-of-domain). The average is the mean of the dataset means (the paper's
"Avg."), shown only for rows that cover every column, with an interval that
resamples each dataset on its own.

Example::

    agent-r1 report runs/eval/hotpotqa-* runs/eval/2wiki-* runs/eval/musique-* --out runs/table3
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent_trainers.evaluation.metrics import metric_spec
from agent_trainers.evaluation.outputs import EPISODES, SPEC, SUMMARY, markdown_row, read_records
from agent_trainers.evaluation.stats import RESAMPLES, Interval, bootstrap_average, bootstrap_mean

__all__ = ["DATASET_NAMES", "PAPER_IN_DOMAIN", "Report", "build_report"]

DATASET_NAMES = {"hotpotqa": "HotpotQA", "2wikimultihopqa": "2Wiki", "musique": "MuSiQue"}
"""Column titles of the datasets the paper reports, in its order."""
PAPER_IN_DOMAIN = ("hotpotqa", "2wikimultihopqa")
"""The paper's training datasets (in-domain); every other column is out-of-domain."""


@dataclass
class Report:
    """A Table 3: rows = methods, columns = datasets, plus the average.

    Attributes:
        metric: The metric shown (e.g. ``em``).
        columns: Dataset keys, in column order.
        in_domain: Dataset keys marked in-domain.
        rows: ``label -> {dataset -> Interval}``, in row order.
        average: ``label -> Interval`` for rows that cover every column.
    """

    metric: str
    columns: list[str]
    in_domain: tuple[str, ...]
    rows: dict[str, dict[str, Interval]] = field(default_factory=dict)
    average: dict[str, Interval] = field(default_factory=dict)

    def title(self, dataset: str) -> str:
        """Column title, e.g. ``"HotpotQA (in-domain)"``."""
        domain = "in-domain" if dataset in self.in_domain else "out-of-domain"
        return f"{DATASET_NAMES.get(dataset, dataset)} ({domain})"

    def to_markdown(self, digits: int | None = None) -> str:
        """The table in Markdown, ``mean [low, high]`` per cell (``—`` where a row has no such evaluation).

        ``digits`` defaults to the metrics table's (three for a rate such as EM, two otherwise).
        """
        spec = metric_spec(self.metric)
        digits = spec.digits if digits is None else digits
        head = ["method", *(self.title(d) for d in self.columns), "average"]
        lines = [markdown_row(head), "|---" * len(head) + "|"]
        for label, cells in self.rows.items():
            values = [cells[d].format(digits) if d in cells else "—" for d in self.columns]
            avg = self.average[label].format(digits) if label in self.average else "—"
            lines.append(markdown_row([label, *values, avg]))
        counts = ", ".join(f"{DATASET_NAMES.get(d, d)} {self._n(d)}" for d in self.columns)
        better = "" if spec.direction == "neither" else f" ({spec.direction} is better)"
        note = (
            f"{self.metric}{better} on each dataset: mean [bootstrap 95% interval] over its questions ({counts}); "
            "average = mean of the dataset means."
        )
        return "\n".join(lines) + "\n\n" + note + "\n"

    def _n(self, dataset: str) -> str:
        ns = sorted({cells[dataset].n for cells in self.rows.values() if dataset in cells})
        return "/".join(str(n) for n in ns) + " questions"

    def to_csv(self) -> str:
        """Long format: ``method, dataset, domain, metric, mean, low, high, n`` (``dataset = average`` rows too)."""
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["method", "dataset", "domain", "metric", "mean", "low", "high", "n"])
        for label, cells in self.rows.items():
            for d in self.columns:
                if d in cells:
                    iv, domain = cells[d], "in-domain" if d in self.in_domain else "out-of-domain"
                    w.writerow([label, d, domain, self.metric, iv.mean, iv.low, iv.high, iv.n])
            if label in self.average:
                iv = self.average[label]
                w.writerow([label, "average", "", self.metric, iv.mean, iv.low, iv.high, iv.n])
        return buf.getvalue()


def _column_order(datasets: set[str]) -> list[str]:
    known = [d for d in DATASET_NAMES if d in datasets]
    return known + sorted(datasets - set(known))


QUESTION_KEYS = ("data_path", "split", "task_seed", "num_tasks")
"""The env kwargs that choose which questions an evaluation asks (with the spec's ``start`` and ``limit``)."""


def _questions(path: Path) -> dict[str, object]:
    """Which questions the evaluation in ``path`` asked, as its spec records them (absent keys are ``None``)."""
    spec = json.loads((path / SPEC).read_text(encoding="utf-8")) if (path / SPEC).is_file() else {}
    kwargs = spec.get("env_kwargs") or {}
    return {**{k: kwargs.get(k) for k in QUESTION_KEYS}, "start": spec.get("start", 0), "limit": spec.get("limit")}


def build_report(
    folders: Sequence[str | Path],
    *,
    metric: str = "em",
    in_domain: Sequence[str] = PAPER_IN_DOMAIN,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Report:
    """Build the table from evaluation folders (each written by :func:`~agent_trainers.evaluation.run_eval`).

    Raises:
        FileNotFoundError: A folder has no ``summary.json`` (an unfinished evaluation).
        ValueError: Two folders give the same method on the same dataset, a folder lacks ``metric``, or two
            folders of one column asked other questions (another data file, split, task range or limit).
    """
    values: dict[str, dict[str, list[float]]] = {}
    asked: dict[str, tuple[Path, dict[str, object]]] = {}  # dataset -> the first folder of its column
    for folder in folders:
        path = Path(folder)
        if not (path / SUMMARY).is_file():
            raise FileNotFoundError(f"{path} has no {SUMMARY}: not a finished evaluation")
        summary = json.loads((path / SUMMARY).read_text(encoding="utf-8"))
        label, dataset = summary["label"], summary["dataset"]
        records = read_records(path / EPISODES)
        got = [v for r in records if (v := r.metric(metric)) is not None] if records else []
        if not got:
            raise ValueError(f"{path}: no question has metric {metric!r}")
        row = values.setdefault(label, {})
        if dataset in row:
            raise ValueError(f"two evaluations of {label!r} on {dataset!r} (the second is {path})")
        row[dataset] = got
        first, questions = asked.setdefault(dataset, (path, _questions(path)))
        if (mine := _questions(path)) != questions:
            differ = ", ".join(f"{k} {questions[k]!r} vs {mine[k]!r}" for k in questions if questions[k] != mine[k])
            raise ValueError(
                f"the {dataset!r} column would mix evaluations of other questions: {first} and {path} differ in "
                f"{differ}; evaluate every method on the same questions"
            )
    columns = _column_order({d for row in values.values() for d in row})
    report = Report(metric, columns, tuple(in_domain))
    for label, row in values.items():
        report.rows[label] = {d: bootstrap_mean(v, resamples=resamples, seed=seed) for d, v in row.items()}
        if set(row) == set(columns):
            report.average[label] = bootstrap_average([row[d] for d in columns], resamples=resamples, seed=seed)
    return report

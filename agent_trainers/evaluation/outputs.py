"""An evaluation's folder: per-episode JSONL (append-only, resumable), summary JSON, CSV and Markdown.

::

    DIR/spec.json        what was evaluated (method, model, env, data, limits, seed); a resume must match it
    DIR/episodes.jsonl   one EpisodeRecord per line, appended as each question finishes (in task order at the end)
    DIR/summary.json     every metric with its bootstrap 95% interval, per question type too
    DIR/summary.csv      the same, one row per (scope, metric)
    DIR/summary.md       a Markdown table

An interrupted evaluation leaves ``episodes.jsonl`` with the finished
questions (a half-written last line is dropped on reading); running the same
evaluation again continues with the rest.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_gym.core.files import json_lines, write_atomic
from agent_trainers.evaluation.metrics import metric_spec
from agent_trainers.evaluation.records import EpisodeRecord
from agent_trainers.evaluation.stats import Interval

__all__ = [
    "EPISODES",
    "SPEC",
    "SUMMARY",
    "EvalFolder",
    "SpecMismatchError",
    "markdown_summary",
    "read_records",
]

SPEC, EPISODES, SUMMARY = "spec.json", "episodes.jsonl", "summary.json"


class SpecMismatchError(ValueError):
    """The folder holds an evaluation with other settings; continuing it would mix two evaluations."""


def read_records(path: str | Path) -> list[EpisodeRecord]:
    """The records of an ``episodes.jsonl``; a truncated last line (an interrupted write) is dropped.

    Raises:
        ValueError: A line other than the last is not a record (the message names it).
    """
    lines = read_lines(Path(path))
    records = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(EpisodeRecord.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError, ValueError) as exc:
            if n == len(lines):
                break  # the write that was interrupted
            raise ValueError(f"{path}:{n}: not an episode record ({exc})") from exc
    return records


def read_lines(path: Path) -> list[str]:
    """The file's JSON lines, split at ``"\\n"`` only; a last line cut inside a UTF-8 character (an interrupted
    write) loses only its tail.

    A record's text may hold U+2028, U+2029 or U+0085 unescaped (see
    :func:`~agent_gym.core.files.json_lines`): they are not line ends here.

    Raises:
        ValueError: Bytes that are not UTF-8 before the last line (the message names the file).
    """
    if not path.is_file():
        return []
    data = path.read_bytes()
    try:
        return json_lines(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        last = data.rfind(b"\n", 0, len(data) - 1) + 1
        if exc.start < last:
            raise ValueError(f"{path}: not UTF-8 at byte {exc.start} ({exc.reason})") from None
        return [*json_lines(data[:last].decode("utf-8")), data[last:].decode("utf-8", errors="replace")]


class EvalFolder:
    """Reads and writes one evaluation's folder.

    Args:
        path: The folder (created when needed).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def episodes(self) -> Path:
        """``episodes.jsonl``."""
        return self.path / EPISODES

    def start(self, spec: Mapping[str, Any], *, resume: bool) -> list[EpisodeRecord]:
        """Prepare the folder for ``spec``; return the records already done (none unless resuming).

        Raises:
            SpecMismatchError: Resuming a folder written with different settings.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        spec_path = self.path / SPEC
        spec = json.loads(json.dumps(spec))  # the JSON form, as it will be read back
        if resume and spec_path.is_file():
            old = json.loads(spec_path.read_text(encoding="utf-8"))
            if old != spec:
                changed = sorted(k for k in set(old) | set(spec) if old.get(k) != spec.get(k))
                raise SpecMismatchError(
                    f"{self.path} holds an evaluation with other settings ({', '.join(changed)} differ); "
                    "use another --out, or --overwrite to start it again"
                )
            done = read_records(self.episodes)
            self._rewrite(done)  # drops a half-written last line
            return done
        for name in (EPISODES, SUMMARY, "summary.csv", "summary.md"):
            (self.path / name).unlink(missing_ok=True)
        write_atomic(spec_path, json.dumps(spec, indent=2) + "\n")
        return []

    def rewrite(self, records: Sequence[EpisodeRecord]) -> None:
        """Replace ``episodes.jsonl`` with ``records`` (e.g. in task order once all are done)."""
        self._rewrite(records)

    def _rewrite(self, records: Sequence[EpisodeRecord]) -> None:
        """Replace the file atomically: a kill at any moment leaves the old records or the new, all of them."""
        write_atomic(self.episodes, "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in records))

    def append(self, record: EpisodeRecord) -> None:
        """Append one finished question (flushed at once, so an interruption keeps it)."""
        with self.episodes.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
            f.flush()

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """Write ``summary.json``, ``summary.csv`` and ``summary.md``."""
        write_atomic(self.path / SUMMARY, json.dumps(summary, indent=2) + "\n")
        table = io.StringIO(newline="")
        w = csv.writer(table)
        w.writerow(["scope", "metric", "mean", "low", "high", "n"])
        for scope, metrics in [("all", summary["metrics"]), *summary["by_type"].items()]:
            for name, iv in metrics.items():
                w.writerow([scope, name, iv["mean"], iv["low"], iv["high"], iv["n"]])
        write_atomic(self.path / "summary.csv", table.getvalue())
        write_atomic(self.path / "summary.md", markdown_summary(summary))


def _cell(name: str, iv: Mapping[str, float]) -> str:
    digits = metric_spec(name).digits
    return Interval(iv["mean"], iv["low"], iv["high"], int(iv["n"])).format(digits)


def markdown_summary(summary: Mapping[str, Any]) -> str:
    """A Markdown table of a summary: one row per metric (mean [95% interval], n), then per question type."""
    lines = [
        f"### {summary['label']} on {summary['dataset']} ({summary['episodes']} questions)",
        "",
        "| metric | mean [95% CI] | n |",
        "|---|---|---|",
    ]
    lines += [f"| {k} | {_cell(k, iv)} | {iv['n']} |" for k, iv in summary["metrics"].items()]
    if summary["by_type"]:
        names = list(next(iter(summary["by_type"].values())))
        lines += ["", "| type | n | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
        for t, metrics in summary["by_type"].items():
            n = next(iter(metrics.values()))["n"]
            lines.append(f"| {t} | {n} | " + " | ".join(_cell(k, metrics[k]) for k in names) + " |")
    return "\n".join(lines) + "\n"


def markdown_row(cells: Sequence[str]) -> str:
    """One Markdown table row; a ``|`` inside a cell (a run's label, say) is escaped and a line break becomes a
    space, so a cell can never add a column or end the table."""
    clean = [str(c).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ") for c in cells]
    return "| " + " | ".join(clean) + " |"

"""Loaders for the official multi-hop QA formats, into one :class:`QATask` record.

Supported layouts (detected from the first record of each file):

* HotpotQA, official: ``_id``, ``supporting_facts [[title, sent_id]]``,
  ``context [[title, [sentences]]]`` (distractor and fullwiki settings);
* HotpotQA, Hugging Face: ``id``, ``supporting_facts {title[], sent_id[]}``,
  ``context {title[], sentences[]}``;
* 2WikiMultihopQA, official: the HotpotQA official layout plus ``evidences``
  triples (``source`` is then ``"2wikimultihopqa"``);
* MuSiQue, official: ``paragraphs [{idx, title, paragraph_text, is_supporting}]``,
  ``question_decomposition``, ``answer_aliases``.

Each file may be a JSON list or JSON lines; a folder loads all its ``.json``
and ``.jsonl`` files in name order. Anything malformed raises
:class:`~agent_gym.datasets.records.DatasetFormatError` naming the file and
the record number.

Example:
    >>> tasks = load_qa("dev_distractor_sample_a_300.jsonl")  # doctest: +SKIP
    >>> tasks[0].question, tasks[0].answers, len(tasks[0].supporting)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from agent_gym.datasets.records import DatasetFormatError, Paragraph, QATask, SubQuestion

__all__ = ["DATA_SUFFIXES", "Layout", "Source", "detect_layout", "iter_records", "load_qa", "parse_record"]

DATA_SUFFIXES = (".json", ".jsonl")
_WS = re.compile(r"\s*")


class Source(StrEnum):
    """The datasets a task can come from."""

    HOTPOTQA = "hotpotqa"
    TWOWIKI = "2wikimultihopqa"
    MUSIQUE = "musique"


class Layout(StrEnum):
    """Record layouts :func:`load_qa` understands."""

    CONTEXT_LIST = "context_list"  # HotpotQA official, 2WikiMultihopQA official
    CONTEXT_DICT = "context_dict"  # HotpotQA (and 2Wiki) on the Hugging Face hub
    MUSIQUE = "musique"


class _RecordError(Exception):
    """A problem inside one record (the caller adds the file and record number)."""


# ----------------------------------------------------------------- reading
def _iter_json_list(text: str, path: Path) -> Iterator[tuple[int, Any]]:
    decoder = json.JSONDecoder()
    i = _WS.match(text, text.index("[") + 1).end()  # type: ignore[union-attr]
    if text.startswith("]", i):
        return
    n = 0
    while True:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise DatasetFormatError(
                f"{path}: record {n}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                "is the file truncated?"
            ) from None
        yield n, obj
        n += 1
        i = _WS.match(text, end).end()  # type: ignore[union-attr]
        if i >= len(text):
            raise DatasetFormatError(f"{path}: record {n}: the JSON list is not closed with ']' (truncated file?)")
        if text[i] == "]":
            if text[i + 1 :].strip():
                raise DatasetFormatError(f"{path}: unexpected data after the closing ']' of the JSON list")
            return
        if text[i] != ",":
            raise DatasetFormatError(f"{path}: record {n}: expected ',' or ']' between records, got {text[i]!r}")
        i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]


def _iter_json_lines(text: str, path: Path) -> Iterator[tuple[int, Any]]:
    n = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetFormatError(
                f"{path}: record {n} (line {lineno}): invalid JSON ({exc.msg} at column {exc.colno}); "
                "expected a JSON list or one JSON object per line"
            ) from None
        yield n, obj
        n += 1


def iter_records(path: str | Path) -> Iterator[tuple[int, Any]]:
    """``(record number, decoded JSON value)`` for each record of a JSON list or JSON-lines file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetFormatError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    stripped = text.lstrip()
    if not stripped:
        raise DatasetFormatError(f"{path}: the file is empty")
    if stripped.startswith("["):
        yield from _iter_json_list(text, path)
    else:
        yield from _iter_json_lines(text, path)


# ---------------------------------------------------------------- checking
def _get(rec: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in rec:
        raise _RecordError(f"missing field {name!r} (fields present: {sorted(rec)[:12]})")
    value = rec[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _RecordError(f"field {name!r} must be a {names}, got {type(value).__name__}")
    return value


def _strings(values: Any, what: str) -> tuple[str, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise _RecordError(f"{what} must be a list of strings")
    return tuple(values)


def detect_layout(record: Any) -> Layout:
    """The :class:`Layout` of one decoded record (raises ``DatasetFormatError`` if none fits)."""
    if not isinstance(record, Mapping):
        raise DatasetFormatError(f"a record must be a JSON object, got {type(record).__name__}")
    if isinstance(record.get("paragraphs"), list):
        return Layout.MUSIQUE
    context = record.get("context")
    if isinstance(context, list):
        return Layout.CONTEXT_LIST
    if isinstance(context, Mapping):
        return Layout.CONTEXT_DICT
    raise DatasetFormatError(
        "unknown record layout: expected HotpotQA/2Wiki 'context' paragraphs or MuSiQue 'paragraphs' "
        f"(fields present: {sorted(record)[:12]}); question-only files cannot be loaded as QA tasks"
    )


# ----------------------------------------------------------------- parsing
def _record_id(rec: Mapping[str, Any]) -> str:
    for key in ("_id", "id"):
        if key in rec:
            return str(_get(rec, key, (str, int)))
    raise _RecordError("missing field '_id' or 'id'")


def _answers(rec: Mapping[str, Any]) -> tuple[str, ...]:
    answer = _get(rec, "answer", (str, int, float))
    aliases = _strings(rec.get("answer_aliases") or [], "'answer_aliases'")
    out = tuple(dict.fromkeys(s for s in (str(answer), *aliases) if s.strip()))
    if not out:
        raise _RecordError("the gold answer is empty")
    return out


def _supporting(
    paragraphs: tuple[Paragraph, ...], facts: list[tuple[str, int]]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Gold paragraph ids (present) and gold titles (absent), in annotation order."""
    by_title: dict[str, str] = {}
    for p in paragraphs:
        by_title.setdefault(p.title, p.id)
    found: dict[str, None] = {}
    missing: dict[str, None] = {}
    for title, _ in facts:
        if title in by_title:
            found[by_title[title]] = None
        else:
            missing[title] = None
    return tuple(found), tuple(missing)


def _context_list(rec: Mapping[str, Any]) -> tuple[tuple[Paragraph, ...], list[tuple[str, int]]]:
    paragraphs = []
    for j, item in enumerate(_get(rec, "context", list)):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            raise _RecordError(f"context[{j}] must be [title, [sentences]]")
        paragraphs.append(Paragraph(item[0], _strings(item[1], f"context[{j}] sentences")))
    facts = []
    for j, item in enumerate(_get(rec, "supporting_facts", list)):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], int)):
            raise _RecordError(f"supporting_facts[{j}] must be [title, sent_id]")
        facts.append((item[0], item[1]))
    return tuple(paragraphs), facts


def _context_dict(rec: Mapping[str, Any]) -> tuple[tuple[Paragraph, ...], list[tuple[str, int]]]:
    context = _get(rec, "context", Mapping)
    titles = _strings(context.get("title"), "context.title")
    bodies = context.get("sentences", context.get("content"))
    if not isinstance(bodies, list) or len(bodies) != len(titles):
        raise _RecordError("context.sentences must be a list with one entry per context.title")
    paragraphs = tuple(
        Paragraph(t, _strings(s, f"context.sentences[{j}]"))
        for j, (t, s) in enumerate(zip(titles, bodies, strict=True))
    )
    sf = _get(rec, "supporting_facts", Mapping)
    sf_titles, sent_ids = sf.get("title"), sf.get("sent_id")
    if not (isinstance(sf_titles, list) and isinstance(sent_ids, list) and len(sf_titles) == len(sent_ids)):
        raise _RecordError("supporting_facts must hold equal-length lists 'title' and 'sent_id'")
    if not all(isinstance(t, str) for t in sf_titles) or not all(isinstance(s, int) for s in sent_ids):
        raise _RecordError("supporting_facts.title must be strings and supporting_facts.sent_id integers")
    return paragraphs, list(zip(sf_titles, sent_ids, strict=True))


def _evidences(rec: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...]:
    raw = rec.get("evidences") or []
    if isinstance(raw, Mapping):  # Hugging Face layout: {fact[], relation[], entity[]}
        raw = list(zip(raw.get("fact", []), raw.get("relation", []), raw.get("entity", []), strict=False))
    if not isinstance(raw, list) or not all(isinstance(e, (list, tuple)) and len(e) == 3 for e in raw):
        raise _RecordError("evidences must be a list of [subject, relation, object] triples")
    return tuple((str(s), str(r), str(o)) for s, r, o in raw)


def _parse_hotpot_like(rec: Mapping[str, Any], layout: Layout, source: Source | None) -> QATask:
    paragraphs, facts = _context_list(rec) if layout is Layout.CONTEXT_LIST else _context_dict(rec)
    if source is None:
        source = Source.TWOWIKI if "evidences" in rec or "entity_ids" in rec else Source.HOTPOTQA
    supporting, missing = _supporting(paragraphs, facts)
    if source is Source.HOTPOTQA:
        hops: int | None = 2
    else:
        hops = len(supporting) + len(missing) or None
    level = rec.get("level")
    return QATask(
        id=_record_id(rec),
        question=_get(rec, "question", str),
        answers=_answers(rec),
        paragraphs=paragraphs,
        supporting=supporting,
        supporting_facts=tuple(facts),
        missing_supporting=missing,
        type=rec.get("type") if isinstance(rec.get("type"), str) else None,
        level=level if isinstance(level, str) else None,
        hops=hops,
        source=source.value,
        evidences=_evidences(rec) if source is Source.TWOWIKI else (),
    )


def _parse_musique(rec: Mapping[str, Any]) -> QATask:
    paragraphs: list[Paragraph] = []
    by_idx: dict[int, str] = {}
    supporting: list[str] = []
    for j, item in enumerate(_get(rec, "paragraphs", list)):
        if not isinstance(item, Mapping):
            raise _RecordError(f"paragraphs[{j}] must be an object")
        p = Paragraph(_get(item, "title", str), (_get(item, "paragraph_text", str),))
        paragraphs.append(p)
        by_idx[int(item.get("idx", j))] = p.id
        if item.get("is_supporting") is True:
            supporting.append(p.id)
    decomposition = []
    for j, step in enumerate(rec.get("question_decomposition") or []):
        if not isinstance(step, Mapping):
            raise _RecordError(f"question_decomposition[{j}] must be an object")
        idx = step.get("paragraph_support_idx")
        decomposition.append(
            SubQuestion(
                str(step.get("question", "")),
                str(step.get("answer", "")),
                by_idx.get(idx) if isinstance(idx, int) else None,
            )
        )
    ordered = [s.paragraph_id for s in decomposition if s.paragraph_id in supporting]
    record_id = _record_id(rec)
    hop_prefix = record_id.split("__", 1)[0] if "__" in record_id else None
    return QATask(
        id=record_id,
        question=_get(rec, "question", str),
        answers=_answers(rec),
        paragraphs=tuple(paragraphs),
        supporting=tuple(dict.fromkeys([*ordered, *supporting])),  # type: ignore[list-item]
        type=hop_prefix,
        hops=len(decomposition) or None,
        source=Source.MUSIQUE.value,
        decomposition=tuple(decomposition),
        answerable=rec.get("answerable", True) is not False,
    )


def parse_record(record: Any, source: str | Source | None = None) -> QATask:
    """One decoded record as a :class:`QATask` (raises ``DatasetFormatError``)."""
    wanted = Source(source) if source is not None else None
    layout = detect_layout(record)
    if (layout is Layout.MUSIQUE) != (wanted is Source.MUSIQUE) and wanted is not None:
        raise DatasetFormatError(f"source={wanted.value!r} does not match the record layout {layout.value!r}")
    try:
        if layout is Layout.MUSIQUE:
            return _parse_musique(record)
        return _parse_hotpot_like(record, layout, wanted)
    except _RecordError as exc:
        raise DatasetFormatError(str(exc)) from None


# ----------------------------------------------------------------- loading
def _data_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in DATA_SUFFIXES)
        if not files:
            raise DatasetFormatError(f"{path}: the folder holds no {' or '.join(DATA_SUFFIXES)} files")
        return files
    raise FileNotFoundError(f"no such data file or folder: {path}")


def _load_file(path: Path, source: Source | None, limit: int | None) -> list[QATask]:
    tasks: list[QATask] = []
    layout: Layout | None = None
    for n, record in iter_records(path):
        if limit is not None and len(tasks) >= limit:
            break
        try:
            this = detect_layout(record)
            if layout is None:
                layout = this
            elif this is not layout:
                raise DatasetFormatError(
                    f"layout {this.value!r} differs from the file's first record ({layout.value!r})"
                )
            tasks.append(parse_record(record, source))
        except DatasetFormatError as exc:
            raise DatasetFormatError(f"{path}: record {n}: {exc}") from None
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise DatasetFormatError(f"{path}: record {n}: malformed record ({type(exc).__name__}: {exc})") from None
    if not tasks and limit != 0:
        raise DatasetFormatError(f"{path}: the file holds no records")
    return tasks


def load_qa(path: str | Path, source: str | Source | None = None, limit: int | None = None) -> list[QATask]:
    """Load multi-hop QA tasks from a file or a folder of files.

    Args:
        path: A ``.json`` (list or JSON lines) or ``.jsonl`` file, or a folder
            whose ``.json``/``.jsonl`` files are all loaded, in name order.
        source: Force the dataset label (``"hotpotqa"``, ``"2wikimultihopqa"``,
            ``"musique"``); by default it is detected from each record.
        limit: Load at most this many tasks in total.

    Returns:
        The tasks, in file order.

    Raises:
        DatasetFormatError: A file is truncated, not JSON, of an unknown
            layout, or a record lacks a required field (the message names the
            file and the record number).
        FileNotFoundError: ``path`` does not exist.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative int or None (got {limit!r})")
    wanted = Source(source) if source is not None else None
    tasks: list[QATask] = []
    for file in _data_files(Path(path)):
        remaining = None if limit is None else limit - len(tasks)
        if remaining == 0:
            break
        tasks.extend(_load_file(file, wanted, remaining))
    return tasks

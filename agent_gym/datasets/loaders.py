"""Loaders for the official multi-hop QA formats and question-only data, into one :class:`QATask` record.

Supported layouts (detected from the first record of each file):

* HotpotQA, official: ``_id``, ``supporting_facts [[title, sent_id]]``,
  ``context [[title, [sentences]]]`` (distractor and fullwiki settings);
* HotpotQA, Hugging Face: ``id``, ``supporting_facts {title[], sent_id[]}``,
  ``context {title[], sentences[]}``;
* 2WikiMultihopQA, official: the HotpotQA official layout plus ``evidences``
  triples (``source`` is then ``"2wikimultihopqa"``);
* MuSiQue, official: ``paragraphs [{idx, title, paragraph_text, is_supporting}]``,
  ``question_decomposition``, ``answer_aliases``, ``answerable``;
* question-only (Search-R1, FlashRAG, the ``qa_only`` lists): ``question``
  and ``answer`` / ``answers`` / ``golden_answers`` (a string or a list), no
  paragraphs. Such tasks need an external corpus (``corpus=`` a corpus file);
  when they carry ``supporting_facts`` (2Wiki without context), the gold
  titles become :attr:`QATask.missing_supporting`, else they have no gold
  evidence (evidence rewards stay 0, answers are scored as usual).

A source is a file (a JSON list, JSON lines or CSV with a header row), a
folder of such files, or an in-memory ``datasets.Dataset`` / list of records.
A folder never mixes splits silently: see
:func:`~agent_gym.datasets.folders.select_data_files`. Anything
malformed raises :class:`~agent_gym.datasets.records.DatasetFormatError`
naming the file and the record number.

MuSiQue-Full's ``answerable: false`` records (their context lacks a needed
paragraph) are skipped unless ``include_unanswerable=True``: the default is
the answerable setting, where every question can be answered from its context.

Example:
    >>> tasks = load_qa("../shared/data/hotpotqa/dev_distractor_sample_a_300.jsonl")  # doctest: +SKIP
    >>> len(tasks)  # doctest: +SKIP
    300
    >>> tasks[0].question  # doctest: +SKIP
    'Alexander Kerensky was defeated and destroyed by the Bolsheviks in the course of a civil war that ended when ?'
    >>> tasks[0].answers, len(tasks[0].supporting)  # doctest: +SKIP
    (('October 1922',), 2)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from agent_gym.core.files import iter_records
from agent_gym.datasets.folders import DATA_SUFFIXES, memory_records, select_data_files
from agent_gym.datasets.records import DatasetFormatError, Paragraph, QATask, SubQuestion

__all__ = [
    "DATA_SUFFIXES",
    "Layout",
    "Source",
    "detect_layout",
    "iter_records",
    "load_qa",
    "parse_record",
    "select_data_files",
]

_ANSWER_FIELDS = ("golden_answers", "answers", "answer")


class Source(StrEnum):
    """The datasets a task can come from."""

    HOTPOTQA = "hotpotqa"
    TWOWIKI = "2wikimultihopqa"
    MUSIQUE = "musique"
    OPEN = "open"
    """Question-only data of unknown origin (NQ, Bamboogle, ...), for open retrieval."""


class Layout(StrEnum):
    """Record layouts :func:`load_qa` understands."""

    CONTEXT_LIST = "context_list"  # HotpotQA official, 2WikiMultihopQA official
    CONTEXT_DICT = "context_dict"  # HotpotQA (and 2Wiki) on the Hugging Face hub
    MUSIQUE = "musique"
    QUESTION_ONLY = "question_only"  # Search-R1 / FlashRAG / qa_only lists: no paragraphs


class _RecordError(Exception):
    """A problem inside one record (the caller adds the file and record number)."""


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


def _index(value: Any, what: str) -> int:
    """An integer index field (``1e999``, ``"3"``, ``true`` or ``NaN`` are errors, not crashes)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _RecordError(f"{what} must be an integer, got {value!r:.40}")
    return value


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
    if "context" not in record and "paragraphs" not in record and "question" in record:
        if any(name in record for name in _ANSWER_FIELDS):
            return Layout.QUESTION_ONLY
    raise DatasetFormatError(
        "unknown record layout: expected HotpotQA/2Wiki 'context' paragraphs, MuSiQue 'paragraphs', or a "
        f"question-only record with 'question' and 'answer'/'answers'/'golden_answers' "
        f"(fields present: {sorted(record)[:12]})"
    )


# ----------------------------------------------------------------- parsing
def _record_id(rec: Mapping[str, Any], fallback: str | None = None) -> str:
    for key in ("_id", "id"):
        if key in rec:
            return str(_get(rec, key, (str, int)))
    if fallback is not None:
        return fallback
    raise _RecordError("missing field '_id' or 'id'")


def _answer_values(value: Any, name: str) -> list[str]:
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise _RecordError(f"field {name!r} must be a string or a list of strings, got {item!r:.60}")
        if isinstance(item, float) and not math.isfinite(item):
            raise _RecordError(f"field {name!r} holds a non-finite number ({item})")
        out.append(str(item))
    return out


def _answers(rec: Mapping[str, Any], fields: tuple[str, ...] = ("answer",)) -> tuple[str, ...]:
    present = [name for name in fields if name in rec]
    if not present:
        raise _RecordError(f"missing field {' or '.join(repr(f) for f in fields)} (fields present: {sorted(rec)[:12]})")
    values = _answer_values(rec[present[0]], present[0])
    aliases = _strings(rec.get("answer_aliases") or [], "'answer_aliases'")
    out = tuple(dict.fromkeys(s for s in (*values, *aliases) if s.strip()))
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


def _facts(raw: Any) -> list[tuple[str, int]]:
    """``supporting_facts`` as ``[[title, sent_id]]`` (official) or ``{title[], sent_id[]}`` (Hugging Face)."""
    if isinstance(raw, Mapping):
        titles, sent_ids = raw.get("title"), raw.get("sent_id")
        if not (isinstance(titles, list) and isinstance(sent_ids, list) and len(titles) == len(sent_ids)):
            raise _RecordError("supporting_facts must hold equal-length lists 'title' and 'sent_id'")
        raw = [[t, s] for t, s in zip(titles, sent_ids, strict=True)]
    if not isinstance(raw, list):
        raise _RecordError(f"supporting_facts must be a list, got {type(raw).__name__}")
    facts = []
    for j, item in enumerate(raw):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            raise _RecordError(f"supporting_facts[{j}] must be [title, sent_id]")
        facts.append((item[0], _index(item[1], f"supporting_facts[{j}] sent_id")))
    return facts


def _context_list(rec: Mapping[str, Any]) -> tuple[tuple[Paragraph, ...], list[tuple[str, int]]]:
    paragraphs = []
    for j, item in enumerate(_get(rec, "context", list)):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            raise _RecordError(f"context[{j}] must be [title, [sentences]]")
        paragraphs.append(Paragraph(item[0], _strings(item[1], f"context[{j}] sentences")))
    return tuple(paragraphs), _facts(_get(rec, "supporting_facts", list))


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
    return paragraphs, _facts(_get(rec, "supporting_facts", Mapping))


def _evidences(rec: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...]:
    raw = rec.get("evidences") or []
    if isinstance(raw, Mapping):  # Hugging Face layout: {fact[], relation[], entity[]}
        raw = list(zip(raw.get("fact", []), raw.get("relation", []), raw.get("entity", []), strict=False))
    if not isinstance(raw, list) or not all(isinstance(e, list | tuple) and len(e) == 3 for e in raw):
        raise _RecordError("evidences must be a list of [subject, relation, object] triples")
    if not all(isinstance(x, str) for e in raw for x in e):
        raise _RecordError("evidences must hold strings")
    return tuple((s, r, o) for s, r, o in raw)


def _guess_source(rec: Mapping[str, Any]) -> Source:
    if "evidences" in rec or "entity_ids" in rec:
        return Source.TWOWIKI
    if "question_decomposition" in rec or "answerable" in rec or isinstance(rec.get("paragraphs"), list):
        return Source.MUSIQUE
    return Source.HOTPOTQA


def _optional_str(rec: Mapping[str, Any], name: str) -> str | None:
    value = rec.get(name)
    return value if isinstance(value, str) else None


def _parse_hotpot_like(rec: Mapping[str, Any], layout: Layout, source: Source | None) -> QATask:
    paragraphs, facts = _context_list(rec) if layout is Layout.CONTEXT_LIST else _context_dict(rec)
    source = source or _guess_source(rec)
    supporting, missing = _supporting(paragraphs, facts)
    return QATask(
        id=_record_id(rec),
        question=_get(rec, "question", str),
        answers=_answers(rec),
        paragraphs=paragraphs,
        supporting=supporting,
        supporting_facts=tuple(facts),
        missing_supporting=missing,
        type=_optional_str(rec, "type"),
        level=_optional_str(rec, "level"),
        hops=2 if source is Source.HOTPOTQA else (len(supporting) + len(missing) or None),
        source=source.value,
        evidences=_evidences(rec) if source is Source.TWOWIKI else (),
    )


def _decomposition(rec: Mapping[str, Any], by_idx: Mapping[int, str]) -> tuple[SubQuestion, ...]:
    steps = rec.get("question_decomposition") or []
    if not isinstance(steps, list):
        raise _RecordError("question_decomposition must be a list")
    out = []
    for j, step in enumerate(steps):
        if not isinstance(step, Mapping):
            raise _RecordError(f"question_decomposition[{j}] must be an object")
        raw_idx = step.get("paragraph_support_idx")
        title = None
        if raw_idx is not None:
            title = by_idx.get(_index(raw_idx, f"question_decomposition[{j}].paragraph_support_idx"))
        out.append(SubQuestion(str(step.get("question", "")), str(step.get("answer", "")), title))
    return tuple(out)


def _answerable(rec: Mapping[str, Any]) -> bool:
    value = rec.get("answerable", True)
    if not isinstance(value, bool):
        raise _RecordError(f"field 'answerable' must be true or false, got {value!r:.40}")
    return value


def _parse_musique(rec: Mapping[str, Any]) -> QATask:
    paragraphs: list[Paragraph] = []
    by_idx: dict[int, str] = {}
    supporting: list[str] = []
    for j, item in enumerate(_get(rec, "paragraphs", list)):
        if not isinstance(item, Mapping):
            raise _RecordError(f"paragraphs[{j}] must be an object")
        p = Paragraph(_get(item, "title", str), (_get(item, "paragraph_text", str),))
        paragraphs.append(p)
        by_idx[_index(item.get("idx", j), f"paragraphs[{j}].idx")] = p.id
        if item.get("is_supporting") is True:
            supporting.append(p.id)
    decomposition = _decomposition(rec, by_idx)
    ordered = [s.paragraph_id for s in decomposition if s.paragraph_id in supporting]
    record_id = _record_id(rec)
    return QATask(
        id=record_id,
        question=_get(rec, "question", str),
        answers=_answers(rec),
        paragraphs=tuple(paragraphs),
        supporting=tuple(dict.fromkeys([*ordered, *supporting])),
        type=record_id.split("__", 1)[0] if "__" in record_id else None,
        hops=len(decomposition) or None,
        source=Source.MUSIQUE.value,
        decomposition=decomposition,
        answerable=_answerable(rec),
    )


def _parse_question_only(rec: Mapping[str, Any], source: Source | None, fallback_id: str | None) -> QATask:
    if source is None:
        source = _guess_source(rec) if set(rec) & {"evidences", "entity_ids", "question_decomposition"} else Source.OPEN
    facts = _facts(rec["supporting_facts"]) if "supporting_facts" in rec else []
    decomposition = _decomposition(rec, {}) if source is Source.MUSIQUE else ()
    gold_titles = tuple(dict.fromkeys(title for title, _ in facts))
    hops = len(decomposition) or len(gold_titles) or None
    return QATask(
        id=_record_id(rec, fallback_id),
        question=_get(rec, "question", str),
        answers=_answers(rec, _ANSWER_FIELDS),
        paragraphs=(),
        supporting=(),
        supporting_facts=tuple(facts),
        missing_supporting=gold_titles,
        type=_optional_str(rec, "type"),
        level=_optional_str(rec, "level"),
        hops=2 if source is Source.HOTPOTQA else hops,
        source=source.value,
        decomposition=decomposition,
        evidences=_evidences(rec) if source is Source.TWOWIKI else (),
        answerable=_answerable(rec),
    )


def parse_record(record: Any, source: str | Source | None = None, *, fallback_id: str | None = None) -> QATask:
    """One decoded record as a :class:`QATask` (raises ``DatasetFormatError``).

    Args:
        record: A decoded JSON object (or a ``datasets`` row).
        source: Force the dataset label; by default it is detected.
        fallback_id: The id to use when a question-only record has none
            (the loaders pass ``"<file stem>-<record number>"``).
    """
    wanted = Source(source) if source is not None else None
    layout = detect_layout(record)
    if layout is not Layout.QUESTION_ONLY and wanted is not None and wanted is not Source.OPEN:
        if (layout is Layout.MUSIQUE) != (wanted is Source.MUSIQUE):
            raise DatasetFormatError(f"source={wanted.value!r} does not match the record layout {layout.value!r}")
    try:
        if layout is Layout.QUESTION_ONLY:
            return _parse_question_only(record, wanted, fallback_id)
        if layout is Layout.MUSIQUE:
            return _parse_musique(record)
        return _parse_hotpot_like(record, layout, None if wanted is Source.OPEN else wanted)
    except _RecordError as exc:
        raise DatasetFormatError(str(exc)) from None


# ----------------------------------------------------------------- loading
def _load_records(
    label: str, records: Iterable[tuple[int, Any]], source: Source | None, limit: int | None, *, unanswerable: bool
) -> list[QATask]:
    """Parse ``(number, record)`` pairs of one file or dataset into tasks (``label`` names it in errors)."""
    tasks: list[QATask] = []
    layout: Layout | None = None
    seen = skipped = 0
    stem = Path(label).stem if not label.startswith("<") else "record"
    for n, record in records:
        if limit is not None and len(tasks) >= limit:
            break
        seen += 1
        try:
            this = detect_layout(record)
            if layout is None:
                layout = this
            elif this is not layout:
                raise DatasetFormatError(f"layout {this.value!r} differs from the first record's ({layout.value!r})")
            task = parse_record(record, source, fallback_id=f"{stem}-{n}")
        except DatasetFormatError as exc:
            raise DatasetFormatError(f"{label}: record {n}: {exc}") from None
        except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError, RecursionError) as exc:
            raise DatasetFormatError(f"{label}: record {n}: malformed record ({type(exc).__name__}: {exc})") from None
        if task.answerable or unanswerable:
            tasks.append(task)
        else:
            skipped += 1
    if not tasks and limit != 0:
        if skipped:
            raise DatasetFormatError(
                f"{label}: all {skipped} records are unanswerable (MuSiQue-Full); pass include_unanswerable=True"
            )
        if not seen:
            raise DatasetFormatError(f"{label}: holds no records")
    return tasks


def load_qa(
    path: Any,
    source: str | Source | None = None,
    limit: int | None = None,
    *,
    data_files: str | None = None,
    include_unanswerable: bool = False,
) -> list[QATask]:
    """Load multi-hop QA (or question-only) tasks from a file, a folder or an in-memory dataset.

    Args:
        path: A ``.json`` (list or JSON lines), ``.jsonl`` or ``.csv`` file
            (optionally ``.gz``); a folder of such files (all of one split and
            setting, or chosen with ``data_files``); or a ``datasets.Dataset``
            or list of record dicts.
        source: Force the dataset label (``"hotpotqa"``, ``"2wikimultihopqa"``,
            ``"musique"``, ``"open"``); by default it is detected from each record.
        limit: Load at most this many tasks in total.
        data_files: For a folder: a glob over its file names (e.g.
            ``"dev_distractor_*"``) choosing which files to load.
        include_unanswerable: Keep MuSiQue-Full's ``answerable: false``
            records (skipped by default: the answerable setting).

    Returns:
        The tasks, in file (or row) order.

    Raises:
        DatasetFormatError: A file is truncated, not JSON/UTF-8, of an unknown
            layout, a record lacks a required field or has a wrong type (the
            message names the file and the record number), or a folder mixes
            splits and ``data_files`` does not choose.
        FileNotFoundError: ``path`` does not exist.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative int or None (got {limit!r})")
    wanted = Source(source) if source is not None else None
    in_memory = memory_records(path)
    if in_memory is not None:
        label, records = in_memory
        return _load_records(label, records, wanted, limit, unanswerable=include_unanswerable)
    tasks: list[QATask] = []
    for file in select_data_files(Path(path), data_files):
        remaining = None if limit is None else limit - len(tasks)
        if remaining == 0:
            break
        tasks.extend(_load_records(str(file), iter_records(file), wanted, remaining, unanswerable=include_unanswerable))
    return tasks

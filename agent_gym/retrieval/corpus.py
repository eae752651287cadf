"""Passages, search hits, stable passage ids and corpus files.

A corpus is a list of :class:`Passage` objects (defined on the ground floor,
:mod:`agent_gym.core.passages`, and re-exported here, since QA datasets build
them too). QA loaders build them from a
question's context paragraphs with :func:`passage_id`, so the gold supporting
paragraphs of a question map to the ids a retriever returns. Standalone
corpora (DPR / Search-R1 ``{"id", "contents"}`` JSONL, or ``{"title", "text"}``
records) are read by :func:`load_corpus`.

Example:
    >>> p = Passage(id=passage_id("Paris", "Paris is the capital of France."), title="Paris",
    ...             text="Paris is the capital of France.")
    >>> p.id
    'Paris#11651935d5'
    >>> p.contents
    'Paris\\nParis is the capital of France.'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_gym.core.files import DatasetFormatError, iter_records
from agent_gym.core.passages import Passage, passage_id

__all__ = ["DatasetFormatError", "Hit", "Passage", "dedupe_passages", "load_corpus", "parse_contents", "passage_id"]


@dataclass(frozen=True)
class Hit:
    """One search result.

    Attributes:
        passage: The retrieved passage.
        score: The retriever's relevance score (higher is better).
        rank: 1-based position in the result list (1 = best).
    """

    passage: Passage
    score: float
    rank: int


def parse_contents(contents: str) -> tuple[str, str]:
    """Split DPR / Search-R1 ``contents`` into ``(title, text)``.

    The first line is the title, optionally wrapped in double quotes as in the
    DPR Wikipedia dump (``"\\"Title\\"\\ntext"``); the rest is the text. A single
    line has no title.

    Args:
        contents: The ``contents`` field of a corpus record.

    Returns:
        ``(title, text)``.
    """
    head, sep, rest = contents.partition("\n")
    if not sep:
        return "", contents.strip()
    title = head.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, rest.strip()


def _record_to_passage(record: Any) -> Passage:
    """One corpus record (already decoded JSON) as a Passage; raises ValueError on bad shape."""
    if not isinstance(record, Mapping):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    for key in ("id", "contents", "title", "text"):
        if key in record and (not isinstance(record[key], str | int) or isinstance(record[key], bool)):
            raise ValueError(f"field {key!r} must be a string, got {type(record[key]).__name__}")
    if "contents" in record:
        title, text = parse_contents(str(record["contents"]))
    elif "text" in record:
        title, text = str(record.get("title", "")), str(record["text"])
    else:
        raise ValueError(f"needs 'contents' or 'text' (and 'title'); found keys {sorted(record)}")
    pid = str(record["id"]) if "id" in record else passage_id(title, text)
    if not pid:
        raise ValueError("empty 'id'")
    return Passage(id=pid, title=title, text=text)


def load_corpus(path: str | Path) -> list[Passage]:
    """Read a passage corpus file.

    Accepted layouts, one object per line (JSONL) or a JSON list of objects,
    either optionally gzip-compressed (``.gz``):

    * ``{"id", "contents"}`` with contents ``"Title\\ntext"`` or
      ``"\\"Title\\"\\ntext"`` (DPR / Search-R1 / FlashRAG);
    * ``{"title", "text"}`` (optionally with ``"id"``); without an id the
      passage gets :func:`passage_id`.

    Exact duplicates (same id, title and text) are kept once.

    Args:
        path: The corpus file.

    Returns:
        The passages in file order.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        DatasetFormatError: (a ``ValueError``) For an empty file, bytes that
            are not UTF-8, a ``.gz`` file that is not (complete) gzip,
            undecodable JSON or a malformed record (the message names the file
            and the 0-based record number), or two different passages sharing
            an id.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path}")
    passages: list[Passage] = []
    for number, record in iter_records(path):
        try:
            passages.append(_record_to_passage(record))
        except (ValueError, TypeError) as exc:
            raise DatasetFormatError(f"{path}: record {number}: {exc}") from None
    if not passages:
        raise DatasetFormatError(f"{path}: no passages found (empty corpus)")
    try:
        return dedupe_passages(passages)
    except ValueError as exc:
        raise DatasetFormatError(f"{path}: {exc}") from None


def dedupe_passages(passages: Iterable[Passage]) -> list[Passage]:
    """Drop exact duplicates, keeping first-seen order (e.g. when pooling many questions' contexts).

    Args:
        passages: Passages, possibly repeated.

    Returns:
        Unique passages in first-seen order.

    Raises:
        ValueError: If two *different* passages share an id.
    """
    seen: dict[str, Passage] = {}
    for p in passages:
        old = seen.setdefault(p.id, p)
        if old is not p and old != p:
            raise ValueError(f"two different passages share the id {p.id!r}: {old.title!r} and {p.title!r}")
    return list(seen.values())


def as_passage_list(passages: Sequence[Passage] | Iterable[Passage]) -> list[Passage]:
    """Validate that every item is a :class:`Passage` and return them as a deduplicated list."""
    items = list(passages)
    for i, p in enumerate(items):
        if not isinstance(p, Passage):
            raise TypeError(f"passages[{i}] must be a Passage, got {type(p).__name__}")
    return dedupe_passages(items)

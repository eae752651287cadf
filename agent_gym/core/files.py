"""Reading data files safely: JSON lists, JSON lines, CSV and gzip, with errors that name the file and record.

Every data file the package reads (QA datasets, passage corpora) goes through
these helpers, so a bad file always raises :class:`DatasetFormatError` with
the path and the 0-based record number (plus the line for JSON lines, or the
byte offset when the bytes themselves are bad) - never a bare
``RecursionError``, ``UnicodeDecodeError``, ``EOFError`` or ``OverflowError``.

Hostile inputs this covers: non-UTF-8 bytes, non-gzip or truncated ``.gz``
files, JSON nested deeper than the parser's recursion limit, integers longer
than Python's int-string limit (4,300 digits), truncated JSON lists, and
empty files.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "bad.jsonl"
    >>> _ = path.write_text('{"a": 1}\\n{"a": [[[}\\n')
    >>> try:
    ...     list(iter_records(path))
    ... except DatasetFormatError as exc:
    ...     print(str(exc).split(": ", 1)[1][:36])
    record 1 (line 2): invalid JSON (Exp
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["DatasetFormatError", "iter_records", "json_lines", "loads", "read_text", "write_atomic"]

_WS = re.compile(r"\s*")


class DatasetFormatError(ValueError):
    """A data file (or in-memory dataset) does not match the layout it was read as.

    The message names the file and, when known, the 0-based record number
    (JSON lines also give the line; undecodable bytes give the byte offset).
    """


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Replace ``path`` with ``data`` so that a reader (or a ``kill -9`` at any moment) sees the old file or the
    new one, never a part: a temporary file in the same folder, flushed and ``fsync``-ed, then ``os.replace``.

    Returns:
        The path written (its folder is created when needed).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        folder = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return target
    try:
        os.fsync(folder)
    except OSError:
        pass
    finally:
        os.close(folder)
    return target


def json_lines(text: str) -> list[str]:
    """The lines of JSON-lines text: split at ``"\\n"`` only (a ``"\\r"`` before it dropped, for CRLF files).

    Not ``str.splitlines()``: it also splits at U+2028, U+2029, U+0085 and the other Unicode line breaks, which
    JSON strings may hold unescaped (``json.dumps(..., ensure_ascii=False)`` writes them as they are), so a
    record with a line separator in its text would read back as two broken halves. Like ``splitlines()``, a
    final ``"\\n"`` ends the last line rather than starting an empty one.

    Example:
        >>> json_lines('{"a": "x\\u2028y"}\\r\\n{"b": 2}\\n')
        ['{"a": "x\\u2028y"}', '{"b": 2}']
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


class _JSONError(ValueError):
    """One JSON value could not be decoded (message without the file name)."""


def loads(text: str) -> Any:
    """``json.loads`` whose every failure is a ``ValueError`` subclass with a short reason.

    Raises:
        ValueError: Invalid JSON, nesting deeper than the recursion limit, or
            an integer over Python's int-string conversion limit.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _JSONError(f"invalid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise _JSONError("JSON nested too deeply to decode") from None
    except ValueError as exc:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        raise _JSONError(f"undecodable JSON value ({exc})") from None


def read_text(path: str | Path) -> str:
    """The UTF-8 text of ``path`` (a leading BOM dropped; ``.gz`` files decompressed).

    Raises:
        DatasetFormatError: Not gzip / truncated gzip (for ``.gz``), or bytes
            that are not UTF-8 (the byte offset and line are named).
        FileNotFoundError: ``path`` does not exist.
    """
    path = Path(path)
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise DatasetFormatError(f"{path}: not a complete gzip file ({type(exc).__name__}: {exc})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DatasetFormatError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}, line {line}); re-encode the file as UTF-8"
        ) from None


def _iter_json_list(text: str, path: Path) -> Iterator[tuple[int, Any]]:
    """Decode a JSON list one element at a time, so an error names the element."""
    decoder = json.JSONDecoder()
    i = _WS.match(text, text.index("[") + 1).end()  # type: ignore[union-attr]
    if text.startswith("]", i):
        if text[i + 1 :].strip():
            raise DatasetFormatError(f"{path}: unexpected data after the closing ']' of the JSON list")
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
        except RecursionError:
            raise DatasetFormatError(f"{path}: record {n}: JSON nested too deeply to decode") from None
        except ValueError as exc:
            raise DatasetFormatError(f"{path}: record {n}: undecodable JSON value ({exc})") from None
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
    for lineno, line in enumerate(json_lines(text), start=1):
        if not line.strip():
            continue
        try:
            obj = loads(line)
        except ValueError as exc:
            raise DatasetFormatError(
                f"{path}: record {n} (line {lineno}): {exc}; expected a JSON list or one JSON object per line"
            ) from None
        yield n, obj
        n += 1


def _iter_csv(text: str, path: Path) -> Iterator[tuple[int, Any]]:
    """CSV rows as dicts with lower-cased, stripped header names (``Question`` -> ``question``)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [h.strip().lower() for h in next(reader)]
        for n, row in enumerate(reader):
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise DatasetFormatError(
                    f"{path}: record {n} (line {reader.line_num}): {len(row)} fields, the header has {len(header)}"
                )
            yield n, dict(zip(header, row, strict=True))
    except csv.Error as exc:
        raise DatasetFormatError(f"{path}: line {reader.line_num}: malformed CSV ({exc})") from None


def iter_records(path: str | Path) -> Iterator[tuple[int, Any]]:
    """``(record number, decoded value)`` for each record of a JSON list, JSON-lines or CSV file.

    The layout is told by the content (a leading ``[`` is a JSON list, else
    one JSON value per line), except ``.csv`` files (a header row, then one
    record per row). ``.gz`` files are decompressed first.

    Raises:
        DatasetFormatError: The file is empty, not UTF-8, not (complete) gzip,
            or a record is not decodable (the message names file and record).
    """
    path = Path(path)
    text = read_text(path)
    stripped = text.lstrip()
    if not stripped:
        raise DatasetFormatError(f"{path}: the file is empty")
    if path.suffix == ".csv" or path.name.endswith(".csv.gz"):
        yield from _iter_csv(text, path)
    elif stripped.startswith("["):
        yield from _iter_json_list(text, path)
    else:
        yield from _iter_json_lines(text, path)

"""Linear-time, size-bounded building blocks of the action parsers.

Everything here does work proportional to the length of its input and has
budgets that are *sizes*, never wall-clock times, so a parse result depends
only on the text (same action, same result, on any machine under any load):

* :func:`scan_blocks` finds ``<tag>...</tag>`` blocks with ``str.find``
  (a lazy regex such as ``<tag>(.*?)</tag>`` rescans the rest of the text
  from every unclosed opening tag, which is quadratic);
* :func:`json_depth` measures the bracket nesting of JSON text *before* it is
  decoded, skipping string literals;
* :func:`decode_json` decodes JSON under :class:`JsonLimits` (length, nesting
  depth, length of a number literal, finite numbers only). Python's ``json`` module
  alone raises ``RecursionError`` on deep nesting and ``ValueError`` on an
  integer literal over 4,300 digits, and a value nested ~1,000 deep decodes
  but then breaks every later ``json.dumps``, ``copy.deepcopy`` or ``pickle``
  of the history holding it; the limits turn all of these into error strings;
* :func:`well_formed_text` and :func:`well_formed_value` make text (and decoded
  JSON values) well-formed Unicode: valid JSON may spell a lone UTF-16
  surrogate (``"\\ud800"``), which Python decodes into a ``str`` that no
  UTF-8 encoder, tokenizer or JSON-lines file accepts.

Example:
    >>> scan_blocks("a<b>1</b><b>2</b><b>3", "<b>", "</b>")
    [(1, '1'), (9, '2')]
    >>> json_depth('{"a": [1, "[[["]}')
    2
    >>> decode_json("[" * 40 + "]" * 40)
    (None, 'JSON nested more than 32 deep')
    >>> decode_json('{"n": ' + "9" * 200 + "}")
    (None, 'a number literal of 200 characters (the limit is 100)')
    >>> well_formed_text(decode_json('"a\\\\ud800b \\\\ud83d\\\\ude00"')[0])
    'a\ufffdb \U0001f600'
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "JsonLimits",
    "count_blocks",
    "decode_json",
    "exceeds_depth",
    "json_depth",
    "scan_blocks",
    "well_formed_text",
    "well_formed_value",
]

_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_LBRACKET, _RBRACKET, _LBRACE, _RBRACE = ord("["), ord("]"), ord("{"), ord("}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed_text(text: str) -> str:
    """``text`` as well-formed Unicode: a surrogate pair becomes its character, a lone surrogate U+FFFD.

    Text a model writes is well formed, but JSON may spell a lone UTF-16
    surrogate as an escape (``"\\ud800"``, six ASCII characters that
    ``json.loads`` turns into one unpaired code point), and a ``str`` holding
    one cannot be encoded as UTF-8: writing it to a file, tokenizing it or
    sending it over HTTP raises. Replacing it with U+FFFD (the Unicode
    replacement character) is what every UTF decoder does with unpaired
    surrogates. Text without surrogates is returned as it is, at the cost of
    one search at C speed.

    Example:
        >>> well_formed_text("a\\ud800b"), well_formed_text("\\ud83d\\ude00") == "\\U0001f600"
        ('a\ufffdb', True)
    """
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def well_formed_value(value: Any) -> Any:
    """A decoded JSON value with :func:`well_formed_text` applied to every string in it, keys included.

    Containers (mappings, lists, tuples) are rebuilt only where a string in
    them changed, so a clean value comes back as the same object. Recursive:
    meant for values decoded under :class:`JsonLimits` (nested at most
    ``max_depth`` deep).
    """
    if isinstance(value, str):
        return well_formed_text(value)
    if isinstance(value, Mapping):
        items = [(well_formed_value(k), well_formed_value(v)) for k, v in value.items()]
        if all(k is k2 and v is v2 for (k, v), (k2, v2) in zip(value.items(), items, strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        cleaned = [well_formed_value(v) for v in value]
        if all(a is b for a, b in zip(value, cleaned, strict=True)):
            return value
        return type(value)(cleaned) if isinstance(value, tuple) else cleaned
    return value


def scan_blocks(text: str, open_tag: str, close_tag: str, limit: int | None = None) -> list[tuple[int, str]]:
    """Non-overlapping ``open_tag ... close_tag`` blocks, leftmost first.

    The same blocks as the lazy regex ``open(.*?)close`` with ``DOTALL``: each
    block runs from an opening tag to the first closing tag after it (an
    opening tag inside a block is part of its text). Scanning stops at the
    first opening tag that is never closed, so no character is examined more
    than twice: linear time.

    Args:
        text: The text to scan.
        open_tag: The opening tag, e.g. ``"<tool_call>"``.
        close_tag: The closing tag, e.g. ``"</tool_call>"``.
        limit: Stop after this many blocks (``None``: all of them).

    Returns:
        ``(start offset of the opening tag, text between the tags)`` per block.
    """
    blocks: list[tuple[int, str]] = []
    pos = 0
    while limit is None or len(blocks) < limit:
        start = text.find(open_tag, pos)
        if start < 0:
            return blocks
        inner = start + len(open_tag)
        end = text.find(close_tag, inner)
        if end < 0:
            return blocks
        blocks.append((start, text[inner:end]))
        pos = end + len(close_tag)
    return blocks


def count_blocks(text: str, open_tag: str, close_tag: str) -> int:
    """How many blocks :func:`scan_blocks` finds, counted at C speed in linear time.

    The lazy regex alone is quadratic when opening tags are never closed (it
    rescans the rest from each one); cut at the last closing tag, every
    opening tag left has a closing tag after it, so no match attempt fails
    after scanning and each character is examined a bounded number of times.
    """
    last = text.rfind(close_tag)
    if last < 0:
        return 0
    return _block_pattern(open_tag, close_tag).subn("", text[: last + len(close_tag)])[1]


@functools.lru_cache(maxsize=64)
def _block_pattern(open_tag: str, close_tag: str) -> re.Pattern[str]:
    return re.compile(f"{re.escape(open_tag)}.*?{re.escape(close_tag)}", re.DOTALL)


def json_depth(text: str) -> int:
    """The deepest bracket nesting of JSON text, string literals skipped, without decoding it.

    A quote preceded by an odd run of backslashes is escaped; the others
    delimit strings; ``[``/``{`` and ``]``/``}`` outside strings open and
    close a level. For valid JSON this is the nesting depth of its arrays and
    objects (``1`` for ``{}``); for broken JSON it is at least the depth a
    decoder reaches before it fails. Vectorised with numpy: linear time at C
    speed (a few milliseconds per MiB).
    """
    if not text:
        return 0
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    delta = np.zeros(codes.size, dtype=np.int32)
    delta[(codes == _LBRACKET) | (codes == _LBRACE)] = 1
    delta[(codes == _RBRACKET) | (codes == _RBRACE)] = -1
    real = codes == _QUOTE
    if real.any():
        backslash = codes == _BACKSLASH
        if backslash.any():
            index = np.arange(codes.size, dtype=np.int32)
            last_other = np.maximum.accumulate(np.where(backslash, -1, index))  # the last non-backslash <= i
            run_before = index - 1 - np.concatenate(([-1], last_other[:-1]))  # backslashes right before i
            real &= (run_before & 1) == 0
        quotes_before = np.cumsum(real, dtype=np.int32) - real
        delta[(quotes_before & 1) == 1] = 0  # inside a string
    return int(np.cumsum(delta, dtype=np.int32).max(initial=0))


def exceeds_depth(text: str, limit: int) -> bool:
    """Whether :func:`json_depth` of ``text`` is above ``limit``, usually without scanning it all.

    Fewer than ``limit`` opening brackets cannot nest deeper (the common
    case: one string count); otherwise growing prefixes are measured, which
    is exact because the depth of a prefix never depends on what follows, so
    deep hostile JSON is refused after its first few thousand characters.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    size = 4096
    while True:
        if json_depth(text[:size]) > limit:
            return True
        if size >= len(text):
            return False
        size *= 16


@dataclass(frozen=True)
class JsonLimits:
    """Size budgets for JSON written by an agent (deterministic: sizes, never times).

    Attributes:
        max_length: Longest JSON text decoded, in characters (one tool call's
            JSON; decoding costs time in proportion to it).
        max_depth: Deepest nesting of arrays and objects (``{"a": [1]}`` is 2).
        max_number_length: Longest number literal, in characters (Python's own
            int-string limit of 4,300 digits would raise ``ValueError``; it can
            be lowered to 640 process-wide, so stay well below that).
    """

    max_length: int = 65_536
    max_depth: int = 32
    max_number_length: int = 100

    def __post_init__(self) -> None:
        for name in ("max_length", "max_depth", "max_number_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"JsonLimits.{name} must be a positive int (got {value!r})")


class _LimitError(ValueError):
    """A JSON value broke a :class:`JsonLimits` budget while being decoded."""


@functools.lru_cache(maxsize=8)
def _long_number(limit: int) -> re.Pattern[str]:
    """A digit run longer than ``limit`` (matched from the run's start only: linear), or a 3-digit exponent."""
    return re.compile(rf"(?<![0-9])[0-9]{{{limit + 1}}}|[eE][+-]?[0-9]{{3}}")


def _reject_constant(name: str) -> float:
    raise _LimitError(f"{name} is not a JSON number")


def _number_hooks(limit: int) -> dict[str, Any]:
    def check(literal: str) -> None:
        if len(literal) > limit:
            raise _LimitError(f"a number literal of {len(literal)} characters (the limit is {limit})")

    def parse_int(literal: str) -> int:
        check(literal)
        return int(literal)

    def parse_float(literal: str) -> float:
        check(literal)
        value = float(literal)
        if not math.isfinite(value):
            raise _LimitError(f"the number {literal} is out of range")
        return value

    return {"parse_int": parse_int, "parse_float": parse_float, "parse_constant": _reject_constant}


def decode_json(text: str, limits: JsonLimits | None = None) -> tuple[Any, str | None]:
    """Decode ``text`` under ``limits`` (default :class:`JsonLimits`); never raises.

    Returns:
        ``(value, None)`` on success, else ``(None, a readable problem)``.
    """
    limits = limits or JsonLimits()
    if len(text) > limits.max_length:
        return None, f"{len(text)} characters of JSON (the limit is {limits.max_length})"
    if exceeds_depth(text, limits.max_depth):
        return None, f"JSON nested more than {limits.max_depth} deep"
    # Only text with a long digit run or a 3-digit exponent (even inside a string) can hold a number
    # over the limit or out of float range; the rest decodes at C speed with the default number parsers.
    if _long_number(limits.max_number_length).search(text):
        hooks = _number_hooks(limits.max_number_length)
    else:
        hooks = {"parse_constant": _reject_constant}
    try:
        return json.loads(text, **hooks), None
    except _LimitError as exc:
        return None, str(exc)
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON ({exc.msg})"
    except RecursionError:  # unreachable below max_depth; kept as a safety net
        return None, "JSON nested too deep"

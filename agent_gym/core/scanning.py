"""Linear-time, size-bounded building blocks of the action parsers.

Everything here does work proportional to the length of its input and has
budgets that are *sizes*, never wall-clock times, so a parse result depends
only on the text (same action, same result, on any machine under any load):

* :func:`scan_blocks` finds ``<tag>...</tag>`` blocks with ``str.find``
  (a lazy regex such as ``<tag>(.*?)</tag>`` rescans the rest of the text
  from every unclosed opening tag, which is quadratic);
* :func:`json_depth` measures the bracket nesting of JSON text *before* it is
  decoded, skipping string literals;
* :func:`decode_json` decodes JSON under :class:`JsonLimits` (nesting depth,
  length of a number literal, finite numbers only). Python's ``json`` module
  alone raises ``RecursionError`` on deep nesting and ``ValueError`` on an
  integer literal over 4,300 digits, and a value nested ~1,000 deep decodes
  but then breaks every later ``json.dumps``, ``copy.deepcopy`` or ``pickle``
  of the history holding it; the limits turn all of these into error strings.

Example:
    >>> scan_blocks("a<b>1</b><b>2</b><b>3", "<b>", "</b>")
    [(1, '1'), (9, '2')]
    >>> json_depth('{"a": [1, "[[["]}')
    2
    >>> decode_json('{"n": ' + "9" * 200 + "}")
    (None, 'a number literal of 200 characters (the limit is 100)')
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["JsonLimits", "decode_json", "json_depth", "scan_blocks"]

# A JSON string literal, or an unterminated one running to the end of the text
# (optionally ending in a lone backslash). Possessive loops and the always-matching
# tail make every match attempt that starts at a quote succeed, so a scan is linear.
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_OPEN = np.array([ord("["), ord("{")], dtype=np.uint8)


def scan_blocks(text: str, open_tag: str, close_tag: str) -> list[tuple[int, str]]:
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

    Returns:
        ``(start offset of the opening tag, text between the tags)`` per block.
    """
    blocks: list[tuple[int, str]] = []
    pos = 0
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            return blocks
        inner = start + len(open_tag)
        end = text.find(close_tag, inner)
        if end < 0:
            return blocks
        blocks.append((start, text[inner:end]))
        pos = end + len(close_tag)


def json_depth(text: str) -> int:
    """The deepest bracket nesting of JSON text, string literals skipped, without decoding it.

    For valid JSON this is the nesting depth of its arrays and objects
    (``1`` for ``{}``); for broken JSON it is an upper bound of the depth a
    decoder would reach before failing.
    """
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    if not brackets:
        return 0
    codes = np.frombuffer(brackets.encode("ascii"), dtype=np.uint8)
    steps = np.where(np.isin(codes, _OPEN), 1, -1)
    return int(np.cumsum(steps).max(initial=0))


@dataclass(frozen=True)
class JsonLimits:
    """Size budgets for JSON written by an agent (deterministic: sizes, never times).

    Attributes:
        max_depth: Deepest nesting of arrays and objects (``{"a": [1]}`` is 2).
        max_number_length: Longest number literal, in characters (Python's own
            int-string limit of 4,300 digits would raise ``ValueError``).
    """

    max_depth: int = 32
    max_number_length: int = 100

    def __post_init__(self) -> None:
        for name in ("max_depth", "max_number_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"JsonLimits.{name} must be a positive int (got {value!r})")


class _LimitError(ValueError):
    """A JSON value broke a :class:`JsonLimits` budget while being decoded."""


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

    def parse_constant(name: str) -> float:
        raise _LimitError(f"{name} is not a JSON number")

    return {"parse_int": parse_int, "parse_float": parse_float, "parse_constant": parse_constant}


def decode_json(text: str, limits: JsonLimits | None = None) -> tuple[Any, str | None]:
    """Decode ``text`` under ``limits`` (default :class:`JsonLimits`); never raises.

    Returns:
        ``(value, None)`` on success, else ``(None, a readable problem)``.
    """
    limits = limits or JsonLimits()
    depth = json_depth(text)
    if depth > limits.max_depth:
        return None, f"JSON nested {depth} deep (the limit is {limits.max_depth})"
    try:
        return json.loads(text, **_number_hooks(limits.max_number_length)), None
    except _LimitError as exc:
        return None, str(exc)
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON ({exc.msg})"
    except RecursionError:  # unreachable below max_depth; kept as a safety net
        return None, "JSON nested too deep"

"""Deterministic cost accounting and replayability guards for :mod:`agent_gym.tools.sql`.

SQLite's progress handler counts virtual-machine steps, a deterministic
measure of most of a query's work. A few built-in string functions do far
more than one step's work in a single call: ``LIKE``/``GLOB`` and the two
argument ``trim`` family are O(len(text) × len(pattern)), ``instr`` and
``replace`` O(len(text) × len(needle)). :func:`install_guards` overrides them
with wrappers that *charge* that cost to the query's :class:`Budget` before
the work is done (and refuse the call when it would exceed the budget), then
delegate to the real built-in on a private helper connection, so results are
exactly SQLite's.

The date and time functions are wrapped too: ``'now'`` (also a call with no
arguments), ``'localtime'`` and ``'utc'`` read the machine's clock or time
zone, so they are refused with a clear message and every query result stays
a function of the database and the query text alone.

The unit of cost is one SQLite VM step (about 6 ns of plain work on the 2-core machine where the
charges below were calibrated, with SQLite 3.40).
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Budget", "BudgetExceeded", "GuardRefusal", "cte_copies", "install_guards"]

CALL_COST = 100
"""Units charged for every call of a wrapped function (the delegation itself)."""

# name -> (number of arguments, units per (size of arg 0) x (size of arg 1) byte pair, as a divisor)
_QUADRATIC: dict[str, tuple[tuple[int, ...], int]] = {
    "like": ((2, 3), 4),  # like(pattern, text[, escape]): ~1.6 ns per pattern x text byte pair
    "glob": ((2,), 4),  # glob(pattern, text): ~1.1 ns per pair
    "trim": ((2,), 2),  # trim(text, characters): ~2.3 ns per text byte x character
    "ltrim": ((2,), 2),
    "rtrim": ((2,), 2),
    "instr": ((2,), 32),  # instr(text, needle): memcmp at each position, ~0.05 ns per pair
    "replace": ((3,), 32),  # replace(text, needle, replacement): same scan as instr
}
_CLOCK_FUNCTIONS = ("date", "time", "datetime", "julianday", "strftime", "unixepoch")
_CLOCK_WORDS = frozenset({"now", "localtime", "utc"})


class BudgetExceeded(Exception):
    """Raised inside a wrapped function when its charge would exceed the query's budget."""


class GuardRefusal(Exception):
    """Raised inside a wrapped function that refuses its arguments (the message is for the agent)."""


class Budget:
    """The work budget of one query: VM steps plus charges, with a wall-clock safety net.

    Args:
        limit: Units allowed per query.
        period: VM steps between progress-handler calls (each call adds ``period``).
        safety_seconds: Wall-clock limit per query; a safety net that the unit
            budget should always reach first.
    """

    def __init__(self, limit: int, period: int, safety_seconds: float):
        self.limit, self.period, self.safety_seconds = int(limit), int(period), float(safety_seconds)
        self.used = 0
        self.stopped = ""
        self._deadline = 0.0

    def start(self) -> None:
        """Reset for a new query."""
        self.used, self.stopped = 0, ""
        self._deadline = time.perf_counter() + self.safety_seconds

    def _exceeded(self) -> str:
        return f"the query was stopped after {self.limit:,} units of work (too expensive)"

    def on_progress(self) -> int:
        """SQLite progress handler: non-zero interrupts the query."""
        self.used += self.period
        if self.used > self.limit:
            self.stopped = self._exceeded()
            return 1
        if time.perf_counter() > self._deadline:
            self.stopped = f"the query was stopped by the {self.safety_seconds:g} s safety limit (too slow)"
            return 1
        return 0

    def charge(self, units: int) -> None:
        """Add ``units``, or raise :class:`BudgetExceeded` (before the work is done) if they would pass the limit."""
        if self.used + units > self.limit:
            self.stopped = self._exceeded()
            raise BudgetExceeded(self.stopped)
        self.used += units


def _size(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    return len(repr(value))


def _text(value: Any) -> str:
    """How SQLite's date functions read an argument as text (blobs included)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else ""


def _delegate(helper: sqlite3.Connection, name: str, nargs: int) -> Callable[..., Any]:
    sql = f"SELECT {name}({', '.join('?' * nargs)})"

    def call(*args: Any) -> Any:
        try:
            return helper.execute(sql, args).fetchone()[0]
        except sqlite3.Error as exc:
            raise GuardRefusal(f"{name}(): {exc}") from None

    return call


def _quadratic(name: str, divisor: int, budget: Budget, real: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any) -> Any:
        budget.charge(CALL_COST + _size(args[0]) * _size(args[1]) // divisor)
        return real(*args)

    return wrapped


def _clock_guard(name: str, budget: Budget, real: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any) -> Any:
        budget.charge(CALL_COST + sum(_size(a) for a in args))
        words = {_text(a).strip().lower() for a in args}
        if not args or words & _CLOCK_WORDS:
            raise GuardRefusal(
                f"{name}() with 'now', 'localtime' or 'utc' (or no arguments) reads the machine's clock or time "
                "zone and is not allowed; use literal dates"
            )
        return real(*args)

    return wrapped


def install_guards(
    conn: sqlite3.Connection, helper: sqlite3.Connection, budget: Budget, on_error: Callable[[str], None]
) -> None:
    """Override the costly string functions and the clock functions of ``conn``.

    Args:
        conn: The connection that runs the agent's queries.
        helper: A private connection (with the same length limits) whose
            built-ins compute the real results.
        budget: Charged by the string-function wrappers.
        on_error: Called with the agent-facing message when a wrapper refuses
            a call (SQLite itself only reports that a function raised).
    """

    def reporting(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            try:
                return fn(*args)
            except (BudgetExceeded, GuardRefusal) as exc:
                on_error(str(exc))
                raise

        return call

    for name, (arities, divisor) in _QUADRATIC.items():
        for nargs in arities:
            real = _delegate(helper, name, nargs)
            conn.create_function(name, nargs, reporting(_quadratic(name, divisor, budget, real)), deterministic=True)
    for name in _CLOCK_FUNCTIONS:
        # -1: any number of arguments, like the built-ins; the real call passes them all through
        conn.create_function(
            name, -1, reporting(_clock_guard(name, budget, _variadic(helper, name))), deterministic=True
        )


def _variadic(helper: sqlite3.Connection, name: str) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        return _delegate(helper, name, len(args))(*args)

    return call


# ---------------------------------------------------------------------------- CTE expansion
# SQLite copies a common table expression's parse tree into every place that names it, before any
# callback can count the work: five levels that each name the previous one four times make 4**5 copies
# and ten levels exhaust memory while the statement is still being prepared. So the copies are
# estimated from the query's tokens first.
_TOKEN = re.compile(
    r"""\s+|--[^\n]*|/\*.*?(?:\*/|\Z)|'(?:[^']|'')*'?|x'[^']*'?"""
    r"""|"(?:[^"]|"")*"?|`[^`]*`?|\[[^\]]*\]?|([A-Za-z_][A-Za-z0-9_$]*)|(\()|(\))|.""",
    re.DOTALL | re.IGNORECASE,
)


def _tokens(sql: str) -> list[str]:
    """Lower-cased identifiers and keywords, ``(`` and ``)``, and ``.`` for anything else (strings, comments)."""
    out = []
    for match in _TOKEN.finditer(sql):
        word, opened, closed = match.groups()
        text = match.group(0)
        if word:
            out.append(word.lower())
        elif opened or closed:
            out.append(text)
        elif text[:1] in '"`[' and len(text) > 1:
            out.append(text[1:-1].replace('""', '"').lower())  # a quoted identifier
        elif not text.isspace():
            out.append(".")
    return out


def _matching(tokens: list[str]) -> dict[int, int]:
    """Index of each ``(`` -> index of its ``)`` (or the end, when unbalanced), in one pass."""
    pairs, stack = {}, []
    for i, token in enumerate(tokens):
        if token == "(":
            stack.append(i)
        elif token == ")" and stack:
            pairs[stack.pop()] = i
    pairs.update((i, len(tokens)) for i in stack)
    return pairs


def _definitions(tokens: list[str]) -> list[tuple[str, int, int]]:
    """``(name, body start, body end)`` of every ``name [(columns)] AS [NOT] [MATERIALIZED] (body)``.

    The name's own token is replaced by ``.`` in ``tokens`` so that it is not counted as a mention.
    """
    closing = _matching(tokens)
    found = []
    for i, token in enumerate(tokens[:-2]):
        j = i + 1
        if tokens[j] == "(":
            j = closing[j] + 1
        if token in ("(", ")", ".") or j >= len(tokens) or tokens[j] != "as":
            continue
        j += 1
        while j < len(tokens) and tokens[j] in ("not", "materialized"):
            j += 1
        if j < len(tokens) and tokens[j] == "(":
            found.append((i, token, j, closing[j]))
    for i, *_ in found:
        tokens[i] = "."
    return [(name, start, end) for _, name, start, end in found]


def cte_copies(sql: str, cap: int = 10**9) -> int:
    """An upper estimate of how many copies of common table expressions SQLite makes to prepare ``sql``.

    Every mention of a CTE's name (outside its own body) counts as one copy of
    it plus the copies its body makes; mentions inside nested bodies are
    counted again, so the estimate only errs high. Capped at ``cap``.
    """
    tokens = _tokens(sql)
    definitions = _definitions(tokens)
    names = {name for name, _, _ in definitions}
    memo: dict[str, int] = {}

    def copies(start: int, end: int, own: str, seen: frozenset[str]) -> int:
        total = 0
        for token in tokens[start:end]:
            if token in names and token != own and token not in seen:
                total = min(cap, total + size(token, seen | {own}))
        return total

    def size(name: str, seen: frozenset[str]) -> int:
        if name not in memo:
            memo[name] = min(cap, 1 + max(copies(s + 1, e, name, seen) for n, s, e in definitions if n == name))
        return memo[name]

    inside = {k for _, s, e in definitions for k in range(s, e + 1)}
    outside = [t if k not in inside else "." for k, t in enumerate(tokens)]
    return min(cap, sum(size(t, frozenset()) for t in outside if t in names))

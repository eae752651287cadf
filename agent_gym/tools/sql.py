"""A read-only, bounded SQL tool over an in-memory SQLite database.

:class:`SqlDatabase` holds a private in-memory copy of a database (made with
``serialize``/``deserialize``), locked down in layers so that nothing an
agent writes can change it, reach a file, exhaust memory or time, or depend on
anything but the database and the query text:

* ``PRAGMA query_only=ON`` and an authorizer that allows only ``SELECT``,
  reads, recursive CTEs, a harmless allow-list of schema ``PRAGMA``\\ s and
  functions outside a deny-list: writes, DDL, ``ATTACH``/``DETACH``,
  transactions, other ``PRAGMA``\\ s, ``load_extension`` and the functions in
  :data:`DENIED_FUNCTIONS` are refused (the authorizer also records which
  tables a query reads);
* SQLite's own limits (``Connection.setlimit``): no attached databases, strings
  and blobs of at most ``max_value_length`` bytes, bounded SQL length,
  ``LIKE`` pattern, columns, expression depth, compound selects, function
  arguments and program size;
* a deterministic **work budget** per query: SQLite virtual-machine steps
  (counted by the progress handler) plus a charge for each call of the string
  functions whose cost grows with the product of their arguments' sizes
  (``LIKE``, ``GLOB``, two-argument ``trim``, ``instr``, ``replace``; see
  :mod:`agent_gym.tools.sql_budget`). Whether a query finishes, and its
  result or error, depend only on the database and the query (for a given
  SQLite version), never on the machine's load;
* memory: every value is at most ``max_value_length`` bytes and every stored
  row costs several steps, so one query holds at most about
  ``max_steps * max_value_length / 10`` bytes (about 100 MB with the
  defaults; measured by ``benchmarks/sql_hostile.py``). Temporary tables and
  sorts stay in memory (``PRAGMA temp_store=MEMORY``): nothing is written to
  disk;
* prepare-time blow-ups: SQLite copies a common table expression into every
  place that names it before any callback runs, so the copies are estimated
  from the query's tokens and a query over ``max_cte_copies`` is refused;
* safety nets that the budgets should always reach first: a wall-clock limit
  per query (``max_seconds``, 10 s by default, against a measured worst case
  well under 1 s) and SQLite's hard heap limit (``heap_limit_bytes``, 256 MiB
  by default). The heap limit is process-wide: it counts every SQLite
  connection in the process, and ``PRAGMA hard_heap_limit`` only ever lowers
  it. One query stays far below it; only when three or more worst-case
  queries run at the same moment in one process (threads) can it fire, and
  which of them fails then depends on timing;
* replayability: ``random()``/``randomblob()``, the machine-describing
  ``sqlite_version()``/``sqlite_source_id()``/``sqlite_compileoption_*()``,
  ``CURRENT_DATE``/``CURRENT_TIME``/``CURRENT_TIMESTAMP`` and table-valued
  functions (``sqlite_stmt`` shows process state) are refused; the date and time
  functions refuse ``'now'``, ``'localtime'`` and ``'utc'``. ``changes()``,
  ``total_changes()`` and ``last_insert_rowid()`` stay allowed: on a
  read-only connection they are always 0;
* one statement per call; results clipped to a number of rows and characters.

Example:
    >>> import sqlite3
    >>> src = sqlite3.connect(":memory:")
    >>> _ = src.executescript("CREATE TABLE t(x INTEGER); INSERT INTO t VALUES (1), (2);")
    >>> db = SqlDatabase.from_connection(src)
    >>> db.query("SELECT SUM(x) FROM t").rows
    [(3,)]
    >>> SqlTool(db).call({"query": "DROP TABLE t"}).ok
    False
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field, fields
from typing import Any

from agent_gym.core.history import ToolResult
from agent_gym.core.tool import Tool, ToolContext
from agent_gym.tools.sql_budget import Budget, cte_copies, install_guards

__all__ = ["DENIED_FUNCTIONS", "QueryResult", "SqlDatabase", "SqlError", "SqlLimits", "SqlTool", "format_rows"]

_ALLOWED_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "foreign_key_list"}
)
DENIED_FUNCTIONS: dict[str, str] = {
    # name -> why (shown to the agent)
    "load_extension": "it loads native code",
    "readfile": "it reads files",
    "writefile": "it writes files",
    "edit": "it runs an editor",
    "fts3_tokenizer": "it can register native code",
    "random": "its result is random, so episodes would not replay",
    "randomblob": "its result is random, so episodes would not replay",
    # one call formats a padding width of up to 2**31 (printf('%.*c', 2000000000, 'x')) in a single VM step
    "printf": "one call can cost seconds that the step budget cannot see",
    "format": "one call can cost seconds that the step budget cannot see",
    "sqlite_version": "it describes the machine, so episodes would not replay elsewhere",
    "sqlite_source_id": "it describes the machine, so episodes would not replay elsewhere",
    "sqlite_compileoption_get": "it describes the machine, so episodes would not replay elsewhere",
    "sqlite_compileoption_used": "it describes the machine, so episodes would not replay elsewhere",
    "current_date": "it reads the clock, so episodes would not replay",
    "current_time": "it reads the clock, so episodes would not replay",
    "current_timestamp": "it reads the clock, so episodes would not replay",
    "fts5_source_id": "it describes the machine, so episodes would not replay elsewhere",
    "sqlite_log": "it writes to the process's error log",
    **dict.fromkeys(
        (
            "json",
            "json_valid",
            "json_type",
            "json_array_length",
            "json_extract",
            "->",
            "->>",
            "json_insert",
            "json_replace",
            "json_set",
            "json_remove",
            "json_patch",
        ),
        "it parses a JSON document on every call (up to 150 µs each), a cost the work budget cannot see; "
        "this tool offers no JSON",
    ),
}
"""Functions refused even inside a SELECT, with the reason the agent is told."""
_PROGRESS_PERIOD = 1_000  # VM steps between progress-handler calls


class SqlError(Exception):
    """A query was refused or failed; the message is meant for the agent."""


@dataclass(frozen=True)
class SqlLimits:
    """Bounds on what one query may cost and return.

    The defaults keep every query under about 100 MB of extra memory and well
    under a second on one core (``benchmarks/sql_hostile.py`` measures both
    over a hostile set); raise ``max_value_length`` for databases with long
    values, and memory grows in proportion.

    Attributes:
        max_rows: Rows shown per result; more are cut (and said to be).
        max_chars: Characters of a formatted result.
        max_cell_chars: Characters shown per value.
        max_sql_length: Longest accepted query text.
        max_steps: Work units per query before it is stopped: SQLite
            virtual-machine steps plus the charges of costly string functions
            (deterministic; a million steps of plain work take about 5-10 ms).
        max_value_length: Longest string, blob or row SQLite may build (bytes,
            ``SQLITE_LIMIT_LENGTH``).
        max_like_pattern_length: Longest ``LIKE``/``GLOB`` pattern (bytes).
        max_columns: Most columns in a table, result or ``GROUP BY``.
        max_function_args: Most arguments of one function call.
        max_program_size: Most virtual-machine instructions in one compiled query.
        max_cte_copies: Most copies of common table expressions a query may
            make (estimated from its text before SQLite prepares it: SQLite copies
            a CTE into every place that names it, and nested CTEs that each name
            the previous one several times exhaust memory while preparing).
        max_seconds: Wall-clock safety net per query; the work budget is meant
            to stop every query long before it (a stop by this limit depends on
            the machine's load, so it is the only non-replayable outcome).
        heap_limit_bytes: SQLite's process-wide hard heap limit, a safety net
            above the per-query memory bound (``None``: leave it alone). Setting
            it only ever lowers the limit, for every SQLite connection in the process.
    """

    max_rows: int = 50
    max_chars: int = 4_000
    max_cell_chars: int = 200
    max_sql_length: int = 4_000
    max_steps: int = 1_000_000
    max_value_length: int = 1_000
    max_like_pattern_length: int = 100
    max_columns: int = 100
    max_function_args: int = 32
    max_program_size: int = 10_000
    max_cte_copies: int = 1_000
    max_seconds: float = 10.0
    heap_limit_bytes: int | None = 256 * 2**20

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("max_seconds", "heap_limit_bytes") or value >= 1:
                continue
            raise ValueError(f"SqlLimits.{f.name} must be >= 1 (got {value})")
        if not self.max_seconds > 0:
            raise ValueError(f"SqlLimits.max_seconds must be > 0 (got {self.max_seconds})")
        if self.heap_limit_bytes is not None and self.heap_limit_bytes < 2**24:
            raise ValueError(f"SqlLimits.heap_limit_bytes must be None or >= 16 MiB (got {self.heap_limit_bytes})")


@dataclass(frozen=True)
class QueryResult:
    """The outcome of one successful query.

    Attributes:
        columns: Column names.
        rows: At most ``max_rows`` rows.
        truncated: More rows existed than were fetched.
        tables: Lower-cased names of the tables the query read.
    """

    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    truncated: bool = False
    tables: frozenset[str] = field(default_factory=frozenset)


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _open(data: bytes, limits: SqlLimits) -> sqlite3.Connection:
    """An in-memory connection holding a copy of ``data``, with SQLite's limits applied (no guards yet)."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    if data:
        conn.deserialize(data)
    conn.text_factory = _decode
    if hasattr(conn, "enable_load_extension"):  # absent when SQLite was built without extensions
        conn.enable_load_extension(False)
    for pragma in ("query_only=ON", "trusted_schema=OFF", "temp_store=MEMORY"):
        conn.execute(f"PRAGMA {pragma}")
    if limits.heap_limit_bytes is not None:
        conn.execute(f"PRAGMA hard_heap_limit={int(limits.heap_limit_bytes)}")  # only ever lowers it
    for limit, value in (
        (sqlite3.SQLITE_LIMIT_ATTACHED, 0),
        (sqlite3.SQLITE_LIMIT_LENGTH, limits.max_value_length),
        (sqlite3.SQLITE_LIMIT_SQL_LENGTH, limits.max_sql_length + 16),
        (sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, limits.max_like_pattern_length),
        (sqlite3.SQLITE_LIMIT_COLUMN, limits.max_columns),
        (sqlite3.SQLITE_LIMIT_FUNCTION_ARG, limits.max_function_args),
        (sqlite3.SQLITE_LIMIT_VDBE_OP, limits.max_program_size),
        (sqlite3.SQLITE_LIMIT_EXPR_DEPTH, 100),
        (sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, 50),
        (sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH, 1),
        (sqlite3.SQLITE_LIMIT_WORKER_THREADS, 0),
    ):
        conn.setlimit(limit, value)
    return conn


class _QueryLog:
    """What the authorizer and the guards saw during one query."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.tables: set[str] = set()
        self.denied: list[str] = []
        self.guard_error = ""

    def on_guard_error(self, message: str) -> None:
        self.guard_error = message

    def authorize(self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            if arg1:
                self.tables.add(arg1.lower())
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            name = (arg2 or "").lower()
            if name in DENIED_FUNCTIONS:
                self.denied.append(f"function {name}() ({DENIED_FUNCTIONS[name]})")
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _ALLOWED_PRAGMAS:
            return sqlite3.SQLITE_OK
        writes = (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE)
        if action in writes and (arg1 or "").lower().startswith("sqlite_"):
            self.denied.append("schema change (create/drop/alter)")  # DDL first edits the schema table
        else:
            self.denied.append(_ACTION_NAMES.get(action, f"action {action}"))
        return sqlite3.SQLITE_DENY


class SqlDatabase:
    """A hardened, read-only in-memory SQLite database.

    Build it with :meth:`from_connection` or :meth:`from_bytes`; the source is
    copied, never shared. It pickles and deep-copies as its bytes and limits
    (the connections are rebuilt), so an env holding one can be copied mid-episode.
    """

    def __init__(self, data: bytes, limits: SqlLimits | None = None):
        self.limits = limits or SqlLimits()
        self._data = bytes(data)
        self._budget = Budget(self.limits.max_steps, _PROGRESS_PERIOD, self.limits.max_seconds)
        self._log = _QueryLog()
        self._helper = _open(b"", self.limits)  # computes the results of the guarded built-ins
        conn = _open(self._data, self.limits)
        # the callbacks hold only the budget and the log, never this object: no reference cycle keeps a
        # dropped database (and its SQLite memory, counted against the heap limit) alive until a GC pass
        install_guards(conn, self._helper, self._budget, self._log.on_guard_error)
        conn.set_authorizer(self._log.authorize)
        conn.set_progress_handler(self._budget.on_progress, _PROGRESS_PERIOD)
        self._conn = conn

    @classmethod
    def from_connection(cls, source: sqlite3.Connection, limits: SqlLimits | None = None) -> SqlDatabase:
        """A read-only copy of ``source``'s main database."""
        return cls(source.serialize(), limits)

    @classmethod
    def from_bytes(cls, data: bytes, limits: SqlLimits | None = None) -> SqlDatabase:
        """A read-only database from ``sqlite3.Connection.serialize()`` bytes."""
        return cls(data, limits)

    def __reduce__(self) -> tuple[Any, ...]:
        # the database never changes, so its original bytes and limits rebuild an equal copy
        return (type(self), (self._data, self.limits))

    def __deepcopy__(self, memo: dict[int, Any]) -> SqlDatabase:
        return type(self)(self._data, self.limits)

    @property
    def last_query_cost(self) -> int:
        """Work units the last query used: VM steps (counted per 1,000) plus string-function charges.

        Deterministic: the same query on the same database always costs the same.
        """
        return self._budget.used

    def snapshot(self) -> bytes:
        """The database's bytes (to check that nothing changed it)."""
        return self._conn.serialize()

    def query(self, sql: str) -> QueryResult:
        """Run one read-only statement.

        Raises:
            SqlError: The statement was refused, invalid, too expensive, or
                returned no result set. Nothing else escapes.
        """
        if not isinstance(sql, str) or not sql.strip():
            raise SqlError("the query is empty")
        if len(sql) > self.limits.max_sql_length:
            raise SqlError(f"the query is {len(sql)} characters long (limit {self.limits.max_sql_length})")
        if "\x00" in sql:
            raise SqlError("the query contains a NUL character")
        copies = cte_copies(sql, cap=10 * self.limits.max_cte_copies)
        if copies > self.limits.max_cte_copies:
            raise SqlError(
                f"the query's common table expressions expand to {copies:,} or more copies "
                f"(limit {self.limits.max_cte_copies:,}); name each one fewer times"
            )
        self._log.reset()
        self._budget.start()
        cursor = self._conn.cursor()
        try:
            cursor.execute(sql)
            if cursor.description is None:
                raise SqlError("the statement returned no rows; only SELECT queries are allowed")
            rows = cursor.fetchmany(self.limits.max_rows + 1)
        except sqlite3.ProgrammingError as exc:
            raise SqlError(self._explain(exc, one_statement="one statement" in str(exc))) from None
        except (sqlite3.Error, OverflowError, MemoryError, ValueError, RecursionError) as exc:
            raise SqlError(self._explain(exc)) from None
        finally:
            cursor.close()
        columns = tuple(d[0] for d in cursor.description or ())
        truncated = len(rows) > self.limits.max_rows
        return QueryResult(columns, rows[: self.limits.max_rows], truncated, frozenset(self._log.tables))

    def _explain(self, exc: BaseException, one_statement: bool = False) -> str:
        if one_statement:
            return "only one SQL statement per call is allowed"
        if self._budget.stopped:
            return self._budget.stopped
        if self._log.guard_error:
            return self._log.guard_error
        if self._log.denied:
            denied = ", ".join(dict.fromkeys(self._log.denied))
            if any(d.startswith("function ") for d in self._log.denied):
                return f"not allowed: {denied}"
            return f"not allowed: {denied} (this database is read-only; use a single SELECT)"
        text = str(exc)
        if "too big" in text:
            return (
                f"a string, blob, row or result-column name is too big (the limit is "
                f"{self.limits.max_value_length:,} bytes; give long expressions a short alias with AS)"
            )
        if isinstance(exc, MemoryError) or "out of memory" in text:  # Python raises SQLITE_NOMEM as a bare MemoryError
            return (
                "the query is too large: it compiles to more than "
                f"{self.limits.max_program_size:,} instructions or exhausted SQLite's memory limit"
            )
        if "user-defined function raised exception" in text:
            return "a string function received text that is not valid UTF-8"
        return f"{type(exc).__name__}: {exc}"


_ACTION_NAMES = {
    getattr(sqlite3, name): name.removeprefix("SQLITE_").replace("_", " ").lower()
    for name in dir(sqlite3)
    if name.startswith(("SQLITE_CREATE", "SQLITE_DROP", "SQLITE_ALTER"))
    or name
    in (
        "SQLITE_INSERT",
        "SQLITE_UPDATE",
        "SQLITE_DELETE",
        "SQLITE_ATTACH",
        "SQLITE_DETACH",
        "SQLITE_PRAGMA",
        "SQLITE_TRANSACTION",
        "SQLITE_SAVEPOINT",
        "SQLITE_REINDEX",
        "SQLITE_ANALYZE",
    )
}


def _cell(value: Any, limit: int) -> str:
    if value is None:
        text = "NULL"
    elif isinstance(value, float):
        text = f"{value:.10g}"
    elif isinstance(value, bytes):
        text = f"x'{value[: limit // 2].hex()}'"
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_rows(result: QueryResult, limits: SqlLimits | None = None) -> str:
    """``col | col`` header, one line per row, and a row count, within ``limits.max_chars``."""
    limits = limits or SqlLimits()
    lines = [" | ".join(_cell(c, limits.max_cell_chars) for c in result.columns)]
    lines += [" | ".join(_cell(v, limits.max_cell_chars) for v in row) for row in result.rows]
    more = f"first {len(result.rows)} rows shown; more were cut" if result.truncated else f"{len(result.rows)} rows"
    footer = f"({more})"
    text = "\n".join(lines)
    if len(text) + len(footer) + 1 > limits.max_chars:
        text = text[: max(0, limits.max_chars - len(footer) - 30)] + "\n[... result cut]"
    return f"{text}\n{footer}"


class SqlTool(Tool):
    """The ``sql`` tool: one read-only SELECT against the task's database.

    Result metadata: ``tables`` (tables read), ``evidence`` (``table:<name>``
    for each, for process rewards), ``columns``, ``row_count`` and ``truncated``.
    """

    name = "sql"
    description = (
        "Run one read-only SQLite SELECT statement against the database and see up to 50 result rows. "
        "Example: SELECT name FROM customers WHERE city = 'Lyon'"
    )
    parameters = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "One SQLite SELECT statement."}},
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(self, database: SqlDatabase):
        super().__init__()
        self.database = database

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from its database: the base class's schema validator holds closures that do not pickle
        return (type(self), (self.database,))

    def run(self, ctx: ToolContext, query: str) -> ToolResult:
        try:
            result = self.database.query(query)
        except SqlError as exc:
            return ToolResult.error(str(exc), reason="sql_error")
        tables = sorted(result.tables)
        metadata = {
            "tables": tables,
            "evidence": [f"table:{t}" for t in tables],
            "columns": list(result.columns),
            "row_count": len(result.rows),
            "truncated": result.truncated,
        }
        return ToolResult(format_rows(result, self.database.limits), metadata=metadata)

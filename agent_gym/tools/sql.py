"""A read-only, bounded SQL tool over an in-memory SQLite database.

:class:`SqlDatabase` holds a private in-memory copy of a database (made with
``serialize``/``deserialize``), locked down in layers so that nothing an
agent writes can change it, reach a file, or hang the process:

* ``PRAGMA query_only=ON`` and an authorizer that allows only ``SELECT``,
  reads, recursive CTEs, a harmless allow-list of schema ``PRAGMA``\\ s and
  functions outside a deny-list: writes, DDL, ``ATTACH``/``DETACH``,
  transactions, other ``PRAGMA``\\ s and ``load_extension`` are refused (the
  authorizer also records which tables a query reads);
* extension loading off where the build has it; ``SQLITE_LIMIT_ATTACHED = 0``,
  bounded string/blob length, SQL length and expression depth;
* a progress handler that stops a query after a fixed budget of virtual-machine
  steps (deterministic) or a wall-clock safety limit, so a runaway recursive
  CTE or a huge cross join returns an error instead of hanging;
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
import time
from dataclasses import dataclass, field
from typing import Any

from agent_gym.core.history import ToolResult
from agent_gym.core.tool import Tool, ToolContext

__all__ = ["QueryResult", "SqlDatabase", "SqlError", "SqlLimits", "SqlTool", "format_rows"]

_ALLOWED_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "foreign_key_list"}
)
# Functions refused even inside a SELECT: file/extension access, non-determinism (every
# episode must replay exactly under a seed), and printf/format, whose padding width
# (e.g. printf('%.*c', 2000000000, 'x')) burns seconds of CPU inside one VM step.
_DENIED_FUNCTIONS = frozenset(
    {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "random", "randomblob", "printf", "format"}
)
_PROGRESS_PERIOD = 1_000  # VM steps between progress-handler calls


class SqlError(Exception):
    """A query was refused or failed; the message is meant for the agent."""


@dataclass(frozen=True)
class SqlLimits:
    """Bounds on what one query may cost and return.

    Attributes:
        max_rows: Rows shown per result; more are cut (and said to be).
        max_chars: Characters of a formatted result.
        max_cell_chars: Characters shown per value.
        max_sql_length: Longest accepted query text.
        max_steps: SQLite virtual-machine steps per query before it is stopped
            (deterministic; about 10-50 ms of work per million steps).
        max_seconds: Wall-clock safety limit per query.
        max_value_length: Longest string or blob SQLite may build (bytes).
    """

    max_rows: int = 50
    max_chars: int = 4_000
    max_cell_chars: int = 200
    max_sql_length: int = 4_000
    max_steps: int = 2_000_000
    max_seconds: float = 2.0
    max_value_length: int = 1_000_000

    def __post_init__(self) -> None:
        for name in ("max_rows", "max_chars", "max_cell_chars", "max_sql_length", "max_steps", "max_value_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"SqlLimits.{name} must be >= 1 (got {getattr(self, name)})")
        if not self.max_seconds > 0:
            raise ValueError(f"SqlLimits.max_seconds must be > 0 (got {self.max_seconds})")


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


class SqlDatabase:
    """A hardened, read-only in-memory SQLite database.

    Build it with :meth:`from_connection` or :meth:`from_bytes`; the source is
    copied, never shared.
    """

    def __init__(self, data: bytes, limits: SqlLimits | None = None):
        self.limits = limits or SqlLimits()
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.deserialize(data)
        conn.text_factory = _decode
        if hasattr(conn, "enable_load_extension"):  # absent when SQLite was built without extensions
            conn.enable_load_extension(False)
        conn.execute("PRAGMA query_only=ON")
        conn.execute("PRAGMA trusted_schema=OFF")
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self.limits.max_value_length)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, self.limits.max_sql_length + 16)
        conn.setlimit(sqlite3.SQLITE_LIMIT_EXPR_DEPTH, 100)
        conn.setlimit(sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, 50)
        conn.set_authorizer(self._authorize)
        conn.set_progress_handler(self._progress, _PROGRESS_PERIOD)
        self._conn = conn
        self._tables: set[str] = set()
        self._denied: list[str] = []
        self._ticks = 0
        self._deadline = 0.0
        self._stopped = ""

    @classmethod
    def from_connection(cls, source: sqlite3.Connection, limits: SqlLimits | None = None) -> SqlDatabase:
        """A read-only copy of ``source``'s main database."""
        return cls(source.serialize(), limits)

    @classmethod
    def from_bytes(cls, data: bytes, limits: SqlLimits | None = None) -> SqlDatabase:
        """A read-only database from ``sqlite3.Connection.serialize()`` bytes."""
        return cls(data, limits)

    def snapshot(self) -> bytes:
        """The database's bytes (to check that nothing changed it)."""
        return self._conn.serialize()

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            if arg1:
                self._tables.add(arg1.lower())
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() in _DENIED_FUNCTIONS:
                self._denied.append(f"function {arg2}()")
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _ALLOWED_PRAGMAS:
            return sqlite3.SQLITE_OK
        writes = (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE)
        if action in writes and (arg1 or "").lower().startswith("sqlite_"):
            self._denied.append("schema change (create/drop/alter)")  # DDL first edits the schema table
        else:
            self._denied.append(_ACTION_NAMES.get(action, f"action {action}"))
        return sqlite3.SQLITE_DENY

    def _progress(self) -> int:
        self._ticks += 1
        if self._ticks * _PROGRESS_PERIOD > self.limits.max_steps:
            self._stopped = f"the query was stopped after {self.limits.max_steps:,} steps (too expensive)"
            return 1
        if time.perf_counter() > self._deadline:
            self._stopped = f"the query was stopped after {self.limits.max_seconds} s (too slow)"
            return 1
        return 0

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
        self._tables, self._denied, self._ticks, self._stopped = set(), [], 0, ""
        self._deadline = time.perf_counter() + self.limits.max_seconds
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
        return QueryResult(columns, rows[: self.limits.max_rows], truncated, frozenset(self._tables))

    def _explain(self, exc: BaseException, one_statement: bool = False) -> str:
        if one_statement:
            return "only one SQL statement per call is allowed"
        if self._stopped:
            return self._stopped
        if self._denied:
            denied = ", ".join(dict.fromkeys(self._denied))
            return f"not allowed: {denied} (this database is read-only; use a single SELECT)"
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

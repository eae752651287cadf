"""The SQL tool's exact observations, boundaries and lock-down layers (issue 16: numbers where they are known).

The agent sees these messages as observations, so they are stated in full; each lock-down layer is checked
on its own (with the others removed), so that losing one layer fails a test even while the others still hold.
"""

import os
import subprocess
import sys
import threading
from copy import deepcopy

import pytest

from agent_gym.tools.sql import QueryResult, SqlDatabase, SqlError, SqlLimits, SqlTool, _cell, format_rows
from tests.agent_gym.tools.test_sql import _source

READ_ONLY = " (this database is read-only; use a single SELECT)"


@pytest.fixture
def db() -> SqlDatabase:
    return SqlDatabase.from_connection(_source())


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("   ", "the query is empty"),
        ("SELECT\x00 1", "the query contains a NUL character"),
        ("-- a comment", "the statement returned no rows; only SELECT queries are allowed"),
        ("SELECT 1; SELECT 2", "only one SQL statement per call is allowed"),
        ("SELECT * FROM nowhere", "OperationalError: no such table: nowhere"),
        (
            "SELECT ?",
            "ProgrammingError: Incorrect number of bindings supplied. The current statement uses 1, and there are 0 "
            "supplied.",
        ),
        ("DROP TABLE customers", "not allowed: schema change (create/drop/alter)" + READ_ONLY),
        ("DELETE FROM orders", "not allowed: delete" + READ_ONLY),
        ("ATTACH DATABASE 'x.db' AS x", "not allowed: attach" + READ_ONLY),
        (
            "SELECT random() + randomblob(2) + random()",  # each denied function once
            "not allowed: function random() (its result is random, so episodes would not replay), "
            "function randomblob() (its result is random, so episodes would not replay)",
        ),
        ("SELECT CAST(x'ff' AS TEXT) LIKE 'a'", "a string function received text that is not valid UTF-8"),
    ],
)
def test_refusals_are_exact_observations(db, query, message):
    with pytest.raises(SqlError) as caught:
        db.query(query)
    assert str(caught.value) == message
    assert SqlTool(db).call({"query": query}).content == f"Error: {message}"


def test_the_query_length_limit_is_inclusive():
    db = SqlDatabase.from_connection(_source(), SqlLimits(max_sql_length=20))
    assert db.query("SELECT 1" + " " * 12).rows == [(1,)]  # exactly 20 characters
    with pytest.raises(SqlError) as caught:
        db.query("SELECT 1" + " " * 13)
    assert str(caught.value) == "the query is 21 characters long (limit 20)"


def test_the_cte_copy_limit_is_inclusive():
    db = SqlDatabase.from_connection(_source(), SqlLimits(max_cte_copies=2))
    assert db.query("WITH a AS (SELECT 1) SELECT * FROM a, a AS b").rows == [(1, 1)]  # 2 copies
    with pytest.raises(SqlError) as caught:
        db.query("WITH a AS (SELECT 1) SELECT * FROM a, a AS b, a AS c")
    assert str(caught.value) == (
        "the query's common table expressions expand to 3 or more copies (limit 2); name each one fewer times"
    )


def test_a_query_too_large_to_compile_names_the_instruction_limit():
    db = SqlDatabase.from_connection(_source(), SqlLimits(max_program_size=50))
    with pytest.raises(SqlError) as caught:
        db.query("SELECT " + " + ".join(["id"] * 40) + " FROM orders")
    assert str(caught.value) == (
        "the query is too large: it compiles to more than 50 instructions or exhausted SQLite's memory limit"
    )


@pytest.mark.parametrize(("rows", "truncated"), [(5, False), (6, True)])
def test_exactly_max_rows_rows_are_not_truncated(rows, truncated):
    db = SqlDatabase.from_connection(_source(), SqlLimits(max_rows=5))
    result = db.query(f"SELECT id FROM orders LIMIT {rows}")
    assert result.rows == [(i,) for i in range(5)] and result.truncated is truncated


def test_tool_metadata_is_exact(db):
    result = SqlTool(db).call({"query": "SELECT c.city, o.quantity FROM customers c JOIN orders o ON o.id = c.id"})
    assert result.metadata == {
        "tables": ["customers", "orders"],
        "evidence": ["table:customers", "table:orders"],
        "columns": ["city", "quantity"],
        "row_count": 20,
        "truncated": False,
    }


# ---------------------------------------------------------------------------- rendering
def test_cells_are_cut_at_the_limit_with_an_ellipsis():
    assert _cell("a" * 200, 200) == "a" * 200
    assert _cell("a" * 201, 200) == "a" * 197 + "..."
    assert _cell(b"\xff" * 150, 200) == ("x'" + "ff" * 100 + "'")[:197] + "..."  # at most limit // 2 bytes shown
    assert _cell(b"\xff" * 3, 200) == "x'ffffff'"
    assert _cell(None, 10) == "NULL" and _cell(1 / 3, 20) == "0.3333333333"


def _result(n: int) -> QueryResult:
    return QueryResult(("n",), [(f"{i:04d}",) for i in range(n)])


def test_a_result_that_fits_exactly_is_not_cut():
    full = format_rows(_result(10), SqlLimits(max_chars=10_000))
    assert full == "n\n" + "\n".join(f"{i:04d}" for i in range(10)) + "\n(10 rows)"
    assert format_rows(_result(10), SqlLimits(max_chars=len(full))) == full


def test_a_result_one_character_too_long_is_cut_to_leave_room_for_the_note():
    full = format_rows(_result(10), SqlLimits(max_chars=10_000))
    text = full.removesuffix("\n(10 rows)")
    cut = format_rows(_result(10), SqlLimits(max_chars=len(full) - 1))
    assert cut == text[: len(full) - 1 - len("(10 rows)") - 30] + "\n[... result cut]\n(10 rows)"
    assert format_rows(_result(10), SqlLimits(max_chars=10)) == "\n[... result cut]\n(10 rows)"


# ---------------------------------------------------------------------------- validation and copies
@pytest.mark.parametrize(
    "limits", [{"max_rows": 1}, {"max_seconds": 0.5}, {"heap_limit_bytes": None}, {"heap_limit_bytes": 2**24}]
)
def test_smallest_valid_limits_are_accepted(limits):
    assert getattr(SqlLimits(**limits), next(iter(limits))) == next(iter(limits.values()))


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"max_steps": 0}, "SqlLimits.max_steps must be >= 1 (got 0)"),
        ({"max_program_size": 0}, "SqlLimits.max_program_size must be >= 1 (got 0)"),
        ({"max_seconds": 0.0}, "SqlLimits.max_seconds must be > 0 (got 0.0)"),
        ({"heap_limit_bytes": 2**24 - 1}, "SqlLimits.heap_limit_bytes must be None or >= 16 MiB (got 16777215)"),
    ],
)
def test_invalid_limits_are_named(limits, message):
    with pytest.raises(ValueError) as caught:
        SqlLimits(**limits)
    assert str(caught.value) == message


def test_copies_and_byte_databases_keep_their_limits(db):
    limits = SqlLimits(max_rows=3, max_chars=500)
    original = SqlDatabase.from_bytes(db.snapshot(), limits)
    for copy in (original, deepcopy(original)):
        assert copy.limits == limits
        assert len(copy.query("SELECT id FROM orders").rows) == 3


# ---------------------------------------------------------------------------- lock-down layers, one at a time
def test_the_database_is_usable_from_another_thread(db):
    # rollout engines run tool calls of several episodes on worker threads
    out = []
    worker = threading.Thread(target=lambda: out.append(db.query("SELECT COUNT(*) FROM orders").rows))
    worker.start()
    worker.join()
    assert out == [[(80,)]]


def test_nothing_is_written_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = SqlDatabase.from_connection(_source())
    db.query("SELECT COUNT(*), date('2000-01-01') FROM orders WHERE 'abc' LIKE 'a%'")  # the helper runs too
    assert list(tmp_path.iterdir()) == []


def test_each_layer_holds_without_the_authorizer(db):
    conn = db._conn
    conn.set_authorizer(None)  # only SQLite's own settings are left
    assert conn.execute("PRAGMA query_only").fetchone() == (1,)
    assert conn.execute("PRAGMA trusted_schema").fetchone() == (0,)
    assert conn.execute("PRAGMA temp_store").fetchone() == (2,)  # MEMORY
    import sqlite3

    with pytest.raises(sqlite3.OperationalError, match="attempt to write a readonly database"):
        conn.execute("DELETE FROM orders")
    with pytest.raises(sqlite3.OperationalError, match="not authorized"):
        conn.execute("SELECT load_extension('/nonexistent/x.so')")  # extension loading is off in SQLite itself
    limits = {
        sqlite3.SQLITE_LIMIT_ATTACHED: 0,
        sqlite3.SQLITE_LIMIT_LENGTH: 1_000,
        sqlite3.SQLITE_LIMIT_SQL_LENGTH: 4_016,
        sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH: 100,
        sqlite3.SQLITE_LIMIT_COLUMN: 100,
        sqlite3.SQLITE_LIMIT_FUNCTION_ARG: 32,
        sqlite3.SQLITE_LIMIT_VDBE_OP: 10_000,
        sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 100,
        sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 50,
        sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 1,
        sqlite3.SQLITE_LIMIT_WORKER_THREADS: 0,
    }
    assert {k: conn.getlimit(k) for k in limits} == limits


def test_the_heap_limit_is_set_in_a_fresh_process():
    # process-wide and only ever lowered, so it is observed in a process of its own
    code = (
        "import sqlite3\n"
        "from agent_gym.tools.sql import SqlDatabase, SqlLimits\n"
        "SqlDatabase(b'', SqlLimits(heap_limit_bytes=2**25))\n"
        "print(sqlite3.connect(':memory:').execute('PRAGMA hard_heap_limit').fetchone()[0])\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert int(out.stdout) == 2**25

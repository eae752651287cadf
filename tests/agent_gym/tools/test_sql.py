import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_gym.tools.sql import QueryResult, SqlDatabase, SqlError, SqlLimits, SqlTool, format_rows


def _source() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.executescript(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT);"
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, quantity INTEGER);"
    )
    conn.executemany(
        "INSERT INTO customers VALUES (?, ?, ?)", [(i, f"c{i}", "Oslo" if i % 2 else "Lima") for i in range(20)]
    )
    conn.executemany("INSERT INTO orders VALUES (?, ?, ?)", [(i, i % 20, i % 7) for i in range(80)])
    return conn


@pytest.fixture
def db() -> SqlDatabase:
    return SqlDatabase.from_connection(_source())


_HOSTILE = [
    ("SELECT load_extension('x')", "load_extension"),
    ("ATTACH DATABASE '/etc/passwd' AS p", "attach"),
    ("DETACH DATABASE main", "detach"),
    ("PRAGMA writable_schema=ON", "pragma"),
    ("PRAGMA query_only=OFF", "pragma"),
    ("DROP TABLE customers", "schema change"),
    ("DELETE FROM orders", "delete"),
    ("INSERT INTO orders VALUES (999, 1, 1)", "insert"),
    ("UPDATE customers SET name = 'x'", "update"),
    ("CREATE TABLE t (x)", "schema change"),
    ("CREATE TEMP VIEW v AS SELECT 1", "not allowed"),
    ("BEGIN", "transaction"),
    ("VACUUM INTO '/tmp/agent_gym_stolen.db'", "not allowed"),
    ("SELECT 1; DROP TABLE customers", "one SQL statement"),
    ("x' OR '1'='1'; DROP TABLE orders; --", "Error"),
    ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r) SELECT count(*) FROM r", "stopped"),
    ("SELECT count(*) FROM orders a, orders b, orders c, orders d, orders e", "stopped"),
    ("SELECT zeroblob(2000000000)", "too big"),
    ("SELECT printf('%.*c', 2000000000, 'x')", "printf"),
    ("SELECT random()", "random"),
    ("", "empty"),
    ("-- only a comment", "only SELECT"),
    ("SELECT\x00 1", "NUL"),
    ("SELECT * FROM nope", "no such table"),
]


@pytest.mark.parametrize(("query", "message"), _HOSTILE)
def test_hostile_queries_are_refused_without_side_effects(db, query, message):
    before = db.snapshot()
    result = SqlTool(db).call({"query": query})
    assert not result.ok and result.content.startswith("Error:")
    assert message.lower() in result.content.lower()
    assert db.snapshot() == before
    assert db.query("SELECT COUNT(*) FROM orders").rows == [(80,)]  # still usable afterwards


def test_reads_are_recorded_by_the_authorizer_not_by_text(db):
    assert db.query("SELECT 'orders', 'customers'").tables == frozenset()
    joined = db.query("SELECT c.name FROM customers AS c JOIN orders o ON o.customer_id = c.id LIMIT 1")
    assert joined.tables == {"customers", "orders"}
    nested = db.query("WITH x AS (SELECT customer_id FROM ORDERS) SELECT COUNT(*) FROM x")
    assert nested.tables == {"orders"}


def test_rows_and_characters_are_bounded():
    db = SqlDatabase.from_connection(_source(), SqlLimits(max_rows=5, max_chars=300, max_cell_chars=10))
    result = db.query("SELECT * FROM orders")
    assert len(result.rows) == 5 and result.truncated
    text = format_rows(result, db.limits)
    assert "first 5 rows shown" in text
    long = SqlTool(db).call({"query": "SELECT group_concat(name, '-') FROM customers"})
    assert long.ok and "..." in long.content and len(long.content) <= 300


def test_tool_result_format_and_metadata(db):
    result = SqlTool(db).call({"query": "SELECT city, COUNT(*) AS n FROM customers GROUP BY city ORDER BY city"})
    assert result.ok
    assert result.content.splitlines() == ["city | n", "Lima | 10", "Oslo | 10", "(2 rows)"]
    assert result.metadata["evidence"] == ["table:customers"] and result.metadata["row_count"] == 2


def test_schema_pragmas_are_allowed(db):
    assert [r[1] for r in db.query("PRAGMA table_info(customers)").rows] == ["id", "name", "city"]


def test_values_are_rendered_safely(db):
    row = db.query("SELECT NULL, 1.5, x'ff00', CAST(x'ff' AS TEXT)").rows[0]
    assert row[0] is None and row[2] == b"\xff\x00" and row[3] == "\ufffd"
    text = format_rows(QueryResult(("a", "b", "c", "d"), [row]))
    assert "NULL | 1.5 | x'ff00'" in text


def test_source_is_copied_not_shared():
    src = _source()
    db = SqlDatabase.from_connection(src)
    src.execute("DELETE FROM orders")
    assert db.query("SELECT COUNT(*) FROM orders").rows == [(80,)]


def test_limits_validate():
    with pytest.raises(ValueError, match="max_rows"):
        SqlLimits(max_rows=0)


_SQL_WORDS = [
    "SELECT",
    "*",
    "FROM",
    "customers",
    "orders",
    "WHERE",
    "1=1",
    "DROP",
    "TABLE",
    "PRAGMA",
    ";",
    "'",
    "(",
    ")",
]


@given(st.text(max_size=120) | st.lists(st.sampled_from(_SQL_WORDS), max_size=10).map(" ".join))
def test_any_query_text_gives_a_result_and_changes_nothing(text):
    db = _SHARED
    result = SqlTool(db).call({"query": text})
    assert isinstance(result.content, str) and len(result.content) <= db.limits.max_chars + 50
    if not result.ok:
        assert result.content.startswith("Error:")
    assert db.snapshot() == _SNAPSHOT


_SHARED = SqlDatabase.from_connection(_source())
_SNAPSHOT = _SHARED.snapshot()


def test_query_raises_sql_error_for_the_caller(db):
    with pytest.raises(SqlError, match="schema change"):
        db.query("DROP TABLE orders")

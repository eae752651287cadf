import gc
import os
import pickle
import sqlite3
import weakref
from copy import deepcopy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_gym.tools.sql import (
    _PROGRESS_PERIOD,
    DENIED_FUNCTIONS,
    QueryResult,
    SqlDatabase,
    SqlError,
    SqlLimits,
    SqlTool,
    format_rows,
)
from agent_gym.tools.sql_budget import CALL_COST, cte_copies
from tests.conftest import load_script


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
    ("SELECT * FROM sqlite_stmt", "not allowed"),
    ("SELECT * FROM json_each('[1]')", "not allowed"),
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


# ---------------------------------------------------------------------------- refused functions (issue 16)
# One query per denied function, written out (not derived from the deny list), so that a function
# dropped from DENIED_FUNCTIONS fails its own case.
_DENIED_CASES = {
    "load_extension": "SELECT load_extension('/tmp/x.so')",
    "readfile": "SELECT readfile('/etc/passwd')",
    "writefile": "SELECT writefile('/tmp/agent_gym_x', 'y')",
    "edit": "SELECT edit('x')",
    "fts3_tokenizer": "SELECT fts3_tokenizer('simple')",
    "random": "SELECT random()",
    "randomblob": "SELECT randomblob(4)",
    "printf": "SELECT printf('%d', 1)",
    "format": "SELECT format('%.*c', 2000000000, 'x')",
    "sqlite_version": "SELECT sqlite_version()",
    "sqlite_source_id": "SELECT sqlite_source_id()",
    "sqlite_compileoption_get": "SELECT sqlite_compileoption_get(0)",
    "sqlite_compileoption_used": "SELECT sqlite_compileoption_used('SECURE_DELETE')",
    "current_date": "SELECT current_date",
    "current_time": "SELECT CURRENT_TIME",
    "current_timestamp": "SELECT name FROM customers WHERE current_timestamp > '2000'",
    "fts5_source_id": "SELECT fts5_source_id()",
    "sqlite_log": "SELECT sqlite_log(1, 'hello')",
    "json": "SELECT json('[1, 2]')",
    "json_valid": "SELECT json_valid('[1]')",
    "json_type": "SELECT json_type('[1]')",
    "json_array_length": "SELECT json_array_length('[1, 2]')",
    "json_extract": """SELECT json_extract('{"a": 1}', '$.a')""",
    "->": """SELECT '{"a": 1}' -> '$.a'""",
    "->>": """SELECT '{"a": 1}' ->> 'a'""",
    "json_insert": """SELECT json_insert('{}', '$.a', 1)""",
    "json_replace": """SELECT json_replace('{"a": 1}', '$.a', 2)""",
    "json_set": """SELECT json_set('{}', '$.a', 1)""",
    "json_remove": """SELECT json_remove('{"a": 1}', '$.a')""",
    "json_patch": """SELECT json_patch('{"a": 1}', '{"b": 2}')""",
}


def test_every_denied_function_has_its_own_case():
    assert set(_DENIED_CASES) == set(DENIED_FUNCTIONS)


@pytest.mark.parametrize("name", sorted(_DENIED_CASES))
def test_each_denied_function_is_refused_by_name(name):
    db = SqlDatabase.from_connection(_source())
    if name in ("readfile", "writefile", "edit"):
        # shell-only functions: give this build a stand-in so that the authorizer, not "no such function", refuses
        db._conn.create_function(name, -1, lambda *args: "leaked")
    result = SqlTool(db).call({"query": _DENIED_CASES[name]})
    assert not result.ok
    assert f"not allowed: function {name}() ({DENIED_FUNCTIONS[name]})" in result.content


# ---------------------------------------------------------------------------- replayable results
_CLOCK_QUERIES = [
    "SELECT date('now')",
    "SELECT time('now')",
    "SELECT datetime('now')",
    "SELECT julianday('now')",
    "SELECT strftime('%s', 'now')",
    "SELECT unixepoch('now')",
    "SELECT date()",
    "SELECT date(' NOW ')",
    "SELECT date(x'6e6f77')",  # 'now' as a blob
    "SELECT datetime('2000-01-01', 'localtime')",
    "SELECT datetime('2000-01-01', 'utc')",
    "SELECT name FROM customers WHERE date('now', '-1 day') > '2000'",
]


@pytest.mark.parametrize("query", _CLOCK_QUERIES)
def test_clock_and_time_zone_reads_are_refused(db, query):
    result = SqlTool(db).call({"query": query})
    assert not result.ok and "reads the machine's clock or time zone" in result.content


def test_literal_dates_keep_their_exact_values(db):
    row = db.query(
        "SELECT date('2024-02-28', '+1 day'), julianday('2000-01-01 12:00:00'), "
        "strftime('%Y-%m-%d %H:%M', '2000-01-01 12:34:56'), unixepoch('1970-01-02'), time(0.5), "
        "datetime(86400, 'unixepoch'), changes(), total_changes(), last_insert_rowid()"
    ).rows[0]
    assert row == ("2024-02-29", 2451545.0, "2000-01-01 12:34", 86400, "00:00:00", "1970-01-02 00:00:00", 0, 0, 0)


# ---------------------------------------------------------------------------- the work budget
def test_string_function_charges_match_the_formula():
    db = SqlDatabase.from_connection(_source())
    db.query("SELECT like('%b', hex(zeroblob(499)))")  # pattern 2 bytes, text 998 bytes
    assert db.last_query_cost == 599  # CALL_COST + 2 * 998 // 4; the query itself runs < 1,000 VM steps
    db.query("SELECT trim(hex(zeroblob(50)), 'xyz')")  # 100 bytes x 3 characters
    assert db.last_query_cost == CALL_COST + 100 * 3 // 2
    db.query("SELECT instr(hex(zeroblob(400)), hex(zeroblob(32)))")  # 800 x 64 bytes
    assert db.last_query_cost == CALL_COST + 800 * 64 // 32
    db.query("SELECT 'abc' GLOB 'a*', replace('aaa', 'a', 'b')")
    assert db.last_query_cost == 2 * CALL_COST + (2 * 3) // 4 + (3 * 1) // 32


def test_one_costly_call_is_refused_before_it_runs():
    query = "SELECT hex(zeroblob(499)) LIKE '%' || hex(zeroblob(49)) || 'b'"  # 100-byte pattern, 998-byte text
    cost = CALL_COST + 100 * 998 // 4
    assert SqlDatabase.from_connection(_source(), SqlLimits(max_steps=cost)).query(query).rows == [(0,)]
    tight = SqlDatabase.from_connection(_source(), SqlLimits(max_steps=cost - 1))
    with pytest.raises(SqlError, match=f"stopped after {cost - 1:,} units of work"):
        tight.query(query)


def test_the_budget_is_a_count_not_a_clock():
    query = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
    db = SqlDatabase.from_connection(_source(), SqlLimits(max_steps=50_000))
    outcomes = set()
    for _ in range(3):
        with pytest.raises(SqlError) as caught:
            db.query(query)
        outcomes.add((str(caught.value), db.last_query_cost))
    assert outcomes == {("the query was stopped after 50,000 units of work (too expensive)", 51_000)}


def test_guarded_functions_return_exactly_what_sqlite_returns(db):
    plain = sqlite3.connect(":memory:")
    queries = [
        "SELECT 'Abc' LIKE 'a%', 'abc' NOT LIKE 'A_C', 'a_c' LIKE 'a\\_c' ESCAPE '\\', NULL LIKE 'a', 5 LIKE '5'",
        "SELECT 'abc' GLOB 'A*', 'abc' GLOB '[a-c]*', x'6162' GLOB 'ab', 1.5 GLOB '1.*'",
        "SELECT trim('xxaxx', 'x'), ltrim('  a '), rtrim('a..', '.'), trim(12300, '0'), trim(NULL, 'x')",
        "SELECT instr('hello', 'l'), instr(x'00ff00', x'ff'), instr(12345, 34), instr('a', NULL)",
        "SELECT replace('aaa', 'a', 'bb'), replace('abc', '', 'x'), replace(123, 2, 9), replace(NULL, 'a', 'b')",
        "SELECT date('2024-01-31', '+1 month'), strftime('%j', '2024-12-31'), julianday(0), datetime(1e9, 'unixepoch')",
    ]
    for query in queries:
        assert db.query(query).rows == plain.execute(query).fetchall(), query


def test_long_values_and_column_names_get_a_clear_error(db):
    with pytest.raises(SqlError, match=r"too big .*1,000 bytes"):
        db.query("SELECT hex(zeroblob(500))")  # 1,000 characters and a terminating NUL
    long_expression = "SELECT 1 IN (" + ", ".join(map(str, range(300))) + ")"
    with pytest.raises(SqlError, match="short alias with AS"):
        db.query(long_expression)
    assert db.query(long_expression + " AS hit").rows == [(1,)]


def test_invalid_utf8_in_a_guarded_function_is_an_error_not_a_crash(db):
    with pytest.raises(SqlError, match="not valid UTF-8"):
        db.query("SELECT CAST(x'ff' AS TEXT) LIKE 'a'")


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux /proc/self/io")
def test_large_sorts_stay_in_memory_and_write_nothing_to_disk(db):
    def written() -> int:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))

    query = (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 30000) "
        "SELECT n, hex(zeroblob(490 + n % 2)) AS b FROM r ORDER BY b DESC, n"
    )  # about 30 MB of rows to sort: SQLite's default spills such sorts to temporary files
    before = written()
    rows = db.query(query).rows
    assert written() - before < 100_000 and rows[0][0] == 1  # 982 zeros sort after 980: odd n first


def test_the_heap_limit_is_applied_and_only_lowered():
    SqlDatabase.from_connection(_source())
    probe = sqlite3.connect(":memory:")
    assert 0 < probe.execute("PRAGMA hard_heap_limit").fetchone()[0] <= SqlLimits().heap_limit_bytes
    SqlDatabase.from_connection(_source(), SqlLimits(heap_limit_bytes=2**40))
    assert probe.execute("PRAGMA hard_heap_limit").fetchone()[0] <= SqlLimits().heap_limit_bytes


@pytest.mark.parametrize(
    ("query", "copies"),
    [
        ("SELECT 1", 0),
        ("WITH a AS (SELECT 1) SELECT * FROM a", 1),
        ("WITH a AS (SELECT 1), b AS (SELECT * FROM a, a) SELECT * FROM b, b, a", 7),  # b = 1 + 2; 3 + 3 + 1
        ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT * FROM r", 1),
        ("WITH a(x) AS (SELECT 'a a a') SELECT x FROM a -- a a", 1),  # strings and comments are not names
        ('WITH "A" AS (SELECT 1) SELECT * FROM a, [a], `A`', 3),
        ("WITH a AS (SELECT 1) SELECT (WITH a AS (SELECT 2) SELECT * FROM a) FROM a", 2),
        ("SELECT CAST(1 AS INTEGER)", 0),
    ],
)
def test_cte_copy_estimates(query, copies):
    assert cte_copies(query) == copies


def test_nested_ctes_are_refused_before_sqlite_copies_them(db):
    parts = ["a0(x) AS (SELECT 1)"]
    parts += [f"a{i}(x) AS ({' UNION ALL '.join([f'SELECT x FROM a{i - 1}'] * 4)})" for i in range(1, 11)]
    query = f"WITH {', '.join(parts)} SELECT count(*) FROM a10"  # 4**10 copies: 1.3 GB while preparing
    assert cte_copies(query) == sum(4**i for i in range(11))
    with pytest.raises(SqlError, match="common table expressions expand to 10,000 or more copies"):
        db.query(query)
    five = f"WITH {', '.join(parts[:5])} SELECT count(*) FROM a4"  # 341 copies: allowed
    assert db.query(five).rows == [(256,)]


def _load_hostile() -> list[tuple[str, str, str]]:
    return load_script("benchmarks/sql_hostile.py", "sql_hostile_benchmark").HOSTILE


@pytest.mark.parametrize(("name", "query", "message"), _load_hostile(), ids=lambda v: v if len(v) < 40 else "")
def test_benchmark_hostile_set_ends_within_the_budget(db, name, query, message):
    before = db.snapshot()
    result = SqlTool(db).call({"query": query})
    assert message in result.content
    assert result.ok == (message == "")
    assert db.last_query_cost <= db.limits.max_steps + _PROGRESS_PERIOD
    assert db.snapshot() == before


# ---------------------------------------------------------------------------- copies
def test_pickled_and_deep_copied_databases_answer_alike(db):
    db.query("SELECT COUNT(*) FROM orders")
    for copy in (pickle.loads(pickle.dumps(db)), deepcopy(db)):
        assert copy is not db and copy._conn is not db._conn and copy.limits == db.limits
        assert copy.snapshot() == db.snapshot()
        assert copy.query("SELECT SUM(quantity) FROM orders").rows == db.query("SELECT SUM(quantity) FROM orders").rows
        with pytest.raises(SqlError, match="function random"):
            copy.query("SELECT random()")


def test_a_dropped_database_is_freed_at_once_not_by_a_gc_pass():
    # a reference cycle (connection -> callback -> database -> connection) would keep each dropped database's
    # SQLite memory until the cyclic GC ran, and thousands of generated tasks would then hit the heap limit
    gc.disable()
    try:
        db = SqlDatabase.from_connection(_source())
        db.query("SELECT hex(zeroblob(10)) LIKE '%0', date('2000-01-01'), COUNT(*) FROM orders")
        ref = weakref.ref(db)
        del db
        assert ref() is None
    finally:
        gc.enable()

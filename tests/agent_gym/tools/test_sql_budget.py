"""The SQL tool's work budget and guards, by hand-computed charges (``agent_gym.tools.sql_budget``)."""

import sqlite3

import pytest

from agent_gym.tools.sql import SqlDatabase, SqlError, SqlLimits, SqlTool
from agent_gym.tools.sql_budget import CALL_COST, Budget, BudgetExceeded, cte_copies

ENDLESS = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"


def _db(**limits) -> SqlDatabase:
    src = sqlite3.connect(":memory:")
    src.executescript("CREATE TABLE t (x INTEGER);" + "".join(f"INSERT INTO t VALUES ({i});" for i in range(20)))
    return SqlDatabase.from_connection(src, SqlLimits(**limits))


def test_a_budget_starts_empty_and_counts_progress_calls():
    budget = Budget(limit=2_500, period=1_000, safety_seconds=60.0)
    assert (budget.used, budget.stopped) == (0, "")
    budget.start()
    assert [budget.on_progress() for _ in range(3)] == [0, 0, 1]  # 1,000, 2,000, then 3,000 > 2,500
    assert budget.used == 3_000 and budget.stopped == "the query was stopped after 2,500 units of work (too expensive)"


def test_a_charge_over_the_limit_is_refused_before_it_is_added():
    budget = Budget(limit=100, period=1_000, safety_seconds=60.0)
    budget.start()
    budget.charge(60)
    with pytest.raises(BudgetExceeded, match=r"^the query was stopped after 100 units of work \(too expensive\)$"):
        budget.charge(41)
    assert budget.used == 60  # the refused charge was not added
    budget.start()
    assert (budget.used, budget.stopped) == (0, "")


def test_the_wall_clock_safety_net_names_itself():
    budget = Budget(limit=10**9, period=1_000, safety_seconds=0.0)
    budget.start()
    assert budget.on_progress() == 1
    assert budget.stopped == "the query was stopped by the 0 s safety limit (too slow)"
    with pytest.raises(SqlError, match=r"^the query was stopped by the 1e-09 s safety limit \(too slow\)$"):
        _db(max_seconds=1e-9).query(ENDLESS)


def test_a_fresh_database_has_spent_nothing():
    assert _db().last_query_cost == 0


@pytest.mark.parametrize(
    ("query", "cost"),
    [
        # a constant call is evaluated once per query, not once per row (the guards are deterministic functions)
        ("SELECT count(*) FROM t WHERE trim('xxxx', 'x') = ''", CALL_COST + 4 * 1 // 2),
        ("SELECT count(*) FROM t WHERE date('2000-01-01') = '2000-01-01'", CALL_COST + 10),  # 10 bytes of argument
        ("SELECT count(*) FROM t WHERE x LIKE '1%'", 20 * CALL_COST + sum(len(str(i)) * 2 // 4 for i in range(20))),
        ("SELECT date(NULL)", CALL_COST),  # NULL has size 0
        ("SELECT datetime('2000-01-01', '+1 day')", CALL_COST + 10 + 6),
    ],
)
def test_guarded_calls_charge_call_cost_plus_their_argument_sizes(query, cost):
    db = _db()
    db.query(query)
    assert db.last_query_cost == cost  # each query runs < 1,000 VM steps, so charges are all it costs


def test_date_functions_read_blobs_as_text_and_invalid_utf8_is_not_an_error():
    db = _db()
    assert db.query("SELECT date(x'323030302d30312d3031'), date(x'ff')").rows == [("2000-01-01", None)]


@pytest.mark.parametrize("name", ["date", "time", "datetime", "julianday", "strftime", "unixepoch"])
def test_a_refused_clock_read_names_its_function(name):
    args = "'%s', 'now'" if name == "strftime" else "'now'"
    result = SqlTool(_db()).call({"query": f"SELECT {name}({args})"})
    assert not result.ok
    assert result.content == (
        f"Error: {name}() with 'now', 'localtime' or 'utc' (or no arguments) reads the machine's clock or time zone "
        "and is not allowed; use literal dates"
    )


def test_an_unstarted_budget_stops_any_query():
    assert Budget(limit=10**9, period=1_000, safety_seconds=60.0).on_progress() == 1  # its deadline has passed


@pytest.mark.parametrize(
    ("query", "copies"),
    [
        ("SELECT 1 AS", 0),  # text that ends where a definition could start
        ("x AS NOT MATERIALIZED", 0),
        ("WITH a AS MATERIALIZED (SELECT 1) SELECT * FROM a, a", 2),
        ("WITH a AS NOT MATERIALIZED (SELECT 1) SELECT * FROM a, a", 2),
        ("WITH a AS (SELECT 1) SELECT 'a' FROM a", 1),  # a string equal to a name is not a mention
        ("WITH a AS (SELECT * FROM b), b AS (SELECT * FROM a) SELECT * FROM a", 2),  # mutual: each copied once
        # a mention before a later (nested) definition is still outside every body
        ("WITH a AS (SELECT 1) SELECT * FROM a WHERE 1 IN (WITH b AS (SELECT 2) SELECT * FROM b)", 2),
    ],
)
def test_more_cte_copy_estimates(query, copies):
    assert cte_copies(query) == copies


def test_mutually_recursive_ctes_are_an_sql_error_not_a_crash():
    with pytest.raises(SqlError, match="circular reference"):
        _db().query("WITH a AS (SELECT * FROM b), b AS (SELECT * FROM a) SELECT * FROM a")

"""``AgentR1/SQLite-v0``: answer questions about a small relational database with a ``sql`` tool.

Each task is generated from its index (and ``task_seed``): one of three
schemas (a shop, a school, a company), each with two entity tables and a link
table, filled with random rows, and a question of one of nine kinds - lookups,
joins, aggregates (count, sum, average, max) and two-step questions that need
one query's result to write the next. The gold answer is whatever the gold
queries return.

Process rewards: the tables the gold queries read are the gold evidence; a
successful query that reads one reveals it (table names come from SQLite's
authorizer, not from parsing the text). A small ``valid_query`` term rewards
new queries that run and penalises ones that fail. The answer is compared
after normalisation: numbers numerically (absolute tolerance 0.005 or relative
1e-4), strings case-insensitively, several values as a set (``em``: exactly
the gold set; ``f1``: set F1).

Example:
    >>> import gymnasium as gym, agent_gym
    >>> env = gym.make("AgentR1/SQLite-v0")
    >>> obs, info = env.reset(seed=0, options={"task_index": 7})
    >>> obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
"""

from __future__ import annotations

import random
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from agent_gym.core.history import Role
from agent_gym.core.rubric import RewardTerm, Transition
from agent_gym.core.tool import Tool
from agent_gym.envs.procedural import ProceduralEnv
from agent_gym.tools.sql import SqlDatabase, SqlLimits, SqlTool

__all__ = ["SqlTask", "SqliteEnv", "generate_sql_task", "score_sql_answer", "valid_query"]

_SPLIT = re.compile(r"\s*(?:[,;\n]|\band\b)\s*", re.IGNORECASE)


# ---------------------------------------------------------------------------- task generation
@dataclass(frozen=True)
class SqlTask:
    """A generated database question.

    Attributes:
        id: ``sql-<task_seed>-<index>``.
        domain: ``shop``, ``school`` or ``company``.
        kind: The question kind (``lookup``, ``join``, ``count``, ..., ``two_step_top``).
        question: The question text.
        gold_queries: The gold SQL, in order (two-step kinds have two).
        answer: The gold value(s): the first column of the last gold query's rows.
        tables: Tables the gold queries read (the gold evidence).
        schema: ``CREATE TABLE`` statements shown to the agent.
        database: The database, as ``sqlite3`` ``serialize()`` bytes.
    """

    id: str
    domain: str
    kind: str
    question: str
    gold_queries: tuple[str, ...]
    answer: tuple[str | int | float, ...]
    tables: frozenset[str]
    schema: str
    database: bytes


@dataclass(frozen=True)
class _Domain:
    """Two entity tables ``a`` and ``b`` and a link table between them."""

    name: str
    a: str
    a_noun: str
    a_attr: str
    a_values: tuple[str, ...]
    b: str
    b_noun: str
    b_names: tuple[str, ...]
    b_cat: str
    b_cats: tuple[str, ...]
    b_value: str
    b_value_sql: str
    b_values: range
    link: str
    link_noun: str
    amount: str
    amounts: range


_PEOPLE = tuple(
    "Ada Bo Cyrus Dana Emeka Farah Gus Hiro Ines Jonas Kira Lars Mei Nadia Omar Pia Quinn Rosa Sven Tara Umar Vera "
    "Wen Xavi Yara Zeno".split()
)
_DOMAINS = (
    _Domain(
        "shop", "customers", "customer", "city", ("Lyon", "Oslo", "Porto", "Quito", "Riga"),
        "products", "product", tuple("anvil basket candle drone easel fan globe hammock ink jacket kettle".split()),
        "category", ("books", "garden", "kitchen", "toys"), "price", "REAL", range(199, 9999, 25),
        "orders", "order", "quantity", range(1, 10),
    ),
    _Domain(
        "school", "students", "student", "major", ("biology", "history", "math", "physics"),
        "courses", "course", tuple("algebra botany chemistry drama ethics french geology hebrew logic music".split()),
        "department", ("arts", "science", "languages"), "fee", "INTEGER", range(100, 990, 10),
        "enrollments", "enrollment", "grade", range(40, 101),
    ),
    _Domain(
        "company", "employees", "employee", "office", ("Berlin", "Cairo", "Lima", "Tokyo"),
        "projects", "project", tuple("apollo beacon cobalt delta ember falcon granite helix iris juniper".split()),
        "team", ("data", "infra", "mobile", "web"), "budget", "INTEGER", range(1000, 90000, 500),
        "assignments", "assignment", "hours", range(1, 41),
    ),
)  # fmt: skip


class _Redraw(Exception):
    """The drawn data make the question ambiguous or empty; draw again."""


def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _build(d: _Domain, rng: random.Random) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(
        f"CREATE TABLE {d.a} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, {d.a_attr} TEXT NOT NULL);\n"
        f"CREATE TABLE {d.b} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, {d.b_cat} TEXT NOT NULL, "
        f"{d.b_value} {d.b_value_sql} NOT NULL);\n"
        f"CREATE TABLE {d.link} (id INTEGER PRIMARY KEY, {d.a_noun}_id INTEGER NOT NULL REFERENCES {d.a}(id), "
        f"{d.b_noun}_id INTEGER NOT NULL REFERENCES {d.b}(id), {d.amount} INTEGER NOT NULL, year INTEGER NOT NULL);"
    )
    people = rng.sample(_PEOPLE, rng.randint(6, 12))
    conn.executemany(
        f"INSERT INTO {d.a} VALUES (?, ?, ?)", [(i + 1, n, rng.choice(d.a_values)) for i, n in enumerate(people)]
    )
    names = rng.sample(d.b_names, rng.randint(5, len(d.b_names)))
    values = rng.sample(d.b_values, len(names))
    scale = 100 if d.b_value_sql == "REAL" else 1
    rows_b = [
        (i + 1, n, rng.choice(d.b_cats), v / scale if scale > 1 else v)
        for i, (n, v) in enumerate(zip(names, values, strict=True))
    ]
    conn.executemany(f"INSERT INTO {d.b} VALUES (?, ?, ?, ?)", rows_b)
    links = [
        (i + 1, rng.randint(1, len(people)), rng.randint(1, len(names)), rng.choice(d.amounts), rng.randint(2020, 2024))
        for i in range(rng.randint(15, 35))
    ]
    conn.executemany(f"INSERT INTO {d.link} VALUES (?, ?, ?, ?, ?)", links)
    return conn


_Pick = Callable[[str], list[Any]]
_Run = Callable[[str], list[tuple[Any, ...]]]


def _lookup(d: _Domain, rng: random.Random, pick: _Pick, run: _Run) -> tuple[str, list[str]]:
    name = rng.choice(pick(f"SELECT name FROM {d.b} ORDER BY id"))
    question = f"What is the {d.b_value} of the {d.b_noun} named '{name}'?"
    return question, [f"SELECT {d.b_value} FROM {d.b} WHERE name = {_q(name)}"]


def _filter(d: _Domain, rng: random.Random, pick: _Pick, run: _Run) -> tuple[str, list[str]]:
    value = rng.choice(pick(f"SELECT DISTINCT {d.a_attr} FROM {d.a} ORDER BY 1"))
    question = f"Which {d.a} have {d.a_attr} '{value}'? List their names."
    return question, [f"SELECT name FROM {d.a} WHERE {d.a_attr} = {_q(value)}"]


def _join(d: _Domain, rng: random.Random, pick: _Pick, run: _Run) -> tuple[str, list[str]]:
    a_fk, b_fk = f"{d.a_noun}_id", f"{d.b_noun}_id"
    name = rng.choice(pick(f"SELECT DISTINCT a.name FROM {d.link} l JOIN {d.a} a ON a.id = l.{a_fk} ORDER BY 1"))
    question = f"Which {d.b} appear in the {d.link} of the {d.a_noun} named '{name}'? List their names."
    sql = (
        f"SELECT DISTINCT b.name FROM {d.link} l JOIN {d.b} b ON b.id = l.{b_fk} "
        f"JOIN {d.a} a ON a.id = l.{a_fk} WHERE a.name = {_q(name)}"
    )
    return question, [sql]


def _count(d: _Domain, rng: random.Random, pick: _Pick, run: _Run) -> tuple[str, list[str]]:
    year = rng.randint(2020, 2024)
    return f"How many {d.link} are from the year {year}?", [f"SELECT COUNT(*) FROM {d.link} WHERE year = {year}"]


def _sum(d: _Domain, rng: random.Random, pick: _Pick, run: _Run) -> tuple[str, list[str]]:
    cat = rng.choice(pick(f"SELECT DISTINCT {d.b_cat} FROM {d.b} ORDER BY 1"))
    question = f"What is the total {d.amount} over all {d.link} of {d.b} whose {d.b_cat} is '{cat}'?"
    sql = (
        f"SELECT COALESCE(SUM(l.{d.amount}), 0) FROM {d.link} l JOIN {d.b} b ON b.id = l.{d.b_noun}_id "
        f"WHERE b.{d.b_cat} = {_q(cat)}"
    )
    return question, [sql]


def _average(d: _Domain, rng: random.Random, pick: _Pick, run: _Run) -> tuple[str, list[str]]:
    cat = rng.choice(pick(f"SELECT DISTINCT {d.b_cat} FROM {d.b} ORDER BY 1"))
    question = f"What is the average {d.b_value} of the {d.b} whose {d.b_cat} is '{cat}', rounded to 2 decimals?"
    return question, [f"SELECT ROUND(AVG({d.b_value}), 2) FROM {d.b} WHERE {d.b_cat} = {_q(cat)}"]


def _maximum(d: _Domain, rng: random.Random, pick: _Pick, run: _Run) -> tuple[str, list[str]]:
    join = f"{d.link} l JOIN {d.a} a ON a.id = l.{d.a_noun}_id"
    value = rng.choice(pick(f"SELECT DISTINCT a.{d.a_attr} FROM {join} ORDER BY 1"))
    question = (
        f"What is the largest {d.amount} of a single {d.link_noun} by a {d.a_noun} whose {d.a_attr} is '{value}'?"
    )
    return question, [f"SELECT MAX(l.{d.amount}) FROM {join} WHERE a.{d.a_attr} = {_q(value)}"]


def _two_step_top(d: _Domain, rng: random.Random, pick: _Pick, run: _Run) -> tuple[str, list[str]]:
    first = f"SELECT name FROM {d.b} ORDER BY {d.b_value} DESC LIMIT 1"  # values are distinct: no ties
    top = run(first)[0][0]
    question = f"Find the {d.b_noun} with the highest {d.b_value}. What is the total {d.amount} over its {d.link}?"
    second = (
        f"SELECT COALESCE(SUM(l.{d.amount}), 0) FROM {d.link} l JOIN {d.b} b ON b.id = l.{d.b_noun}_id "
        f"WHERE b.name = {_q(top)}"
    )
    return question, [first, second]


def _two_step_busiest(d: _Domain, rng: random.Random, pick: _Pick, run: _Run) -> tuple[str, list[str]]:
    counts = f"SELECT a.name, COUNT(*) AS n FROM {d.link} l JOIN {d.a} a ON a.id = l.{d.a_noun}_id GROUP BY a.id"
    ranked = pick(f"SELECT n FROM ({counts}) ORDER BY n DESC LIMIT 2")
    if len(ranked) > 1 and ranked[0] == ranked[1]:
        raise _Redraw
    first = f"{counts} ORDER BY n DESC LIMIT 1"
    top = run(first)[0][0]
    question = f"Find the {d.a_noun} with the most {d.link}. What is that {d.a_noun}'s {d.a_attr}?"
    return question, [first, f"SELECT {d.a_attr} FROM {d.a} WHERE name = {_q(top)}"]


_KINDS = {
    "lookup": _lookup,
    "filter": _filter,
    "join": _join,
    "count": _count,
    "sum": _sum,
    "average": _average,
    "max": _maximum,
    "two_step_top": _two_step_top,
    "two_step_busiest": _two_step_busiest,
}


def generate_sql_task(index: int, task_seed: int = 0) -> SqlTask:
    """The task at ``index``: the same for the same ``(index, task_seed)`` on every machine.

    Domains cycle with the index, question kinds with ``index // 3``; data
    that would make the question ambiguous (ties) or empty are redrawn.
    """
    rng = random.Random(f"sqlite/{task_seed}/{index}")
    domain = _DOMAINS[index % len(_DOMAINS)]
    kind = list(_KINDS)[(index // len(_DOMAINS)) % len(_KINDS)]
    for _ in range(100):
        conn = _build(domain, rng)
        db = SqlDatabase.from_connection(conn)
        tables: set[str] = set()

        def run(sql: str, db: SqlDatabase = db, tables: set[str] = tables) -> list[tuple[Any, ...]]:
            result = db.query(sql)
            tables.update(result.tables)
            return result.rows

        def pick(sql: str, conn: sqlite3.Connection = conn) -> list[Any]:
            return [row[0] for row in conn.execute(sql)]

        try:
            question, queries = _KINDS[kind](domain, rng, pick, run)
        except _Redraw:
            continue
        rows = run(queries[-1])
        answer = tuple(dict.fromkeys(row[0] for row in rows))
        if answer and None not in answer:
            break
    else:  # never happens for task_seed 0 (every index is checked by a test); loud rather than a bad task
        raise RuntimeError(f"no valid {kind!r} question in 100 draws for task {index} (task_seed {task_seed})")
    schema = "\n".join(r[0] + ";" for r in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table'"))
    return SqlTask(
        f"sql-{task_seed}-{index}", domain.name, kind, question, tuple(queries), answer, frozenset(tables), schema,
        conn.serialize(),
    )  # fmt: skip


# ---------------------------------------------------------------------------- scoring
def valid_query(t: Transition) -> float:
    """+1 if the step's ``sql`` calls all ran and none is a repeat; -1 if one failed with an SQL error; else 0."""
    sql = [(c, r) for c, r in t.results if c.name == "sql"]
    if not sql:
        return 0.0
    if any(not r.ok and r.metadata.get("reason") == "sql_error" for _, r in sql):
        return -1.0
    return 1.0 if all(r.ok for _, r in sql) and not t.repeated_calls else 0.0


def _normalise(text: str) -> str:
    return " ".join(text.strip().strip(".").strip("'\"").lower().split())


def _number(text: str) -> float | None:
    try:
        return float(text.replace("$", "").replace(",", "").strip())
    except ValueError:
        return None


def _matches(predicted: str, gold: str | int | float) -> bool:
    if isinstance(gold, int | float):
        value = _number(predicted)
        return value is not None and abs(value - gold) <= max(0.005, 1e-4 * abs(gold))
    return _normalise(predicted) == _normalise(str(gold))


def score_sql_answer(answer: str, gold: Sequence[str | int | float]) -> dict[str, float]:
    """``em`` (the answer is exactly the gold set) and ``f1`` (set F1) of a final answer.

    A single gold value is compared with the whole answer; several are compared
    with the answer split on commas, semicolons, new lines and "and".
    """
    if len(gold) == 1 and _matches(answer, gold[0]):
        return {"em": 1.0, "f1": 1.0}
    items = [p for p in _SPLIT.split(answer.strip()) if p.strip()]
    unmatched = list(gold)
    hits = 0
    for item in items:
        for g in unmatched:
            if _matches(item, g):
                unmatched.remove(g)
                hits += 1
                break
    if not hits:
        return {"em": 0.0, "f1": 0.0}
    precision, recall = hits / len(items), hits / len(gold)
    f1 = 2 * precision * recall / (precision + recall)
    return {"em": float(hits == len(gold) == len(items)), "f1": f1}


class SqliteEnv(ProceduralEnv[SqlTask]):
    """Questions about a generated relational database, answered with a read-only ``sql`` tool.

    Args:
        num_tasks: How many distinct tasks (generated lazily from the index).
        task_seed: Selects a different family of ``num_tasks`` tasks.
        reward: ``"gated"`` (the default: step penalties plus ``valid_query``, and the evidence - tables the
            gold queries read - paid on the answer), ``"process"`` (evidence paid as it is found) or
            ``"outcome"`` (Agent-R1's outcome reward only).
        answer_metric: ``"em"`` or ``"f1"`` (set F1 over listed values).
        shaping_gamma: Add potential-based shaping with this γ (``None``: off).
        reward_weights: Override rubric term weights by name.
        limits: SQL limits (a :class:`SqlLimits` or a dict of its fields).
        rubric: A complete rubric, replacing the preset.
        **kwargs: Passed to :class:`~agent_gym.core.env.ToolEnv`
            (``action_format``, ``tool_noise``, ``render_mode``, ...).
    """

    id_prefix = "sql"

    def __init__(self, *, limits: SqlLimits | Mapping[str, Any] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.limits = limits if isinstance(limits, SqlLimits) else SqlLimits(**dict(limits or {}))

    def process_terms(self) -> Sequence[RewardTerm]:
        # an answer step runs no SQL, so the term is 0 there
        return [RewardTerm("valid_query", valid_query, 0.02, (-1.0, 1.0), final_bounds=(0.0, 0.0))]

    def load_task(self, index: int) -> SqlTask:
        return _cached_task(index, self.task_seed)

    def make_tools(self, task: SqlTask) -> Sequence[Tool]:
        return [SqlTool(SqlDatabase.from_bytes(task.database, self.limits))]

    def user_prompt(self, task: SqlTask) -> str:
        return (
            f"The database has these tables:\n{task.schema}\n\nQuestion: {task.question}\n"
            "Query the database with the sql tool, then give only the answer value(s) inside "
            "<answer></answer> (several values separated by commas)."
        )

    def gold_evidence(self, task: SqlTask) -> frozenset[str]:
        return frozenset(f"table:{t}" for t in task.tables)

    def score_answer(self, task: SqlTask, answer: str) -> dict[str, float]:
        return score_sql_answer(answer, task.answer)

    def oracle_action(self) -> str:
        """Run the next gold query that has not yet succeeded; then answer with the gold values."""
        state = self.state
        assert state is not None, "call reset() first"
        queries: dict[str, str] = {}
        done: set[str] = set()
        for message in state.history:
            for call in message.tool_calls:
                queries[call.id] = str(call.arguments.get("query", ""))
            if message.role is Role.TOOL and message.ok and message.tool_call_id in queries:
                done.add(queries[message.tool_call_id])
        for query in state.task.gold_queries:
            if query not in done:
                return self.parser.format_call("sql", {"query": query})
        return self.parser.format_answer(", ".join(_show(v) for v in state.task.answer))


def _show(value: str | int | float) -> str:
    return f"{value:.12g}" if isinstance(value, float) else str(value)


@lru_cache(maxsize=256)
def _cached_task(index: int, task_seed: int) -> SqlTask:
    return generate_sql_task(index, task_seed)

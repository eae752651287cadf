import copy
import dataclasses
import hashlib
import json
import math
import pickle
import re
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from fractions import Fraction

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import data_equivalence
from hypothesis import given

import agent_gym  # noqa: F401  (registers the ids)
from agent_gym.envs.sqlite import _DOMAINS, SqliteEnv, generate_sql_task, score_sql_answer
from agent_gym.testing import check_step, check_text_env, run_episode
from agent_gym.testing.strategies import actions
from agent_gym.tools.sql import SqlDatabase


def _oracle_episode(env, index, seed=0, max_steps=10):
    options = {"task_index": index}
    *_, terminated, _, info = run_episode(
        env, env.unwrapped.oracle_action, seed=seed, options=options, max_steps=max_steps
    )[-1]
    return terminated, info


def test_conformance_via_gym_make():
    check_text_env(gym.make("AgentR1/SQLite-v0"))


def test_tasks_are_deterministic_and_cover_every_kind():
    assert generate_sql_task(40) == generate_sql_task(40)
    assert generate_sql_task(40).database != generate_sql_task(40, task_seed=1).database
    tasks = [generate_sql_task(i) for i in range(27)]
    assert {t.domain for t in tasks} == {"shop", "school", "company"}
    assert {t.kind for t in tasks} >= {"lookup", "join", "count", "sum", "average", "max", "two_step_top"}
    assert all(len(t.gold_queries) == 2 for t in tasks if t.kind.startswith("two_step"))


def test_touching_gold_tables_reveals_evidence_and_bad_sql_is_penalised():
    env = SqliteEnv(reward="process", shaping_gamma=1.0)
    env.reset(seed=0, options={"task_index": 7})  # a join over three tables
    task = env.state.task
    assert len(task.tables) == 3
    _, _, _, _, info = env.step(env.parser.format_call("sql", {"query": "SELEC oops"}))
    assert info["reward_raw"]["valid_query"] == -1.0 and info["new_evidence"] == []
    _, _, _, _, info = env.step(env.parser.format_call("sql", {"query": "SELECT 'students', 'courses'"}))
    assert info["reward_raw"]["valid_query"] == 1.0 and info["new_evidence"] == []
    _, _, _, _, info = env.step(env.parser.format_call("sql", {"query": "SELECT COUNT(*) FROM students"}))
    assert info["new_evidence"] == ["table:students"] and info["reward_terms"]["evidence"] > 0
    _, _, _, _, info = env.step(env.parser.format_call("sql", {"query": "SELECT COUNT(*) FROM students"}))
    assert info["reward_raw"]["valid_query"] == 0.0 and info["reward_raw"]["repeat"] == -1.0


def test_hostile_queries_in_an_episode_leave_the_database_unchanged():
    env = SqliteEnv()
    env.reset(seed=0, options={"task_index": 3})
    before = env.tools["sql"].database.snapshot()
    for query in ["DROP TABLE customers", "ATTACH DATABASE '/etc/passwd' AS p", "SELECT load_extension('x')"]:
        _, _, terminated, _, info = env.step(env.parser.format_call("sql", {"query": query}))
        assert not terminated and not info["tool_calls"][0]["ok"]
    assert env.tools["sql"].database.snapshot() == before
    terminated, info = _oracle_episode(env, 3)
    assert terminated and info["metrics"]["answer_em"] == 1.0


@pytest.mark.parametrize(
    ("answer", "gold", "em", "f1"),
    [
        ("26.74", (26.74,), 1.0, 1.0),
        ("$26.740", (26.74,), 1.0, 1.0),
        ("26.7", (26.74,), 0.0, 0.0),
        ("Lyon.", ("Lyon",), 1.0, 1.0),
        ("  lyon ", ("Lyon",), 1.0, 1.0),
        ("Tara, Omar and Lars", ("Omar", "Lars", "Tara"), 1.0, 1.0),
        ("Omar, Lars", ("Omar", "Lars", "Tara"), 0.0, 0.8),
        ("Omar, Lars, Tara, Ada, Bo, Cyrus", ("Omar", "Lars", "Tara"), 0.0, 2 / 3),
        ("nothing", ("Omar",), 0.0, 0.0),
        ("8.12", (8.124,), 1.0, 1.0),
    ],
)
def test_answer_normalisation(answer, gold, em, f1):
    scores = score_sql_answer(answer, gold)
    assert scores["em"] == em and scores["f1"] == pytest.approx(f1)


def test_tags_format_and_outcome_reward():
    env = SqliteEnv(action_format="tags", reward="outcome")
    terminated, info = _oracle_episode(env, 21)  # two-step
    assert terminated and info["reward_terms"] == {"outcome": 1.0}


def test_reward_weights_and_noise():
    env = SqliteEnv(reward_weights={"valid_query": 0.0}, tool_noise={"failure_prob": 0.5})
    assert {t.name: t.weight for t in env.rubric.terms}["valid_query"] == 0.0
    terminated, info = _oracle_episode(env, 24, seed=3, max_steps=40)
    assert terminated and info["metrics"]["answer_em"] == 1.0


_ENV = SqliteEnv()


@given(actions(tool_names=["sql"]))
def test_adversarial_actions_never_crash(action):
    _ENV.reset(seed=0, options={"task_index": 12})
    obs, reward, terminated, truncated, info = _ENV.step(action)
    check_step(_ENV, obs, reward, terminated, truncated, info)


# ---------------------------------------------------------------------------- an independent solver
# The gold answers are checked against values computed here in Python from the generated rows and the
# question's text, never by re-running the generator's SQL.
_DOMAIN = {d.name: d for d in _DOMAINS}
_QUESTIONS = {
    "lookup": r"What is the (?P<col>\w+) of the \w+ named '(?P<name>.+)'\?",
    "filter": r"Which \w+ have (?P<col>\w+) '(?P<value>.+)'\? List their names\.",
    "join": r"Which \w+ appear in the \w+ of the \w+ named '(?P<name>.+)'\? List their names\.",
    "count": r"How many \w+ are from the year (?P<year>\d+)\?",
    "sum": r"What is the total \w+ over all \w+ of \w+ whose (?P<col>\w+) is '(?P<value>.+)'\?",
    "average": r"What is the average \w+ of the \w+ whose (?P<col>\w+) is '(?P<value>.+)', rounded to 2 decimals\?",
    "max": r"What is the largest \w+ of a single \w+ by a \w+ whose (?P<col>\w+) is '(?P<value>.+)'\?",
    "two_step_top": r"Find the \w+ with the highest \w+\. What is the total \w+ over its \w+\?",
    "two_step_busiest": r"Find the \w+ with the most \w+\. What is that \w+'s \w+\?",
}


def _rows(task):
    conn = sqlite3.connect(":memory:")
    conn.deserialize(task.database)
    conn.row_factory = sqlite3.Row
    d = _DOMAIN[task.domain]
    return d, {t: [dict(r) for r in conn.execute(f"SELECT * FROM {t}")] for t in (d.a, d.b, d.link)}


def _independent_answer(task) -> list:
    """The answer computed from the rows: a list of values (a set question: in any order)."""
    d, rows = _rows(task)
    q = re.fullmatch(_QUESTIONS[task.kind], task.question)
    assert q, f"unexpected {task.kind} question: {task.question!r}"
    a_of = {r["id"]: r for r in rows[d.a]}
    b_of = {r["id"]: r for r in rows[d.b]}
    links = [(a_of[r[f"{d.a_noun}_id"]], b_of[r[f"{d.b_noun}_id"]], r) for r in rows[d.link]]
    if task.kind == "lookup":
        return [r[q["col"]] for r in rows[d.b] if r["name"] == q["name"]]
    if task.kind == "filter":
        return [r["name"] for r in rows[d.a] if r[q["col"]] == q["value"]]
    if task.kind == "join":
        return list(dict.fromkeys(b["name"] for a, b, _ in links if a["name"] == q["name"]))
    if task.kind == "count":
        return [sum(link["year"] == int(q["year"]) for *_, link in links)]
    if task.kind == "sum":
        return [sum(link[d.amount] for _, b, link in links if b[q["col"]] == q["value"])]
    if task.kind == "average":  # exact mean, rounded half up to cents ("rounded to 2 decimals")
        values = [Fraction(str(r[d.b_value])) for r in rows[d.b] if r[q["col"]] == q["value"]]
        cents = math.floor(sum(values) / len(values) * 100 + Fraction(1, 2))
        return [float(Fraction(cents, 100))]
    if task.kind == "max":
        return [max(link[d.amount] for a, _, link in links if a[q["col"]] == q["value"])]
    if task.kind == "two_step_top":
        top = max(rows[d.b], key=lambda r: r[d.b_value])
        return [sum(link[d.amount] for _, b, link in links if b["id"] == top["id"])]
    counts = Counter(a["id"] for a, _, _ in links)
    (busiest, n), *rest = counts.most_common()
    assert not rest or rest[0][1] < n, "the generator promised no tie"
    return [a_of[busiest][d.a_attr]]


def _check_gold_answer(task) -> None:
    expected = _independent_answer(task)
    assert sorted(map(str, task.answer)) == sorted(map(str, expected)) and expected, (task.id, expected)
    written = ", ".join(map(str, expected))
    assert score_sql_answer(written, task.answer)["em"] == 1.0, (task.id, written)


def _solved_by_the_oracle(env, index: int) -> bool:
    terminated, info = _oracle_episode(env, index, seed=index)
    return terminated and info["metrics"]["answer_em"] == 1.0 and info["metrics"]["evidence_recall"] == 1.0


_SPREAD = sorted({*range(0, 10_000, 97), 1, 2, 26, 27, 4999, 9998, 9999})  # every kind and domain, both ends


def test_gold_answers_match_an_independent_solver_over_a_spread_of_tasks():
    kinds = Counter()
    for i in _SPREAD:
        task = generate_sql_task(i)
        _check_gold_answer(task)
        kinds[task.kind] += 1
    assert len(kinds) == 9 and min(kinds.values()) >= 5


def test_every_task_of_a_spread_resets_via_gym_make_and_the_oracle_solves_it():
    env = gym.make("AgentR1/SQLite-v0")
    unsolved = [i for i in _SPREAD if not _solved_by_the_oracle(env, i)]
    assert unsolved == []


@pytest.mark.slow
def test_all_10000_tasks_reset_match_the_independent_solver_and_are_solved_by_the_oracle():
    env = gym.make("AgentR1/SQLite-v0")
    for i in range(env.unwrapped.num_tasks()):
        _check_gold_answer(generate_sql_task(i))
        assert _solved_by_the_oracle(env, i), i


def test_the_independent_solver_catches_a_wrong_gold_answer():
    task = generate_sql_task(9)
    assert task.kind == "count"
    wrong = dataclasses.replace(task, answer=(task.answer[0] + 1,))
    with pytest.raises(AssertionError):
        _check_gold_answer(wrong)


# ---------------------------------------------------------------------------- golden fingerprints
def _fingerprint(task) -> str:
    """sha256 over what defines the task: question, answer, evidence, schema and every row."""
    conn = sqlite3.connect(":memory:")
    conn.deserialize(task.database)
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    rows = {t: [list(r) for r in conn.execute(f"SELECT * FROM {t} ORDER BY id")] for t in names}
    payload = [task.id, task.domain, task.kind, task.question, [repr(v) for v in task.answer], sorted(task.tables)]
    payload += [task.schema, rows]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]


@pytest.mark.parametrize(
    ("index", "fingerprint"),
    [
        (0, "63c4ecc09ea392a5"),
        (1, "113f81a124f95e53"),
        (2, "af72e7d4a3eb71a1"),
        (4999, "fc991c3369e787b4"),
        (9999, "c193c6bc188dbfee"),
    ],
)
def test_task_i_is_the_same_on_every_machine(index, fingerprint):
    assert _fingerprint(generate_sql_task(index)) == fingerprint


# ---------------------------------------------------------------------------- replay under load
_REPLAY = [
    "SELECT name FROM customers ORDER BY name",
    # stopped by the work budget (about 0.1 s of work alone; the old 2 s clock limit fired under load)
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
    "SELECT count(*) FROM r WHERE upper(hex(zeroblob(490 + n % 2))) = 'x'",
    # finishes within the budget after 92% of it (920,000 units, about 0.3 s alone)
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 40000) "
    "SELECT count(*) FROM r WHERE upper(hex(zeroblob(490 + n % 2))) != 'x'",
    "WITH RECURSIVE r(n, s) AS (SELECT 1, hex(zeroblob(490)) UNION SELECT n + 1, s FROM r) SELECT count(*) FROM r",
]


def _replay() -> list:
    env = gym.make("AgentR1/SQLite-v0")
    obs, _ = env.reset(seed=11, options={"task_index": 0})
    steps = [obs]
    for query in _REPLAY:
        obs, reward, terminated, truncated, info = env.step(env.unwrapped.parser.format_call("sql", {"query": query}))
        used = env.unwrapped.tools["sql"].database.last_query_cost
        steps.append((obs, reward, terminated, truncated, info["reward_terms"], info["tool_calls"], used))
    return steps


def test_same_seed_and_queries_replay_exactly_with_the_cpu_loaded():
    alone = _replay()
    results = [step[5][0]["ok"] for step in alone[1:]]
    assert results == [True, False, True, False]
    assert "stopped after 1,000,000 units of work" in alone[2][0] and "stopped after 1,000,000" in alone[4][0]
    assert alone[3][6] == 920_000 and alone[3][0].endswith("count(*)\n40000\n(1 rows)\n")
    spin = "import time\nend = time.time() + 60\nwhile time.time() < end: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(3)]
    stop = threading.Event()

    def contend() -> None:  # other SQLite work and Python work in this process, at the same time
        db = SqlDatabase.from_bytes(generate_sql_task(1).database)
        while not stop.is_set():
            try:
                db.query(_REPLAY[3])
            except Exception:
                pass

    threads = [threading.Thread(target=contend) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        loaded = _replay()
    finally:
        stop.set()
        for t in threads:
            t.join()
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert loaded == alone


# ---------------------------------------------------------------------------- copies
_UNBOUNDED = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r)"


def _script(env) -> list[str]:
    call = env.unwrapped.parser.format_call
    return [
        call("sql", {"query": "SELECT COUNT(*) FROM orders"}),
        call("sql", {"query": "SELECT random()"}),
        call(
            "sql", {"query": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"}
        ),
        "not a tool call",
    ]


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
@pytest.mark.parametrize("when", ["before reset", "mid-episode"])
def test_copies_continue_exactly_like_the_original(how, when):
    env = gym.make("AgentR1/SQLite-v0", tool_noise={"failure_prob": 0.3})
    if when == "mid-episode":
        env.reset(seed=5, options={"task_index": 10})
        env.step(env.unwrapped.oracle_action())
    clone = pickle.loads(pickle.dumps(env)) if how == "pickle" else copy.deepcopy(env)
    if when == "before reset":
        for e in (env, clone):
            e.reset(seed=5, options={"task_index": 10})
    actions = _script(env) + [env.unwrapped.oracle_action() for _ in range(1)]
    for action in actions + [None] * 6:
        a = action if action is not None else env.unwrapped.oracle_action()
        out, clone_out = env.step(a), clone.step(a)
        assert data_equivalence(out, clone_out), a
        if out[2]:
            break
    assert out[2] and out[4]["metrics"]["answer_em"] == 1.0
    assert clone.unwrapped.tools["sql"].database is not env.unwrapped.tools["sql"].database


def test_averages_round_half_up_like_the_question_says():
    task = generate_sql_task(123)  # the kitchen prices average exactly 37.365
    assert task.kind == "average" and task.answer == (37.37,) and _independent_answer(task) == [37.37]


def test_reward_range_is_exact_and_both_ends_are_reached():
    # A non-final step pays at least format + repeat + step_cost + valid_query = -0.1 - 0.05 - 0.01 - 0.02;
    # an answer step runs no SQL, so its best is the answer weight alone.
    env = gym.make("AgentR1/SQLite-v0", reward="process")
    assert env.unwrapped.reward_range == pytest.approx((-0.18, 1.0))
    env.reset(seed=0, options={"task_index": 0})
    bad = '<tool_call>{"name": "sql", "arguments": {"query": "SELECT nope FROM nowhere"}}</tool_call>'
    _, first, *_ = env.step(bad)
    assert first == pytest.approx(-0.01 - 0.02)  # step cost + a failed query
    _, low, *_ = env.step(bad + "<tool_call>{broken</tool_call>")  # repeated, failing, and malformed
    assert low == pytest.approx(-0.18)
    terminated = False
    while not terminated:  # the oracle's queries, then its (correct) answer
        _, high, terminated, _, _ = env.step(env.unwrapped.oracle_action())
    assert high == pytest.approx(1.0)

import gymnasium as gym
import pytest
from hypothesis import given

import agent_gym  # noqa: F401  (registers the ids)
from agent_gym.envs.sqlite import SqliteEnv, generate_sql_task, score_sql_answer
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


def test_oracle_solves_at_least_99_percent_of_500_tasks():
    env = SqliteEnv()
    solved = 0
    for i in range(500):
        terminated, info = _oracle_episode(env, i)
        solved += terminated and info["metrics"]["answer_em"] == 1.0 and info["metrics"]["evidence_recall"] == 1.0
    assert solved / 500 >= 0.99


def test_tasks_are_deterministic_and_cover_every_kind():
    assert generate_sql_task(40) == generate_sql_task(40)
    assert generate_sql_task(40).database != generate_sql_task(40, task_seed=1).database
    tasks = [generate_sql_task(i) for i in range(27)]
    assert {t.domain for t in tasks} == {"shop", "school", "company"}
    assert {t.kind for t in tasks} >= {"lookup", "join", "count", "sum", "average", "max", "two_step_top"}
    assert all(len(t.gold_queries) == 2 for t in tasks if t.kind.startswith("two_step"))


def test_gold_answer_is_what_the_gold_queries_return():
    for i in range(60):
        task = generate_sql_task(i)
        rows = SqlDatabase.from_bytes(task.database).query(task.gold_queries[-1]).rows
        assert tuple(dict.fromkeys(r[0] for r in rows)) == task.answer and task.answer


def test_touching_gold_tables_reveals_evidence_and_bad_sql_is_penalised():
    env = SqliteEnv(shaping_gamma=1.0)
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

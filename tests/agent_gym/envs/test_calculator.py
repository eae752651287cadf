import gymnasium as gym
from hypothesis import given

import agent_gym  # noqa: F401  (registers the ids)
from agent_gym.envs.calculator import CalculatorEnv, generate_arithmetic_task
from agent_gym.testing import check_step, check_text_env, run_episode
from agent_gym.testing.strategies import actions


def _oracle_episode(env, index, seed=0, max_steps=10):
    options = {"task_index": index}
    *_, terminated, _, info = run_episode(
        env, env.unwrapped.oracle_action, seed=seed, options=options, max_steps=max_steps
    )[-1]
    return terminated, info


def test_conformance_via_gym_make():
    check_text_env(gym.make("AgentR1/Calculator-v0"))


def test_oracle_solves_at_least_99_percent_of_500_tasks():
    env = CalculatorEnv()
    solved = 0
    for i in range(500):
        terminated, info = _oracle_episode(env, i)
        solved += terminated and info["metrics"]["answer_em"] == 1.0 and info["metrics"]["evidence_recall"] == 1.0
    assert solved / 500 >= 0.99


def test_tasks_are_deterministic_and_seeded():
    assert generate_arithmetic_task(17) == generate_arithmetic_task(17)
    assert generate_arithmetic_task(17) != generate_arithmetic_task(18)
    assert generate_arithmetic_task(17, task_seed=1).question != generate_arithmetic_task(17).question
    env = CalculatorEnv(num_tasks=50)
    assert env.task_index_of("calc-0-42") == 42
    assert "calc-0-7" == env.reset(options={"task_id": "calc-0-7"})[1]["task_id"]


def test_gold_steps_are_exact_cents():
    for i in range(200):
        task = generate_arithmetic_task(i)
        assert 2 <= len(task.steps) <= 4 and task.answer == task.steps[-1].value
        assert all(s.value >= 0 and 100 % s.value.denominator == 0 for s in task.steps)


def test_intermediate_results_earn_evidence_but_typed_numbers_do_not():
    env = CalculatorEnv(shaping_gamma=1.0)
    env.reset(seed=0, options={"task_index": 1})
    task = env.state.task
    first = task.steps[0]
    _, _, _, _, info = env.step(env.parser.format_call("calculator", {"expression": str(first.value)}))
    assert info["new_evidence"] == [] and info["reward_terms"]["evidence"] == 0.0
    _, _, _, _, info = env.step(env.parser.format_call("calculator", {"expression": first.expression}))
    assert info["new_evidence"] == [f"value:{first.value}"] and info["reward_terms"]["evidence"] > 0
    assert info["reward_terms"]["shaping"] > 0


def test_answer_scoring():
    env = CalculatorEnv()
    task = env.load_task(0)  # shopping: 83.12 dollars of change
    assert env.score_answer(task, "83.12")["em"] == 1.0
    assert env.score_answer(task, "$83.12")["em"] == 1.0
    assert env.score_answer(task, "The change is 83.12 dollars.")["em"] == 1.0
    assert env.score_answer(task, "83.1")["em"] == 0.0
    assert env.score_answer(task, "83.12 or 84")["em"] == 0.0  # listing guesses earns nothing
    assert env.score_answer(task, "eighty")["em"] == 0.0


def test_tags_format_and_outcome_reward():
    env = CalculatorEnv(action_format="tags", reward="outcome")
    terminated, info = _oracle_episode(env, 5)
    assert terminated and info["reward_terms"] == {"outcome": 1.0}
    assert env.parser.format_call("calculator", {"expression": "1+1"}) == "<calculator>1+1</calculator>"


def test_tool_failures_are_observations_and_the_oracle_retries():
    env = CalculatorEnv(tool_noise={"failure_prob": 0.5})
    terminated, info = _oracle_episode(env, 3, seed=1, max_steps=40)
    assert terminated and info["metrics"]["answer_em"] == 1.0
    always_down = CalculatorEnv(tool_noise={"failure_prob": 1.0})
    always_down.reset(seed=0)
    _, _, terminated, _, info = always_down.step(always_down.oracle_action())
    assert not terminated and not info["tool_calls"][0]["ok"] and info["new_evidence"] == []


_ENV = CalculatorEnv()


@given(actions(tool_names=["calculator"]))
def test_adversarial_actions_never_crash(action):
    _ENV.reset(seed=0, options={"task_index": 11})
    obs, reward, terminated, truncated, info = _ENV.step(action)
    check_step(_ENV, obs, reward, terminated, truncated, info)

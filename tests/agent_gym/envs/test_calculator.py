import copy
import hashlib
import json
import pickle
import re
from fractions import Fraction

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import data_equivalence
from hypothesis import given

import agent_gym  # noqa: F401  (registers the ids)
from agent_gym.envs.calculator import CalculatorEnv, generate_arithmetic_task
from agent_gym.testing import check_step, check_text_env, run_episode
from agent_gym.testing.strategies import actions
from agent_gym.tools.calculator import format_number


def _oracle_episode(env, index, seed=0, max_steps=10):
    options = {"task_index": index}
    *_, terminated, _, info = run_episode(
        env, env.unwrapped.oracle_action, seed=seed, options=options, max_steps=max_steps
    )[-1]
    return terminated, info


def test_conformance_via_gym_make():
    check_text_env(gym.make("AgentR1/Calculator-v0"))


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
    env = CalculatorEnv(reward="process", shaping_gamma=1.0)
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


# ---------------------------------------------------------------------------- every task (issue 10 point 6)
# The answer is recomputed here from the numbers in the question's text, never from the generator's steps.
_M = r"\$?(\d+(?:\.\d+)?)"
_PROBLEMS = {
    "shopping": (
        rf"\w+ buys (\d+) \w+ at {_M} each and (\d+) \w+ at {_M} each, paying with a {_M} bill\.",
        lambda n1, p1, n2, p2, bill: bill - (n1 * p1 + n2 * p2),
    ),
    "savings": (
        rf"\w+ saves {_M} every week for (\d+) weeks, then spends (\d+)% of the savings",
        lambda weekly, weeks, pct: weekly * weeks * (1 - pct / 100),
    ),
    "fence": (
        rf"is (\d+) m long and (\d+) m wide\. .* except for a (\d+) m gate\. Fencing costs {_M} per metre",
        lambda length, width, gate, cost: (2 * (length + width) - gate) * cost,
    ),
    "factory": (
        r"makes (\d+) parts per hour and runs (\d+) hours a day for (\d+) days\. (\d+)% of the parts",
        lambda rate, hours, days, pct: rate * hours * days * (1 - pct / 100),
    ),
    "split_bill": (
        rf"(\d+) friends share a restaurant bill of {_M} and add a (\d+)% tip",
        lambda people, bill, pct: bill * (1 + pct / 100) / people,
    ),
    "trip": (
        rf"at (\d+) km/h for {_M} hours, then at (\d+) km/h for {_M} hours\. .* is (\d+) km from the start",
        lambda v1, t1, v2, t2, goal: goal - (v1 * t1 + v2 * t2),
    ),
    "discount": (
        rf"at {_M} each and gives (\d+)% off orders of 10 or more\. A school orders (\d+) ",
        lambda price, pct, n: n * price * (1 - pct / 100) if n >= 10 else n * price,
    ),
}


def _independent_answer(task) -> Fraction:
    pattern, solve = _PROBLEMS[task.template]
    match = re.search(pattern, task.question)
    assert match, f"unexpected {task.template} question: {task.question!r}"
    return solve(*(Fraction(g) for g in match.groups()))


def _solved_by_the_oracle(env, index: int, seed: int) -> bool:
    terminated, info = _oracle_episode(env, index, seed=seed)
    return terminated and info["metrics"]["answer_em"] == 1.0 and info["metrics"]["evidence_recall"] == 1.0


_SPREAD = sorted({*range(0, 10_000, 97), 1, 2, 4999, 6447, 9998, 9999})


def test_the_shopping_task_that_raised_stop_iteration_now_resets_and_is_solved():
    env = gym.make("AgentR1/Calculator-v0")
    for seed in (818, 2598, 6934):  # the seeds of issue 10: each draws task 6447
        _, info = env.reset(seed=seed)
        assert info["task_index"] == 6447
    task = generate_arithmetic_task(6447)
    assert "9 towels at $12.00 each and 9 pens at $11.25 each, paying with a $500 bill" in task.question
    assert task.answer == Fraction("290.75") == _independent_answer(task)  # 500 - (108 + 101.25)
    assert _solved_by_the_oracle(env, 6447, seed=818)


def test_a_spread_of_tasks_matches_the_independent_solver_and_the_oracle_solves_it():
    env = gym.make("AgentR1/Calculator-v0")
    templates = set()
    for i in _SPREAD:
        task = generate_arithmetic_task(i)
        assert task.answer == _independent_answer(task), task.id
        assert _solved_by_the_oracle(env, i, seed=i), task.id
        templates.add(task.template)
    assert templates == set(_PROBLEMS)


@pytest.mark.slow
def test_all_10000_tasks_reset_via_gym_make_match_the_solver_and_are_solved():
    env = gym.make("AgentR1/Calculator-v0")
    for i in range(env.unwrapped.num_tasks()):
        task = generate_arithmetic_task(i)
        assert task.answer == _independent_answer(task), task.id
        assert _solved_by_the_oracle(env, i, seed=i), task.id


def _fingerprint(task) -> str:
    steps = [[s.expression, str(s.value)] for s in task.steps]
    payload = [task.id, task.template, task.question, steps, str(task.answer)]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]


@pytest.mark.parametrize(
    ("index", "fingerprint"),
    [
        (0, "1811044c52589674"),
        (1, "8b04a2294457568f"),
        (2, "0ee8226d4ec9a3f8"),
        (4999, "41291be59a59cd64"),
        (6447, "30fbaf739c74197d"),
        (9999, "765263fd9fe15c4e"),
    ],
)
def test_task_i_is_the_same_on_every_machine(index, fingerprint):
    assert _fingerprint(generate_arithmetic_task(index)) == fingerprint


# ---------------------------------------------------------------------------- copies
@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
@pytest.mark.parametrize("when", ["before reset", "mid-episode"])
def test_copies_continue_exactly_like_the_original(how, when):
    # room for every retry: a truncated episode cannot be stepped on (the end-of-episode rule)
    env = gym.make("AgentR1/Calculator-v0", tool_noise={"failure_prob": 0.4}, max_episode_steps=30)
    if when == "mid-episode":
        env.reset(seed=2, options={"task_index": 6447})
        env.step(env.unwrapped.oracle_action())
    clone = pickle.loads(pickle.dumps(env)) if how == "pickle" else copy.deepcopy(env)
    if when == "before reset":
        for e in (env, clone):
            e.reset(seed=2, options={"task_index": 6447})
    call = env.unwrapped.parser.format_call
    script = [call("calculator", {"expression": "min(5)"}), call("calculator", {"expression": "9**9**9"}), "??"]
    for i in range(30):
        action = script[i] if i < len(script) else env.unwrapped.oracle_action()
        out = env.step(action)
        assert data_equivalence(out, clone.step(action)), action
        if out[2] or out[3]:
            break
    assert out[2] and out[4]["metrics"]["answer_em"] == 1.0


def _flawed_episode(index: int, task_seed: int = 0):
    env = gym.make("AgentR1/Calculator-v0", task_seed=task_seed, action_format="tags")
    record = run_episode(env, env.unwrapped.flawed_oracle_action, seed=0, options={"task_index": index}, max_steps=10)
    return record[1:]


def test_the_flawed_demonstrator_answers_one_calculation_early():
    # task 0 of family 0: 5 * 11.49 = 57.45, 7 * 8.49 = 59.43, 57.45 + 59.43 = 116.88, 200 - 116.88 = 83.12
    steps = _flawed_episode(0)
    actions = [s[0] for s in steps]
    assert actions == [
        "<calculator>5 * 11.49</calculator>",
        "<calculator>7 * 8.49</calculator>",
        "<calculator>57.45 + 59.43</calculator>",
        "<answer>116.88</answer>",
    ]
    info = steps[-1][-1]
    assert steps[-1][3] is True and info["metrics"]["answer_em"] == 0.0 and info["metrics"]["evidence_recall"] == 0.75


def test_the_flawed_demonstrator_skips_the_last_step_of_every_task():
    coincidences = 0
    for i in range(120):
        task = generate_arithmetic_task(i)
        steps = _flawed_episode(i)
        calls = [s[0] for s in steps[:-1]]
        if task.answer in {s.value for s in task.steps[:-1]}:  # e.g. calc-0-32: a 20% tip of 690 is 138 a head too
            assert steps[-1][-1]["metrics"]["answer_em"] == 1.0, task.id  # it acts as the oracle
            coincidences += 1
            continue
        env = gym.make("AgentR1/Calculator-v0", action_format="tags")
        oracle = run_episode(env, env.unwrapped.oracle_action, seed=0, options={"task_index": i}, max_steps=10)
        oracle_calls = [s[0] for s in oracle[1:-1]]  # a repeated value is not computed twice (calc-0-45)
        assert calls == oracle_calls[:-1], task.id
        assert steps[-1][0] == f"<answer>{format_number(task.steps[-2].value)}</answer>", task.id
        assert steps[-1][-1]["metrics"]["answer_em"] == 0.0, task.id
    assert 0 < coincidences < 6

"""AgentR1/Bandit-v0: one paying arm per family, seeded pulls with the stated win rates, rewards by hand."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest

import agent_gym  # noqa: F401
from agent_gym.envs.bandit import ARMS, BanditEnv, PullTool


def test_one_arm_pays_for_every_task_of_a_family_and_orders_vary():
    env = BanditEnv()
    tasks = [env.load_task(i) for i in range(env.num_tasks())]
    assert {t.paying for t in tasks} == {env.paying_arm} and env.paying_arm in ARMS
    assert all(sorted(t.order) == sorted(ARMS) for t in tasks) and len({t.order for t in tasks}) > 10
    assert len({BanditEnv(task_seed=s).paying_arm for s in range(12)}) > 1  # families differ
    assert env.task_index_of("bandit-0-7") == 7


def test_rewards_by_hand():
    env = gym.make("AgentR1/Bandit-v0")
    base = env.unwrapped
    env.reset(seed=0, options={"task_index": 1})
    assert env.step("no action here")[1] == pytest.approx(-0.11)  # format penalty 0.1 + step cost 0.01
    _, reward, terminated, _, _ = env.step(base.parser.format_call("pull", {"arm": "red"}))
    assert reward == pytest.approx(-0.01) and not terminated
    wrong = next(a for a in ARMS if a != base.paying_arm)
    _, reward, terminated, _, info = env.step(f"<answer>{wrong}</answer>")
    assert (reward, terminated, info["metrics"]["answer_em"]) == (0.0, True, 0.0)
    env.reset(seed=0, options={"task_index": 1})
    _, reward, terminated, _, info = env.step(f"<answer> {base.paying_arm.upper()} </answer>")
    assert (reward, terminated, info["metrics"]["answer_em"], info["metrics"]["answer_f1"]) == (1.0, True, 1.0, 1.0)


@pytest.mark.parametrize("seed", [0, 3, 11])
def test_a_pull_is_a_coin_flip_from_the_reset_seed(seed):
    env = gym.make("AgentR1/Bandit-v0")
    env.reset(seed=seed, options={"task_index": 0})
    paying = env.unwrapped.paying_arm
    _, _, _, _, info = env.step(env.unwrapped.parser.format_call("pull", {"arm": paying}))
    expected = int(np.random.default_rng(seed).random() < 0.8)  # the env's generator, first draw
    assert info["tool_calls"][0]["content"] == f"The {paying} machine paid {expected}."


def test_win_rates_over_many_pulls():
    tool = PullTool(ARMS, "blue", 0.8)
    from agent_gym.core.tool import ToolContext

    ctx = ToolContext(rng=np.random.default_rng(0))
    paid = {arm: sum(tool.call({"arm": arm}, ctx).metadata["payout"] for _ in range(2000)) / 2000 for arm in ARMS}
    assert abs(paid["blue"] - 0.8) < 0.03 and all(abs(paid[a] - 0.2) < 0.03 for a in ARMS if a != "blue")
    assert not tool.call({"arm": "purple"}).ok  # not in the schema's enum: an error result, not an exception
    clone = pickle.loads(pickle.dumps(tool))
    assert (clone.arms, clone.paying, clone.win_rate) == (ARMS, "blue", 0.8)


def test_oracle_pulls_the_paying_arm_once_then_answers_it():
    env = gym.make("AgentR1/Bandit-v0", task_seed=5)
    env.reset(seed=0)
    paying = env.unwrapped.paying_arm
    assert env.unwrapped.oracle_action() == env.unwrapped.parser.format_call("pull", {"arm": paying})
    assert env.step(env.unwrapped.oracle_action())[1] == pytest.approx(-0.01)
    _, reward, terminated, _, _ = env.step(env.unwrapped.oracle_action())
    assert reward == 1.0 and terminated


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"arms": ("red",)}, "at least 2"),
        ({"arms": ("red", "red")}, "distinct"),
        ({"arms": ("red", "dark blue")}, "whitespace"),
        ({"win_rate": 0.3}, "win_rate"),
        ({"answer_metric": "f1"}, "'em' only"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BanditEnv(**kwargs)

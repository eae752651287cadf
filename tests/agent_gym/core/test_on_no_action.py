"""``on_no_action="end"``: an action that runs no tool and gives no answer ends the episode (TRL's loop, Agent-R1)."""

import math

import gymnasium as gym
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_gym.core.env import EpisodeOverError, StopReason
from agent_gym.testing import check_text_env
from agent_gym.testing.strategies import actions
from tests.conftest import LookupEnv


def test_plain_text_ends_the_episode_without_an_answer():
    env = LookupEnv(on_no_action="end")
    env.reset(seed=0, options={"task_index": 1})
    obs, reward, term, trunc, info = env.step("I think the answer is Tokyo.")
    assert term and not trunc and info["stop_reason"] == StopReason.NO_ACTION == "no_action"
    # scored as a malformed non-final step: format -1 x 0.1, step cost -1 x 0.01, answer and shaping 0
    assert info["reward_terms"] == {
        "format": -0.1,
        "evidence": 0.0,
        "repeat": 0.0,
        "step_cost": -0.01,
        "answer": 0.0,
        "shaping": 0.0,
    }
    assert math.isclose(reward, -0.11)
    # no answer, so no answer score: absent, not 0
    assert info["metrics"] == {"turns": 1.0, "malformed_actions": 1.0, "evidence_recall": 0.0}
    # no error observation is appended: the episode's last message is the agent's
    assert [m["role"] for m in info["messages"]] == ["system", "user", "assistant"]
    assert info["new_messages"] == [{"role": "assistant", "content": "I think the answer is Tokyo."}]
    assert env.state is not None and env.state.done and env.state.answer is None
    with pytest.raises(EpisodeOverError):
        env.step("<answer>Tokyo</answer>")


def test_a_broken_call_ends_it_too_a_call_that_runs_goes_on_an_answer_answers():
    env = LookupEnv(on_no_action="end")
    env.reset(seed=0, options={"task_index": 1})
    *_, term, _, info = env.step(env.oracle_action())  # a tool call
    assert not term and info["stop_reason"] is None and info["tool_calls"][0]["ok"]
    *_, term, _, info = env.step(env.oracle_action())  # the answer
    assert term and info["stop_reason"] == "answer" and info["metrics"]["answer_em"] == 1.0

    env.reset(seed=0, options={"task_index": 1})
    env.step(env.oracle_action())
    *_, term, _, info = env.step("<tool_call>{broken")
    assert term and info["stop_reason"] == "no_action" and info["format_errors"]
    assert info["metrics"]["turns"] == 2.0 and info["metrics"]["evidence_recall"] == 1.0


def test_the_default_answers_with_feedback_and_goes_on():
    env = LookupEnv()
    assert env.on_no_action == "feedback"
    env.reset(seed=0)
    *_, term, _, info = env.step("I think the answer is Tokyo.")
    assert not term and info["stop_reason"] is None
    assert info["new_messages"][-1]["role"] == "user" and "Format error" in info["new_messages"][-1]["content"]


def test_unknown_value_is_refused():
    with pytest.raises(ValueError, match="on_no_action must be 'feedback' or 'end'"):
        LookupEnv(on_no_action="stop")


@given(st.lists(actions(tool_names=["lookup"]), min_size=1, max_size=6), st.integers(0, 2**16))
def test_under_end_every_step_runs_a_tool_answers_or_ends(action_list, seed):
    end, feedback = LookupEnv(on_no_action="end"), LookupEnv()
    end.reset(seed=seed)
    feedback.reset(seed=seed)
    for action in action_list:
        _, r_end, term, trunc, info = end.step(action)
        _, r_fb, term_fb, _, info_fb = feedback.step(action)
        assert not trunc
        assert r_end == r_fb and info["reward_terms"] == info_fb["reward_terms"]  # the same step, the same reward
        if info["tool_calls"] and info["stop_reason"] is None:
            assert not term
        else:
            assert term and info["stop_reason"] in ("answer", "no_action")
            assert (info["stop_reason"] == "answer") == term_fb
            break


@pytest.mark.parametrize("env_id", ["AgentR1/HotpotQA-v0", "AgentR1/SQLite-v0", "AgentR1/Bandit-v0"])
def test_registered_envs_pass_the_conformance_kit_with_end(env_id):
    env = gym.make(env_id, on_no_action="end")
    check_text_env(env)
    env.reset(seed=0, options={"task_index": 0})
    *_, term, _, info = env.step("no tags here")
    assert term and info["stop_reason"] == "no_action"

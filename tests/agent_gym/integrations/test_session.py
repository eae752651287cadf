"""EnvSession: the framework-free core every adapter shares."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest

from agent_gym.integrations.session import EnvSession, NativeCall, ObservationStyle, make_tool_env, user_text
from tests.agent_gym.integrations.conftest import native_oracle_run
from tests.conftest import LookupEnv

QUERY_0 = {"query": "Odile Marchetti"}


def play_oracle(session: EnvSession, task_index: int, seed: int = 0) -> list[float]:
    session.reset(seed=seed, task_index=task_index)
    rewards = []
    while not session.done:
        rewards.append(session.step(session.base.oracle_action()).reward)
    return rewards


def test_hotpotqa_task0_totals_by_hand():
    # Oracle: search, search, answer. The default (gated) preset: a search earns its step cost, -0.01, twice;
    # the answer 1.0 plus the evidence found, 0.2 x 1.0.
    session = EnvSession(make_tool_env("AgentR1/HotpotQA-v0"))
    rewards = play_oracle(session, 0)
    assert rewards == pytest.approx([-0.01, -0.01, 1.2])
    assert session.raw_totals == pytest.approx(
        {"format": 0.0, "evidence": 1.0, "repeat": 0.0, "step_cost": -2.0, "answer": 1.0}
    )
    assert session.episode_return == pytest.approx(1.18)
    assert sum(session.weighted_totals().values()) == pytest.approx(1.18)
    assert session.stop_reason == "answer"
    assert session.episode_metrics()["answer_f1"] == 1.0


def test_every_env_matches_the_native_run(env_id):
    session = EnvSession(make_tool_env(env_id))
    for task_index in (0, 1, 2):
        native = native_oracle_run(env_id, task_index)
        rewards = play_oracle(session, task_index)
        assert rewards == pytest.approx(native.rewards)
        assert session.raw_totals == pytest.approx(native.raw_totals)
        assert math.isclose(sum(session.weighted_totals().values()), session.episode_return, abs_tol=1e-9)
        assert session.episode_metrics() == pytest.approx(native.metrics)


def test_native_calls_get_tool_messages_with_their_ids_in_order():
    session = EnvSession(make_tool_env("AgentR1/HotpotQA-v0"))
    session.reset(seed=0, task_index=0)
    view = session.step_native(
        "thinking",
        [
            NativeCall("a", "search", '{"query": "Odile Marchetti"}'),
            NativeCall("b", "search", "not json"),
            NativeCall("c", "nosuch", {}),
        ],
    )
    assert [(m["role"], m["tool_call_id"]) for m in view.messages] == [("tool", "a"), ("tool", "b"), ("tool", "c")]
    assert view.messages[0]["content"].startswith("Doc 1 (Title: Odile Marchetti)")
    assert "not valid JSON" in view.messages[1]["content"]
    assert view.messages[2]["content"] == "Error: unknown tool 'nosuch'; available tools: search"
    assert view.info["tool_calls"][0]["arguments"] == QUERY_0  # the env ran the decoded call
    assert len(view.info["tool_calls"]) == 2  # the undecodable call never reached the env


def test_text_call_in_content_comes_back_as_user_message_after_tool_messages():
    session = EnvSession(make_tool_env("AgentR1/HotpotQA-v0"))
    session.reset(seed=0, task_index=0)
    text_call = session.base.parser.format_call("search", {"query": "Varnholt"})
    view = session.step_native(text_call, [NativeCall("n1", "search", QUERY_0)])
    assert [m["role"] for m in view.messages] == ["tool", "user"]
    assert view.messages[0]["content"].startswith("Doc 1 (Title: Odile Marchetti)")
    assert view.messages[1]["content"].startswith("<tool_response>\nDoc 1 (Title: Varnholt)")


def test_tool_style_keeps_the_envs_own_messages():
    session = EnvSession(make_tool_env("AgentR1/HotpotQA-v0"), ObservationStyle.TOOL)
    session.reset(seed=0, task_index=0)
    view = session.step(session.base.oracle_action())
    assert [(m["role"], m["name"], m["tool_call_id"]) for m in view.messages] == [("tool", "search", "call_1_0")]


def test_malformed_reply_gets_feedback_and_a_format_penalty():
    session = EnvSession(make_tool_env("AgentR1/Calculator-v0"))
    session.reset(seed=0, task_index=0)
    view = session.step_native("I am not sure.", [])
    assert [m["role"] for m in view.messages] == ["user"]
    assert view.messages[0]["content"].startswith("Format error:")
    assert session.raw_totals["format"] == -1.0
    assert not view.done


def test_native_call_on_a_tags_env_and_one_the_format_cannot_express():
    session = EnvSession(make_tool_env("AgentR1/HotpotQA-v0", action_format="tags"))
    session.reset(seed=0, task_index=0)
    view = session.step_native(None, [NativeCall("a", "search", QUERY_0), NativeCall("b", "search", {"q": "x"})])
    assert view.messages[0]["tool_call_id"] == "a"
    assert view.messages[0]["content"].startswith("Doc 1 (Title: Odile Marchetti)")
    assert view.messages[1]["tool_call_id"] == "b"
    assert view.messages[1]["content"].startswith("Error: 'search' cannot be written")


def test_turn_limit_truncates_and_reports_no_answer_metrics():
    session = EnvSession(make_tool_env("AgentR1/HotpotQA-v0", max_episode_steps=2))
    session.reset(seed=0, task_index=0)
    session.step(session.base.parser.format_call("search", QUERY_0))
    view = session.step(session.base.parser.format_call("search", QUERY_0))
    assert view.truncated and not view.terminated and view.done
    assert session.stop_reason == "max_turns"
    assert session.episode_metrics() == {"turns": 2.0}  # absent answer scores stay absent, not 0
    with pytest.raises(RuntimeError, match="episode is over"):
        session.step("<answer>x</answer>")


def test_a_users_own_tool_env_through_a_factory():
    session = EnvSession(make_tool_env(lambda: gym.wrappers.TimeLimit(LookupEnv(), 3)))
    messages, tools = session.reset(seed=0, task_index=1)
    assert messages[-1]["content"] == "What is the capital of Japan?"
    assert [t["function"]["name"] for t in tools] == ["lookup"]
    view = session.step_native(None, [NativeCall("x", "lookup", {"country": "Japan"})])
    assert view.messages[0]["content"] == "The capital of Japan is Tokyo."
    assert session.step("<answer>Tokyo</answer>").terminated


def test_non_tool_env_is_refused():
    with pytest.raises(TypeError, match="not a ToolEnv"):
        make_tool_env("CartPole-v1")


def test_a_missing_reward_term_fails_loudly():
    class DropTerm(gym.Wrapper):
        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            info["reward_raw"].pop("answer")
            return obs, reward, terminated, truncated, info

    session = EnvSession(DropTerm(make_tool_env("AgentR1/Calculator-v0")))
    session.reset(seed=0, task_index=0)
    with pytest.raises(KeyError, match="answer"):
        session.step("<answer>1</answer>")


def test_user_text_wraps_tool_results_only():
    text = user_text([{"role": "tool", "content": "r1"}, {"role": "user", "content": "note"}])
    assert text == "<tool_response>\nr1\n</tool_response>\nnote"

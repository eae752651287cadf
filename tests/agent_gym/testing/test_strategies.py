"""The hypothesis strategies: each hostile class is what it says, and next_action reaches the whole MDP."""

import re

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_gym.core.history import Role
from agent_gym.core.scanning import json_depth
from agent_gym.testing.strategies import (
    MIB,
    deep_json_actions,
    histories,
    huge_number_actions,
    megabyte_actions,
    mixed_call_actions,
    play_episode,
    repeated_tag_actions,
)
from tests.conftest import LookupEnv


def _roomy() -> LookupEnv:
    return LookupEnv(max_action_length=2 * MIB, max_observation_length=8 * MIB)


@given(huge_number_actions(["lookup"], ["country"]))
def test_huge_numbers_are_huge_and_refused(action):
    assert re.search(r"\d{4301}", action) or re.search(r"1e999|NaN|Infinity|0{400}e-999", action)
    env = _roomy()
    env.reset(seed=0)
    _, _, _, _, info = env.step(action)
    if action.startswith("<tool_call>"):
        assert info["format_errors"] and info["tool_calls"] == []


@given(deep_json_actions(["lookup"], ["country"]))
def test_deep_json_is_deeper_than_the_limit_and_refused(action):
    inner = action[len("<tool_call>") : -len("</tool_call>")]
    assert json_depth(inner) > 32 or '"arguments": "' in action  # double-encoded: deep inside the string
    env = _roomy()
    env.reset(seed=0)
    _, _, _, _, info = env.step(action)
    assert info["format_errors"] and info["tool_calls"] == []
    assert env.step(env.oracle_action())[4]["tool_calls"][0]["ok"]  # the episode goes on


@given(repeated_tag_actions(), megabyte_actions())
def test_repeated_tags_and_megabytes(repeated, megabyte):
    assert len(megabyte) == MIB
    assert re.fullmatch(r"(.+?)\1*", repeated[:2000], flags=re.DOTALL)
    for action in (repeated, megabyte):
        env = _roomy()
        env.reset(seed=0)
        obs, *_ = env.step(action)
        assert env.observation_space.contains(obs)


@given(mixed_call_actions(["lookup"], ["country"]))
def test_mixed_calls_report_exactly_what_ran(action):
    env = _roomy()
    env.reset(seed=0)
    parsed = env.parser.parse(action)
    _, _, _, _, info = env.step(action)
    assert len(info["tool_calls"]) == len(parsed.tool_calls) <= 4
    if parsed.well_formed:
        return
    feedback = info["new_messages"][-1]["content"]
    if parsed.tool_calls:
        assert "Ran tool call(s) " in feedback and f"of {parsed.calls_written} " in feedback
    else:
        assert "No tool was run." in feedback


@pytest.mark.parametrize(
    ("name", "make", "floors"),
    [
        ("lookup", LookupEnv, (0.6, 0.5)),
        ("hotpotqa", lambda: gym.make("AgentR1/HotpotQA-v0"), (0.7, 0.6)),
        ("calculator", lambda: gym.make("AgentR1/Calculator-v0"), (0.6, 0.4)),
        ("sqlite", lambda: gym.make("AgentR1/SQLite-v0"), (0.8, 0.7)),
    ],
)
def test_next_action_reaches_evidence_and_correct_answers(name, make, floors):
    env, runs = make(), []

    @settings(max_examples=200, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def episodes(data):
        runs.append(play_episode(data, env))

    episodes()
    evidence = sum(r.evidence_found > 0 for r in runs) / len(runs)
    correct = sum(bool(r.correct) for r in runs) / len(runs)
    ended = sum(r.terminated or r.truncated for r in runs) / len(runs)
    print(
        f"{name}: {len(runs)} episodes, evidence found {evidence:.1%}, answered correctly {correct:.1%}, "
        f"ended within 8 steps {ended:.1%}"
    )
    assert evidence >= floors[0] and correct >= floors[1] and ended >= 0.8


_ENVS = {
    "lookup": LookupEnv,
    "hotpotqa": lambda: gym.make("AgentR1/HotpotQA-v0"),
    "calculator": lambda: gym.make("AgentR1/Calculator-v0"),
    "sqlite": lambda: gym.make("AgentR1/SQLite-v0"),
}
_made: dict[str, gym.Env] = {}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_ENVS))
@settings(max_examples=200, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_drawn_episodes_pass_check_step_and_report_coverage(name, data):
    """Every step of 200 drawn episodes passes ``check_step``; run with ``--hypothesis-show-statistics`` to see the
    fractions of episodes labelled by ``event()`` (evidence found, ended by an answer, answered correctly) and the
    best ``target()`` scores (evidence recall, return). The same draws as the reachability test above."""
    env = _made.setdefault(name, _ENVS[name]())
    coverage = play_episode(data, env)
    assert coverage.steps >= 1


@given(histories(max_turns=5))
def test_histories_are_shaped_like_a_tool_envs(history):
    roles = [m.role for m in history]
    systems = roles.index(Role.USER)
    assert 1 <= systems <= 2 and set(roles[:systems]) == {Role.SYSTEM}
    assert roles[systems + 1 :].count(Role.ASSISTANT) <= 5
    assert roles[systems + 1 : systems + 2] in ([], [Role.ASSISTANT])  # the question, then a turn or the end
    calls = {}
    for message in history[systems + 1 :]:
        if message.role is Role.ASSISTANT:
            calls = {c.id: c.name for c in message.tool_calls}
        elif message.role is Role.TOOL:
            assert calls.pop(message.tool_call_id) == message.name  # each result answers a call of its turn, once
        else:
            assert message.role is Role.USER and message.content.startswith("Format error: ") and not calls

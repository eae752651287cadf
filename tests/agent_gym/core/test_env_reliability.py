"""Issue 10 on the core env: nothing escapes step(), long actions are refused unparsed, feedback tells the truth."""

import copy
import json
import pickle

import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv
from hypothesis import given
from hypothesis import strategies as st

from agent_gym.core.parsing import ParsedAction, ToolCallParser
from agent_gym.testing.strategies import MIB, hostile_actions
from tests.conftest import LookupEnv

HUGE_INT = '<tool_call>{"name": "lookup", "arguments": {"country": "Peru", "n": ' + "9" * 4_301 + "}}</tool_call>"
DEEP_STRING = '<tool_call>{"name": "lookup", "arguments": "' + "[" * 100_000 + '"}</tool_call>'
DEEP_ARRAY = '<tool_call>{"name": "lookup", "arguments": ' + "[" * 100_000 + "}</tool_call>"
DEEP_980 = (
    '<tool_call>{"name": "lookup", "arguments": {"country": "Peru", "z": ' + "[" * 980 + "]" * 980 + "}}</tool_call>"
)
ISSUE_INPUTS = {"huge_int": HUGE_INT, "deep_string": DEEP_STRING, "deep_array": DEEP_ARRAY, "deep_980": DEEP_980}


def _roomy(**kwargs) -> LookupEnv:
    """A LookupEnv whose action limit lets the issue's inputs reach the parser."""
    return LookupEnv(max_action_length=300_000, **kwargs)


@pytest.mark.parametrize("name", ISSUE_INPUTS)
@pytest.mark.parametrize("action_format", ["tool_call", "tags"])
def test_issue_inputs_are_format_errors_and_the_episode_goes_on(name, action_format):
    env = _roomy(action_format=action_format)
    env.reset(seed=0, options={"task_index": 3})
    action = ISSUE_INPUTS[name]
    if action_format == "tags":  # the same text as a tag argument: a plain string, which must not break either
        action = f"<lookup>{action}</lookup>"
    obs, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(obs) and not terminated
    if action_format == "tool_call":
        assert info["format_errors"] and info["tool_calls"] == [] and reward == pytest.approx(-0.11)
    # the history holding the action still renders, serialises, copies and pickles ...
    json.dumps(info["messages"])
    pickle.loads(pickle.dumps(copy.deepcopy(env)))
    # ... and the next steps work
    _, _, _, _, info = env.step(env.oracle_action())
    assert info["new_evidence"] == ["q3"]
    assert env.step(env.oracle_action())[2]


class RefusingParser:
    """A parser that fails the test if it is asked to parse anything."""

    def __init__(self, inner):
        self.inner = inner

    def parse(self, text, turn=0):
        raise AssertionError("an over-long action reached the parser")

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.parametrize(
    "action",
    [
        "<tool_call>" * 16_000,
        "<answer>" * MIB,
        "<search>" * 200_000,
        ("[" * MIB),
        ('<tool_call>{"name": "lookup", "arguments": {"country": "Peru"}}</tool_call>' * 20_000),
        "x" * 16_385,
    ],
)
def test_an_over_long_action_is_refused_before_parsing(action):
    env = LookupEnv()
    env.reset(seed=0)
    env._parser = RefusingParser(env._parser)
    obs, reward, terminated, _, info = env.step(action)
    assert info["format_errors"] == [f"action is {len(action)} characters long; the limit is 16384"]
    assert not terminated and info["tool_calls"] == [] and env.observation_space.contains(obs)
    assert "No tool was run." in info["new_messages"][-1]["content"]


def test_a_valid_and_a_malformed_call_say_what_ran():
    env = LookupEnv()
    env.reset(seed=0, options={"task_index": 0})
    good = env.parser.format_call("lookup", {"country": "France"})
    _, reward, _, _, info = env.step(good + "<tool_call>{oops</tool_call>")
    assert [c["content"] for c in info["tool_calls"]] == ["The capital of France is Paris."]
    assert info["new_evidence"] == ["q0"]  # the call ran, so its evidence counts
    feedback = info["new_messages"][-1]["content"]
    assert [m["role"] for m in info["new_messages"]] == ["assistant", "tool", "user"]
    assert feedback.startswith("Format error: tool call 2: invalid JSON")
    assert "Ran tool call(s) 1 of 2 (lookup); refused 2." in feedback and "No tool was run" not in feedback
    # format -0.1, evidence +0.2 * 1, step cost -0.01, shaping 0.2 * (1 * 1 - 0)
    assert info["reward_terms"] == pytest.approx(
        {"format": -0.1, "evidence": 0.2, "repeat": 0.0, "step_cost": -0.01, "answer": 0.0, "shaping": 0.2}
    )
    assert reward == pytest.approx(0.29)


def test_up_to_four_calls_per_action_run_in_order():
    env = LookupEnv()
    env.reset(seed=0, options={"task_index": 3})  # Peru
    countries = ["France", "Japan", "Kenya", "Atlantis", "Peru"]
    action = "".join(env.parser.format_call("lookup", {"country": c}) for c in countries)
    _, reward, _, _, info = env.step(action)
    assert [c["arguments"]["country"] for c in info["tool_calls"]] == countries[:4]
    assert [c["id"] for c in info["tool_calls"]] == ["call_1_0", "call_1_1", "call_1_2", "call_1_3"]
    assert [c["ok"] for c in info["tool_calls"]] == [True, True, True, False]
    assert [m["role"] for m in info["new_messages"]] == ["assistant", "tool", "tool", "tool", "tool", "user"]
    shown = [m["content"] for m in info["new_messages"][1:5]]
    assert shown[:3] == [
        f"The capital of {c} is {t}." for c, t in [("France", "Paris"), ("Japan", "Tokyo"), ("Kenya", "Nairobi")]
    ]
    assert shown[3] == "Error: no country named 'Atlantis'"
    assert (
        "Ran tool call(s) 1-4 of 5 (lookup, lookup, lookup, lookup); refused 5." in info["new_messages"][-1]["content"]
    )
    assert info["new_evidence"] == [] and info["evidence_found"] == 0  # the refused fifth call held the evidence
    assert reward == pytest.approx(-0.1 - 0.01)


@pytest.mark.parametrize("limit", [1, 2, 5, 10, 30, 45, 59, 60, 61, 80, 200, 2_000])
def test_observations_fit_every_observation_length(limit):
    env = LookupEnv(max_observation_length=limit)
    obs, _ = env.reset(seed=0, options={"task_index": 0})
    assert env.observation_space.contains(obs)
    for action in ["junk", None, "<tool_call>{oops</tool_call>" * 3, None]:
        obs, *_ = env.step(action or env.oracle_action())
        assert env.observation_space.contains(obs), (limit, len(obs))
    assert obs.endswith("<answer>Paris</answer>\n"[-min(limit, 8) :])  # the latest text is always shown


@given(st.integers(1, 400), hostile_actions(tool_names=["lookup"], arg_names=["country"]))
def test_observations_and_tool_results_fit_their_limits(limit, action):
    env = LookupEnv(max_observation_length=limit, max_result_length=max(1, limit // 3))
    obs, _ = env.reset(seed=1)
    for a in [action, env.parser.format_call("lookup", {"country": "Japan"})]:
        obs, _, terminated, _, info = env.step(a)
        assert env.observation_space.contains(obs)
        assert all(len(c["content"]) <= env.max_result_length for c in info["tool_calls"])
        if terminated:  # a hostile action may be a (well-formed) answer
            break


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_result_length": -5}, "max_result_length must be a positive int"),
        ({"max_result_length": 0}, "max_result_length must be a positive int"),
        ({"max_action_length": 0}, "max_action_length must be a positive int"),
        ({"max_observation_length": 0}, "max_observation_length must be a positive int"),
        ({"max_observation_length": 2.5}, "max_observation_length must be a positive int"),
        ({"action_format": "xml"}, "action_format must be one of"),
        ({"render_mode": "human"}, "render_mode must be one of"),
    ],
)
def test_bad_constructor_arguments_fail_at_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LookupEnv(**kwargs)


def test_rubric_must_be_a_rubric():
    with pytest.raises(TypeError, match="rubric must be a Rubric"):
        LookupEnv(rubric=[1, 2])


@pytest.mark.parametrize("index", [np.int64(2), np.int32(2), np.uint8(2), 2])
def test_numpy_integer_task_indices_are_accepted(index):
    env = LookupEnv()
    obs, info = env.reset(options={"task_index": index})
    assert "Kenya" in obs and info["task_index"] == 2 and type(info["task_index"]) is int


@pytest.mark.parametrize("index", [np.float64(2.0), True, -1, 4, "2"])
def test_other_task_indices_are_refused(index):
    with pytest.raises(ValueError, match="task_index"):
        LookupEnv().reset(options={"task_index": index})


def test_tool_results_are_clipped_within_the_limit():
    for limit, expected in [(5, "The c"), (31, "The capital of France is Paris.")]:
        env = LookupEnv(max_result_length=limit)
        env.reset(seed=0, options={"task_index": 0})
        assert env.step(env.oracle_action())[4]["tool_calls"][0]["content"] == expected
    env = LookupEnv(max_result_length=28)
    env.reset(seed=0, options={"task_index": 0})
    content = env.step(env.oracle_action())[4]["tool_calls"][0]["content"]
    assert content == "The  [... 27 characters cut]" and len(content) == 28  # 4 of 31 characters kept


def test_feedback_names_every_refused_range():
    text = ParsedAction("x", errors=("e",), calls_written=7)
    assert "No tool was run." in LookupEnv._format_feedback(text)
    call = ToolCallParser().format_call("lookup", {"country": "Peru"})
    calls = ToolCallParser().parse("<tool_call>{oops</tool_call>" + call * 2 + "<tool_call>[]</tool_call>" + call * 3)
    assert "Ran tool call(s) 2-3 of 7 (lookup, lookup); refused 1, 4-7." in LookupEnv._format_feedback(calls)


def _make_roomy():
    return LookupEnv(max_action_length=300_000, max_observation_length=400_000)


def test_one_hostile_action_does_not_break_an_async_vector_env():
    envs = AsyncVectorEnv([_make_roomy, _make_roomy])
    try:
        envs.reset(seed=0, options={"task_index": 3})
        call = ToolCallParser().format_call("lookup", {"country": "Peru"})
        for actions in [(DEEP_980, call), (HUGE_INT, DEEP_ARRAY), (DEEP_STRING, call), (call, call)]:
            obs, rewards, terminated, truncated, infos = envs.step(actions)
            assert len(obs) == 2 and not truncated.any()
        obs, rewards, terminated, *_ = envs.step(("<answer>Lima</answer>", "<answer>Lima</answer>"))
        assert terminated.all() and rewards.tolist() == pytest.approx([1.0, 1.0])
    finally:
        envs.close()

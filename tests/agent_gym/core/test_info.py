"""The typed infos: ``ResetInfo`` / ``StepInfo`` declare exactly the keys every registered env returns."""

import types
import typing

import gymnasium as gym
import pytest

import agent_gym
from agent_gym import OnNoAction, ResetInfo, StepInfo, StopReason, ToolCallInfo
from agent_gym.core.info import BaseInfo
from tests.conftest import LookupEnv

IDS = [env_id for env_id, _ in agent_gym.list_envs()]


def declared(td: type) -> set[str]:
    return set(td.__required_keys__) | set(td.__optional_keys__)


def assert_typed_as(info: dict, td: type) -> None:
    """Every required key present, no undeclared key, and each value of its declared (outer) type."""
    missing = sorted(set(td.__required_keys__) - set(info))
    extra = sorted(set(info) - declared(td))
    assert not missing and not extra, f"{td.__name__}: missing {missing}, undeclared {extra}"
    for key, hint in typing.get_type_hints(td).items():
        if key not in info:
            continue
        allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        outer = tuple(typing.get_origin(a) or a for a in allowed)
        outer = tuple(type(None) if a is None else (dict if typing.is_typeddict(a) else a) for a in outer)
        assert isinstance(info[key], outer), f"{td.__name__}[{key!r}] = {info[key]!r} is not a {hint}"


def play(env: gym.Env, actions: list[str | None], seed: int = 0) -> tuple[dict, list[tuple[bool, bool, dict]]]:
    """Reset, then step each action (``None``: the oracle's) until the episode ends."""
    _, reset_info = env.reset(seed=seed)
    steps = []
    for action in actions:
        _, _, terminated, truncated, info = env.step(action if action is not None else env.unwrapped.oracle_action())
        steps.append((terminated, truncated, info))
        if terminated or truncated:
            break
    return reset_info, steps


@pytest.mark.parametrize("env_id", IDS)
def test_reset_and_step_infos_have_exactly_the_declared_keys(env_id):
    reset_info, steps = play(gym.make(env_id), ["junk", *[None] * 12])
    assert_typed_as(reset_info, ResetInfo)
    assert steps[-1][0], "the oracle should finish within the turn limit"
    for terminated, _, info in steps:
        assert_typed_as(info, StepInfo)
        assert ("metrics" in info) == terminated, "metrics come exactly with the step that ends the episode"
        for call in info["tool_calls"]:
            assert_typed_as(call, ToolCallInfo)
    assert steps[0][2]["format_errors"], "the junk action is malformed"
    assert steps[-1][2]["stop_reason"] is StopReason.ANSWER


@pytest.mark.parametrize("env_id", IDS)
def test_a_truncated_episode_names_max_turns_and_carries_no_metrics(env_id):
    _, steps = play(gym.make(env_id, max_episode_steps=1), ["no tool, no answer"])
    terminated, truncated, info = steps[-1]
    assert truncated and not terminated
    assert_typed_as(info, StepInfo)
    assert info["stop_reason"] is StopReason.MAX_TURNS and "metrics" not in info


def test_on_no_action_end_gives_a_typed_info_and_the_no_action_reason():
    env = LookupEnv(on_no_action="end")
    env.reset(seed=0, options={"task_index": 1})
    *_, info = env.step("just text")
    assert_typed_as(info, StepInfo)
    assert info["stop_reason"] is StopReason.NO_ACTION and "metrics" in info


@pytest.mark.parametrize(
    ("env_id", "attribute"),
    [("AgentR1/HotpotQA-v0", "type"), ("AgentR1/SQLite-v0", "kind"), ("AgentR1/Calculator-v0", "template")],
)
def test_the_reset_info_names_the_task_type_from_the_task_s_own_attribute(env_id, attribute):
    env = gym.make(env_id)
    kinds = set()
    for index in range(6):
        _, info = env.reset(seed=0, options={"task_index": index})
        assert info["task_type"] == getattr(env.unwrapped.load_task(index), attribute)
        kinds.add(info["task_type"])
    assert len(kinds) > 1 and None not in kinds


def test_an_env_without_types_says_none_and_an_override_is_used():
    class Typed(LookupEnv):
        def task_type(self, task):
            return f"capital of {len(task.id)}"

    assert LookupEnv().reset(seed=0)[1]["task_type"] is None
    _, info = Typed().reset(seed=0, options={"task_index": 0})
    assert info["task_type"].startswith("capital of ")


def test_the_three_infos_share_their_common_keys():
    assert set(BaseInfo.__required_keys__) < set(ResetInfo.__required_keys__)
    assert set(BaseInfo.__required_keys__) < set(StepInfo.__required_keys__)
    assert declared(ResetInfo) - declared(BaseInfo) == {"tools", "task_type"}
    assert StepInfo.__optional_keys__ == frozenset({"metrics"})


def test_the_checker_finds_a_dropped_or_an_undeclared_key():
    _, info = LookupEnv().reset(seed=0)
    assert_typed_as(info, ResetInfo)
    with pytest.raises(AssertionError, match=r"missing \['evidence_total'\]"):
        assert_typed_as({k: v for k, v in info.items() if k != "evidence_total"}, ResetInfo)
    with pytest.raises(AssertionError, match=r"undeclared \['evidence_count'\]"):
        assert_typed_as({**info, "evidence_count": 0}, ResetInfo)
    with pytest.raises(AssertionError, match="is not a"):
        assert_typed_as({**info, "turn": "0"}, ResetInfo)


def test_stop_reason_is_one_str_enum():
    assert issubclass(StopReason, str) and StopReason("max_turns") is StopReason.MAX_TURNS
    assert [str(r) for r in StopReason] == [
        "answer",
        "no_action",
        "max_turns",
        "token_budget",
        "tool_timeout",
        "env_error",
    ]
    from agent_gym.core.env import StopReason as from_env

    assert from_env is StopReason


@pytest.mark.parametrize("value", ["end", OnNoAction.END, "feedback", OnNoAction.FEEDBACK])
def test_on_no_action_is_an_enum_that_accepts_its_strings(value):
    env = LookupEnv(on_no_action=value)
    assert env.on_no_action is OnNoAction(value) and env.on_no_action == str(value)


@pytest.mark.parametrize("value", ["stop", "END", None, 1])
def test_an_unknown_on_no_action_is_refused_as_before(value):
    with pytest.raises(ValueError, match="on_no_action must be 'feedback' or 'end'"):
        LookupEnv(on_no_action=value)

"""``agent_gym.register_env``: a user id gets the built-ins' turn limit and RecordStopReason, and the kit's checks.

An id registered with plain ``gymnasium.register`` lacks RecordStopReason: after truncation its
``stop_reason`` is None and ``step()`` goes on, and the kit fails on it (it used to skip the check silently).
"""

import gymnasium as gym
import pytest

import agent_gym
from agent_gym import register_env
from agent_gym.core.env import EpisodeOverError
from agent_gym.envs import REGISTRY
from agent_gym.registration import STOP_REASON_WRAPPER
from agent_gym.testing import check_text_env
from agent_gym.wrappers import RecordStopReason
from tests.conftest import LookupEnv

HELPER_ID, PLAIN_ID = "Test/HelperLookup-v0", "Test/PlainLookup-v0"
register_env(HELPER_ID, LookupEnv, max_episode_steps=2)
if PLAIN_ID not in gym.registry:
    gym.register(PLAIN_ID, entry_point=LookupEnv, max_episode_steps=2)  # by hand, without the helper


def _wrappers(env):
    names = []
    while isinstance(env, gym.Wrapper):
        names.append(type(env).__name__)
        env = env.env
    return names


def _truncate(env):
    env.reset(seed=0)
    env.step("plain text")
    return env.step("more plain text")


def test_a_helper_registered_id_has_the_stop_reason_wrapper_outside_its_time_limit():
    env = gym.make(HELPER_ID)
    assert isinstance(env, RecordStopReason) and gym.spec(HELPER_ID).additional_wrappers == (STOP_REASON_WRAPPER,)
    names = _wrappers(env)
    assert names.index("RecordStopReason") < names.index("TimeLimit")  # outside: it sees the truncation
    *_, terminated, truncated, info = _truncate(env)
    assert truncated and not terminated and info["stop_reason"] == "max_turns"
    with pytest.raises(EpisodeOverError, match=r"truncated \(max_turns\)"):
        env.step("<answer>Paris</answer>")
    check_text_env(gym.make(HELPER_ID))


def test_the_built_ins_go_through_the_same_helper():
    for entry in REGISTRY:
        spec = gym.spec(entry.id)
        assert spec.additional_wrappers == (STOP_REASON_WRAPPER,) and spec.max_episode_steps == entry.max_episode_steps
        assert _wrappers(gym.make(entry.id))[0] == "RecordStopReason"


def test_a_plain_registered_id_lacks_it_and_the_kit_says_so():
    env = gym.make(PLAIN_ID)
    assert "RecordStopReason" not in _wrappers(env)
    *_, truncated, info = _truncate(env)
    assert truncated and info["stop_reason"] is None
    env.step("and it goes on")  # no EpisodeOverError: the trap
    with pytest.raises(AssertionError) as caught:
        check_text_env(gym.make(PLAIN_ID))
    assert str(caught.value).startswith("a truncated step must name its info['stop_reason'] (e.g. 'max_turns'): ")
    assert "agent_gym.register_env" in str(caught.value)


@pytest.mark.parametrize("bad", ["Lookup", "Test/Lookup", "Lookup-v0", "Test/Look up-v0", "mod:Test/Lookup-v0"])
def test_an_id_must_be_namespace_name_version(bad):
    with pytest.raises(ValueError) as caught:
        register_env(bad, LookupEnv)
    assert str(caught.value) == (
        f"register_env: the id must look like 'Namespace/Name-vN' (got {bad!r}); "
        "bump -vN when observations, tools or rewards change"
    )
    assert bad not in gym.registry


@pytest.mark.parametrize("steps", [0, -1, 2.5, True, None])
def test_the_turn_limit_must_be_a_positive_int(steps):
    with pytest.raises(ValueError, match=r"^register_env: max_episode_steps must be a positive int \(got "):
        register_env("Test/NoLimit-v0", LookupEnv, max_episode_steps=steps)


def test_registering_again_replaces_the_same_env_and_refuses_another():
    register_env("Test/Again-v0", LookupEnv, max_episode_steps=2)
    register_env("Test/Again-v0", LookupEnv, kwargs={"max_result_length": 50}, max_episode_steps=5)  # a re-import
    assert gym.spec("Test/Again-v0").max_episode_steps == 5 and gym.spec("Test/Again-v0").kwargs == {
        "max_result_length": 50
    }
    with pytest.raises(ValueError) as caught:
        register_env("AgentR1/Bandit-v0", LookupEnv)
    assert str(caught.value) == (
        "register_env: 'AgentR1/Bandit-v0' is already registered with entry point "
        f"'agent_gym.envs.bandit:BanditEnv' (not '{LookupEnv.__module__}:LookupEnv'); choose another id"
    )
    assert gym.spec("AgentR1/Bandit-v0").entry_point == "agent_gym.envs.bandit:BanditEnv"


def test_the_helper_is_exported_at_the_top():
    assert agent_gym.register_env is register_env and "register_env" in agent_gym.__all__

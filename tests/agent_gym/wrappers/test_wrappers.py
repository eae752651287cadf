"""RecordStopReason: names the stop condition, rebuilds from its spec, and ends episodes (terminated or truncated)."""

import gymnasium as gym
import pytest
from gymnasium.utils import RecordConstructorArgs

import agent_gym  # noqa: F401  (registers the ids)
from agent_gym.core.env import EpisodeOverError
from agent_gym.envs import _STOP_REASON
from agent_gym.wrappers import RecordStopReason
from tests.conftest import LookupEnv

ID = "Test/WrappedLookup-v0"
if ID not in gym.registry:
    gym.register(ID, entry_point=LookupEnv, max_episode_steps=3, additional_wrappers=(_STOP_REASON,))


def test_records_constructor_args_so_the_spec_rebuilds_the_stack():
    env = gym.make(ID)
    assert isinstance(env, RecordStopReason) and isinstance(env, RecordConstructorArgs)
    again = gym.make(env.spec)
    assert type(again) is type(env) and again.spec == env.spec
    assert [type(w).__name__ for w in _stack(again)] == [type(w).__name__ for w in _stack(env)]


def _stack(env):
    out = []
    while isinstance(env, gym.Wrapper):
        out.append(env)
        env = env.env
    return [*out, env]


def test_step_after_truncation_raises_until_reset():
    env = gym.make(ID)
    env.reset(seed=0)
    for _ in range(3):
        _, _, terminated, truncated, info = env.step("junk")
    assert truncated and not terminated and info["stop_reason"] == "max_turns"
    with pytest.raises(EpisodeOverError, match=r"truncated \(max_turns\); call reset\(\)"):
        env.step("junk")
    env.reset(seed=0)
    assert not env.step("junk")[3]


def test_step_after_termination_raises_until_reset():
    env = gym.make(ID)
    env.reset(seed=0, options={"task_index": 0})
    _, _, terminated, _, info = env.step("<answer>Paris</answer>")
    assert terminated and info["stop_reason"] == "answer"
    with pytest.raises(EpisodeOverError, match=r"terminated \(answer\)"):
        env.step("<answer>Paris</answer>")
    with pytest.raises(EpisodeOverError, match="terminated"):  # the bare env keeps the same rule
        env.unwrapped.step("<answer>Paris</answer>")
    env.reset(seed=0)
    assert env.step("junk")[4]["turn"] == 1


def test_a_stop_reason_set_by_the_env_is_kept():
    env = gym.make(ID, max_episode_steps=1)
    env.reset(seed=0, options={"task_index": 0})
    _, _, terminated, truncated, info = env.step("<answer>Paris</answer>")  # both at once: the answer is the reason
    assert terminated and truncated and info["stop_reason"] == "answer"


@pytest.mark.parametrize("env_id", sorted(i for i in gym.registry if i.startswith("AgentR1/")))
def test_a_failed_first_reset_leaves_no_episode_and_the_next_reset_works(env_id):
    """After reset(task_index=-1) every later step raised TypeError in Gymnasium's passive checker (issue 25.9)."""
    env = gym.make(env_id)
    with pytest.raises(ValueError, match="task_index"):
        env.reset(options={"task_index": -1})
    with pytest.raises(EpisodeOverError, match="not started \\(the last reset failed\\)"):
        env.step("<answer>1</answer>")
    env.reset(seed=0, options={"task_index": 0})
    obs, reward, terminated, truncated, info = env.step("<answer>1</answer>")
    assert terminated and not truncated and info["stop_reason"] == "answer"
    with pytest.raises(ValueError, match="task_index"):  # a failed reset mid-run: the old episode is not stepped
        env.reset(options={"task_index": 10**9})
    with pytest.raises(EpisodeOverError, match="not started"):
        env.step("<answer>1</answer>")

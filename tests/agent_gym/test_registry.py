"""Every registered id passes the conformance kit; the registry table is consistent."""

import subprocess
import sys

import gymnasium as gym
import pytest

import agent_gym
from agent_gym.envs import REGISTRY
from agent_gym.testing import check_text_env

IDS = [env_id for env_id, _ in agent_gym.list_envs()]


def test_registry_lists_every_row_with_a_description():
    assert len(IDS) == len(set(IDS)) >= 5
    assert {"AgentR1/HotpotQA-v0", "AgentR1/2WikiMultihopQA-v0", "AgentR1/MuSiQue-v0"} <= set(IDS)
    for entry in REGISTRY:
        assert entry.id in gym.registry
        assert entry.description and len(entry.description) < 120
        assert gym.registry[entry.id].max_episode_steps == entry.max_episode_steps


CONTEXTS = [{}, {"context": "window", "context_turns": 1}, {"context": "window", "context_turns": 2}]
CONTEXTS += [{"context": "fold", "context_turns": 1}]


@pytest.mark.parametrize("context", CONTEXTS, ids=lambda c: "-".join(map(str, c.values())) or "append")
@pytest.mark.parametrize("env_id", IDS)
def test_check_text_env_every_registered_id(env_id, context):
    env = gym.make(env_id, **context)
    check_text_env(env)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and info["messages"][0]["role"] == "system"


@pytest.mark.parametrize("env_id", IDS)
def test_turn_limit_truncates_with_stop_reason(env_id):
    env = gym.make(env_id, max_episode_steps=2)
    env.reset(seed=0)
    env.step("not an action")
    _, _, terminated, truncated, info = env.step("still not an action")
    assert truncated and not terminated and info["stop_reason"] == "max_turns"


def test_misspelled_id_suggests_the_right_one():
    with pytest.raises(gym.error.Error, match="HotpotQA"):
        gym.make("AgentR1/HotPotQA-v0")


def test_module_prefixed_id_works_in_a_fresh_process():
    code = (
        "import gymnasium as gym, sys; env = gym.make('agent_gym:AgentR1/Calculator-v0'); "
        "print(env.reset(seed=0)[0][:20]); "
        "print(any(m in sys.modules for m in ('torch', 'transformers', 'trl')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "False"

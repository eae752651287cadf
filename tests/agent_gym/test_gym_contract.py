"""Issue 10 point 7 for every registered id: Gymnasium's checker, gym.make(spec), pickling and deep copies."""

import copy
import pickle
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence

import agent_gym
from agent_gym.testing import check_copies

IDS = [env_id for env_id, _ in agent_gym.list_envs()]


@pytest.mark.parametrize("env_id", IDS)
def test_gymnasium_check_env_passes_on_gym_make(env_id):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # check_env warns that the env is wrapped, which is the point here
        check_env(gym.make(env_id))


@pytest.mark.parametrize("env_id", IDS)
def test_gym_make_of_the_spec_rebuilds_an_equal_env(env_id):
    env = gym.make(env_id, max_episode_steps=3)
    again = gym.make(env.spec)
    assert again.spec == env.spec and again.spec.max_episode_steps == 3
    assert data_equivalence(again.reset(seed=5), env.reset(seed=5))


@pytest.mark.parametrize("env_id", IDS)
def test_pickle_and_deepcopy_before_reset(env_id):
    env = gym.make(env_id)
    for clone in (copy.deepcopy(env), pickle.loads(pickle.dumps(env))):
        assert data_equivalence(clone.reset(seed=2), env.reset(seed=2))


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("tool_noise", [None, {"failure_prob": 0.3, "retrieval": {"drop_prob": 0.3}}])
def test_copies_mid_episode_continue_like_the_original(env_id, tool_noise):
    check_copies(gym.make(env_id, tool_noise=tool_noise), seed=4)


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("limit", [1, 17, 60])
def test_small_observation_limits_hold_for_every_id(env_id, limit):
    env = gym.make(env_id, max_observation_length=limit)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    for action in ["junk", None, None]:
        obs, _, terminated, truncated, _ = env.step(action or env.unwrapped.oracle_action())
        assert len(obs) <= limit and env.observation_space.contains(obs)
        if terminated or truncated:
            break


@pytest.mark.parametrize("env_id", IDS)
def test_vector_envs_reset_ended_episodes_themselves(env_id):
    """README: the end-of-episode rule never bites vector envs (they reset an ended episode on the next step)."""
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id, max_episode_steps=2)] * 2)
    envs.reset(seed=0)
    ends = 0
    for _ in range(7):  # truncated at steps 2, 5: each next step resets instead of raising EpisodeOverError
        _, _, terminated, truncated, _ = envs.step(["thinking"] * 2)
        ends += int((terminated | truncated).sum())
    assert ends == 2 * 2
    envs.close()

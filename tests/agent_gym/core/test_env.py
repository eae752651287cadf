import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_gym.core.env import EpisodeOverError
from agent_gym.core.rubric import RewardError, RewardTerm, Rubric
from agent_gym.testing import check_text_env, random_episode_actions, run_episode
from agent_gym.testing.strategies import actions
from tests.conftest import LookupEnv


def test_oracle_episode(lookup_env):
    obs, info = lookup_env.reset(seed=0, options={"task_index": 1})
    assert "capital of Japan" in obs and info["turn"] == 0
    obs, r1, term, trunc, info = lookup_env.step(lookup_env.oracle_action())
    assert not term and info["new_evidence"] == ["q1"] and "Tokyo" in obs
    assert info["tool_calls"][0]["name"] == "lookup" and info["tool_calls"][0]["ok"]
    obs, r2, term, trunc, info = lookup_env.step(lookup_env.oracle_action())
    assert term and not trunc
    assert info["stop_reason"] == "answer"
    assert info["metrics"]["answer_em"] == 1.0 and info["metrics"]["evidence_recall"] == 1.0
    assert [m["role"] for m in info["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    with pytest.raises(EpisodeOverError):
        lookup_env.step("<answer>x</answer>")


def test_step_before_reset_raises(lookup_env):
    with pytest.raises(EpisodeOverError, match="reset"):
        lookup_env.step("<answer>x</answer>")


def test_malformed_action_gets_penalty_and_error_observation(lookup_env):
    lookup_env.reset(seed=0)
    obs, reward, term, trunc, info = lookup_env.step("<tool_call>{broken")
    assert not term and info["reward_terms"]["format"] < 0
    assert info["format_errors"] and "Format error" in info["new_messages"][-1]["content"]


def test_unknown_tool_is_an_error_result(lookup_env):
    lookup_env.reset(seed=0)
    _, _, _, _, info = lookup_env.step(lookup_env.parser.format_call("fly", {}))
    assert not info["tool_calls"][0]["ok"] and "unknown tool" in info["tool_calls"][0]["content"]


def test_huge_action_is_refused_not_crashing():
    env = LookupEnv(max_action_length=100)
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step("<answer>" + "x" * 10_000 + "</answer>")
    assert not term and "limit" in info["format_errors"][0]
    assert env.observation_space.contains(obs)


def test_observation_is_elided_to_fit_the_space():
    env = LookupEnv(max_observation_length=2000)
    env.reset(seed=0)
    for _ in range(30):
        obs, *_ = env.step("y" * 500)
    assert env.observation_space.contains(obs) and "elided" in obs


def test_task_selection_options(lookup_env):
    assert "Peru" in lookup_env.reset(options={"task_id": "q3"})[0]
    with pytest.raises(ValueError, match="task_index"):
        lookup_env.reset(options={"task_index": 99})
    with pytest.raises(KeyError):
        lookup_env.reset(options={"task_id": "nope"})


def test_check_text_env_passes_on_a_correct_env(lookup_env):
    check_text_env(lookup_env)


def test_check_text_env_reports_a_broken_reward_as_an_assertion():
    env = LookupEnv(rubric=Rubric([RewardTerm("bad", lambda t: float("nan"))]))
    with pytest.raises(AssertionError, match=r"broke its contract .* 'bad' returned nan, not a finite number"):
        check_text_env(env, skip_gymnasium_checker=True)


def test_reward_out_of_bounds_fails_loudly():
    env = LookupEnv(rubric=Rubric([RewardTerm("bad", lambda t: 5.0, bounds=(0, 1))]))
    env.reset(seed=0)
    with pytest.raises(RewardError, match="outside"):
        env.step("x")


@given(st.lists(actions(tool_names=["lookup"]), min_size=1, max_size=5), st.integers(0, 2**16))
def test_any_actions_never_crash_and_keep_invariants(action_list, seed):
    env = LookupEnv(max_action_length=2000, max_observation_length=50_000)
    obs, _ = env.reset(seed=seed)
    for action in action_list:
        obs, reward, term, trunc, info = env.step(action)
        assert env.observation_space.contains(obs)
        low, high = env.reward_range
        assert math.isfinite(reward) and low - 1e-9 <= reward <= high + 1e-9
        assert math.isclose(sum(info["reward_terms"].values()), reward, abs_tol=1e-12)
        if term:
            break


@given(st.integers(0, 2**16), st.floats(0.0, 1.0))
def test_same_seed_same_trajectory_with_noise(seed, p):
    def play():
        env = LookupEnv(tool_noise={"failure_prob": p * 0.5, "timeout_prob": p * 0.2, "truncate_prob": p})
        env.reset(seed=seed)
        env.action_space.seed(seed)
        return run_episode(env, random_episode_actions(env, np.random.default_rng(seed)), seed=seed)

    from gymnasium.utils.env_checker import data_equivalence

    assert data_equivalence(play(), play())


def test_different_seeds_give_different_noise():
    outcomes = set()
    for seed in range(30):
        env = LookupEnv(tool_noise={"failure_prob": 0.5})
        env.reset(seed=seed, options={"task_index": 0})
        _, _, _, _, info = env.step(env.oracle_action())
        outcomes.add(info["tool_calls"][0]["ok"])
    assert outcomes == {True, False}


@given(st.integers(0, 2**16))
def test_shaping_telescopes(seed):
    env = LookupEnv(tool_noise={"failure_prob": 0.4})
    env.reset(seed=seed)
    total, phi0 = 0.0, env.state.potential
    rng = np.random.default_rng(seed)
    for _ in range(6):
        action = env.oracle_action() if rng.random() < 0.7 else "junk"
        _, _, term, _, info = env.step(action)
        total += info["reward_raw"]["shaping"]
        if term:
            break
    assert math.isclose(total, env.state.potential - phi0, abs_tol=1e-9)


def _make_lookup(**kwargs):
    import gymnasium as gym

    from agent_gym.envs import _STOP_REASON

    if "Test/Lookup-v0" not in gym.registry:
        gym.register("Test/Lookup-v0", entry_point=LookupEnv, max_episode_steps=6, additional_wrappers=(_STOP_REASON,))
    return gym.make("Test/Lookup-v0", **kwargs)


def _oracle_episode(env, seed):
    *_, term, trunc, info = run_episode(env, env.unwrapped.oracle_action, seed=seed, max_steps=50)[-1]
    assert term or trunc, "episode did not end within 50 steps"
    return term, trunc, info


def test_oracle_retries_through_transient_failures():
    env = _make_lookup(tool_noise={"failure_prob": 0.3})
    outcomes = [_oracle_episode(env, seed) for seed in range(200)]
    finished = [o for o in outcomes if o[0]]
    assert len(finished) >= 190  # P(5 failures in a row) = 0.3**5 per episode
    assert all(info["metrics"]["answer_em"] == 1.0 for _, _, info in finished)


def test_certain_failure_ends_by_truncation():
    env = _make_lookup(tool_noise={"failure_prob": 1.0})
    for seed in range(5):
        term, trunc, info = _oracle_episode(env, seed)
        assert trunc and not term and info["stop_reason"] == "max_turns"
        assert all(not c["ok"] for c in info["tool_calls"])


def test_group_consistent_resets():
    a, b, c = (LookupEnv(tool_noise={"failure_prob": 0.5}) for _ in range(3))
    obs_a, _ = a.reset(seed=7, options={"task_index": 2})
    obs_b, _ = b.reset(seed=7, options={"task_index": 2})
    obs_c, _ = c.reset(seed=8, options={"task_index": 2})
    assert obs_a == obs_b == obs_c
    runs = [[env.step(env.oracle_action())[4]["tool_calls"][0]["ok"] for _ in range(1)] for env in (a, b)]
    assert runs[0] == runs[1]

"""Every registered env, every preset: ``reward_range`` is the hand-derived exact range, and its ends are reached.

Through ``gym.make`` (the env as users get it). The process preset's low end is a malformed action that
repeats a call once all evidence is found (plus, for SQLite, a failing query: ``valid_query`` -1); its high
end a correct answer given at once (Φ = 0, so shaping adds nothing). The outcome preset's -1 is only
approached: T - 1 malformed actions, then a correct answer, earn 1/T - 1.
"""

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401  (registers the ids)
from agent_gym.envs import REGISTRY

# TextWorld-v0's episodes end on the winning command, not on an answer given at once (which gives up): its
# presets' ranges and both their ends are checked in tests/agent_gym/envs/test_textworld.py.
ENV_IDS = [e.id for e in REGISTRY if e.id != "AgentR1/TextWorld-v0"]
BROKEN = "<tool_call>{oops</tool_call>"
NO_EVIDENCE = {"AgentR1/Bandit-v0"}  # tasks without gold evidence: nothing to shape
FAILING_SQL = '<tool_call>{"name": "sql", "arguments": {"query": "SELECT nope FROM nowhere"}}</tool_call>'


def _process_low(env_id: str, gamma: float | None) -> float:
    low = -0.1 - 0.05 - 0.01  # format, repeat, step_cost
    if env_id == "AgentR1/SQLite-v0":
        low -= 0.02  # valid_query: a query failed
    return low + (0.2 * (gamma - 1) if gamma is not None else 0.0)  # shaping γΦ' - Φ at Φ = Φ' = 1


def _oracle_answer(env: gym.Env, task_index: int) -> str:
    """The oracle's final (correct) action for a task, found by playing its episode."""
    env.reset(seed=0, options={"task_index": task_index})
    while True:
        action = env.unwrapped.oracle_action()
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            assert terminated and info["metrics"]["answer_em"] == 1.0
            return action


def _lowest_step(env: gym.Env, env_id: str, task_index: int) -> float:
    """Find every gold evidence item with the oracle's calls, then the worst step: malformed + a repeated call."""
    env.reset(seed=0, options={"task_index": task_index})
    call = None
    if not env.unwrapped.state.evidence:  # nothing to find (Bandit): one tool call to repeat
        call = env.unwrapped.oracle_action()
        env.step(call)
    while env.unwrapped.state.potential < 1.0 and env.unwrapped.state.evidence:
        call = env.unwrapped.oracle_action()
        env.step(call)
    if env_id == "AgentR1/SQLite-v0":
        env.step(FAILING_SQL)
        call = FAILING_SQL  # repeated, failing, and malformed below
    assert call is not None
    _, reward, terminated, *_ = env.step(call + BROKEN)
    assert not terminated
    return reward


@pytest.mark.parametrize("gamma", [None, 1.0, 0.9, 0.5])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_process_preset_range_is_exact_and_reached(env_id, gamma):
    if env_id in NO_EVIDENCE and gamma is not None:
        with pytest.raises(ValueError, match="no gold evidence"):
            gym.make(env_id, reward="process", shaping_gamma=gamma)
        return
    env = gym.make(env_id, reward="process", shaping_gamma=gamma, max_episode_steps=30)
    low = _process_low(env_id, gamma)
    assert env.unwrapped.reward_range == pytest.approx((low, 1.0))
    assert _lowest_step(env, env_id, task_index=1) == pytest.approx(low)
    answer = _oracle_answer(env, task_index=1)
    env.reset(seed=0, options={"task_index": 1})
    _, reward, terminated, _, _ = env.step(answer)
    assert terminated and reward == pytest.approx(1.0)


@pytest.mark.parametrize("gamma", [None, 0.5])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_outcome_preset_range_is_exact_and_its_low_end_approached(env_id, gamma):
    if env_id in NO_EVIDENCE and gamma is not None:
        with pytest.raises(ValueError, match="no gold evidence"):
            gym.make(env_id, reward="outcome", shaping_gamma=gamma)
        return
    env = gym.make(env_id, reward="outcome", shaping_gamma=gamma, max_episode_steps=30)
    shaping_low = 0.2 * (gamma - 1) if gamma is not None else 0.0
    assert env.unwrapped.reward_range == pytest.approx((-1.0 + shaping_low, 1.0))
    answer = _oracle_answer(env, task_index=2)
    env.reset(seed=0, options={"task_index": 2})
    assert env.step(answer)[1] == pytest.approx(1.0)  # the high end: right at once
    env.reset(seed=0, options={"task_index": 2})
    rewards = [env.step("junk")[1] for _ in range(7)]
    _, last, terminated, _, info = env.step(answer)
    assert rewards == [0.0] * 7  # nothing before the end
    assert terminated and info["reward_raw"]["outcome"] == pytest.approx(1 / 8 - 1)  # 1 of 8 actions well formed


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gated_preset_range_is_exact_and_reached(env_id):
    """Gated: the low end is the process preset's; the high end a correct answer after all evidence (1 + 0.2)."""
    env = gym.make(env_id, reward="gated", max_episode_steps=30)
    low = _process_low(env_id, None)
    assert env.unwrapped.reward_range == pytest.approx((low, 1.2))
    assert _lowest_step(env, env_id, task_index=1) == pytest.approx(low)
    env.reset(seed=0, options={"task_index": 1})
    while True:  # the oracle finds every item, then answers: the answer step pays 1 + 0.2 * 1 (0.2 * 0 for Bandit)
        _, reward, terminated, truncated, _ = env.step(env.unwrapped.oracle_action())
        if terminated or truncated:
            break
    assert terminated and reward == pytest.approx(1.0 if env_id in NO_EVIDENCE else 1.2)

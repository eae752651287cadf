"""The QA envs take ``rubric=`` and ``reward_weights=`` like SQLite and Calculator, and the reward follows them.

They used to refuse both: ``rubric=`` with "got multiple values for keyword argument 'rubric'" and
``reward_weights=`` as an unexpected keyword. Each case plays the oracle's episode on train task 0 (seed 0)
and states the step rewards by hand.
"""

import gymnasium as gym
import pytest

import agent_gym  # registers the ids; its rewards module is used below
from agent_gym.rewards import RewardTerm, Rubric, Transition, answer_score

QA_IDS = ["AgentR1/HotpotQA-v0", "AgentR1/2WikiMultihopQA-v0", "AgentR1/MuSiQue-v0"]
ANSWER_ONLY = Rubric([RewardTerm("answer", answer_score, bounds=(0.0, 1.0), nonfinal_bounds=(0.0, 0.0))])


def oracle_rewards(env_id, **kwargs):
    env = gym.make(env_id, split="train", **kwargs)
    env.reset(seed=0, options={"task_index": 0})
    rewards, terminated, truncated = [], False, False
    while not (terminated or truncated):
        _, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        rewards.append(round(reward, 6))
    assert terminated and info["metrics"]["answer_f1"] == 1.0 and info["evidence_total"] == 2
    return rewards


# Task 0 of each train split has 2 gold paragraphs; the oracle finds HotpotQA's and MuSiQue's one search
# at a time and 2Wiki's both with its first search, then answers right (F1 1).
DEFAULT = {  # gated: -0.01 step cost a search; the answer 1.0 plus 0.2 x the evidence fraction found (all of it)
    "AgentR1/HotpotQA-v0": [-0.01, -0.01, 1.0 + 0.2],
    "AgentR1/2WikiMultihopQA-v0": [-0.01, 1.0 + 0.2],
    "AgentR1/MuSiQue-v0": [-0.01, -0.01, 1.0 + 0.2],
}
HEAVY_EVIDENCE = {  # reward_weights={"evidence": 1.0, "step_cost": 0.0}: no cost, 1.0 x the fraction on the answer
    "AgentR1/HotpotQA-v0": [0.0, 0.0, 2.0],
    "AgentR1/2WikiMultihopQA-v0": [0.0, 2.0],
    "AgentR1/MuSiQue-v0": [0.0, 0.0, 2.0],
}


@pytest.mark.parametrize("env_id", QA_IDS)
def test_reward_weights_reweigh_the_preset(env_id):
    assert oracle_rewards(env_id) == [round(r, 6) for r in DEFAULT[env_id]]
    assert oracle_rewards(env_id, reward_weights={"evidence": 1.0, "step_cost": 0.0}) == HEAVY_EVIDENCE[env_id]


@pytest.mark.parametrize("env_id", QA_IDS)
def test_a_rubric_of_ones_own_replaces_the_preset_and_takes_weights_too(env_id):
    searches = len(DEFAULT[env_id]) - 1
    assert oracle_rewards(env_id, rubric=ANSWER_ONLY) == [0.0] * searches + [1.0]  # only the answer pays
    assert oracle_rewards(env_id, rubric=ANSWER_ONLY, reward_weights={"answer": 2.0}) == [0.0] * searches + [2.0]
    env = gym.make(env_id, rubric=ANSWER_ONLY, reward_weights={"answer": 2.0})
    assert env.unwrapped.reward_range == (0.0, 2.0) and [t.name for t in env.unwrapped.rubric.terms] == ["answer"]


def searched(t: Transition) -> float:
    """1 for a step that ran a tool, else 0."""
    return 1.0 if t.results else 0.0


def test_a_custom_term_beside_the_preset_is_reported_and_summed():
    rubric = Rubric([*agent_gym.rewards.make_rubric("process").terms, RewardTerm("searched", searched, 0.5, (0, 1))])
    env = gym.make("AgentR1/HotpotQA-v0", split="train", rubric=rubric)
    env.reset(seed=0, options={"task_index": 0})
    _, reward, *_, info = env.step(env.unwrapped.oracle_action())
    assert info["reward_terms"]["searched"] == 0.5 and reward == pytest.approx(0.09 + 0.5)


@pytest.mark.parametrize("env_id", QA_IDS)
def test_an_unknown_weight_or_a_non_rubric_is_refused(env_id):
    with pytest.raises(KeyError, match=r"unknown reward terms \['evidnce'\]"):
        gym.make(env_id, reward_weights={"evidnce": 1.0})
    with pytest.raises(TypeError, match=r"^rubric must be a Rubric, got dict was raised from the environment creator"):
        gym.make(env_id, rubric={"answer": 1.0})


def test_the_tool_envs_now_apply_reward_weights_to_a_given_rubric_too():
    env = gym.make("AgentR1/Calculator-v0", rubric=ANSWER_ONLY, reward_weights={"answer": 0.5})
    assert [(t.name, t.weight) for t in env.unwrapped.rubric.terms] == [("answer", 0.5)]  # was silently 1.0
    env = gym.make("AgentR1/SQLite-v0", reward="outcome")
    assert [t.name for t in env.unwrapped.rubric.terms] == ["outcome"]  # no SQL process term under outcome
    assert [t.name for t in gym.make("AgentR1/SQLite-v0").unwrapped.rubric.terms][-1] == "valid_query"


def test_reward_term_is_importable_where_rewards_live():
    import agent_gym.rewards as rewards

    assert {"RewardTerm", "Rubric", "Transition", "env_rubric"} <= set(rewards.__all__)
    assert rewards.RewardTerm is agent_gym.RewardTerm and rewards.Rubric is agent_gym.Rubric

"""One ``StopReason`` for env and engine: the rollout layer uses agent_gym's enum itself."""

from __future__ import annotations

import agent_gym
import agent_trainers.rollout
from agent_trainers.policies import ScriptedPolicy
from agent_trainers.rollout import RolloutConfig, rollout
from agent_trainers.rollout import types as rollout_types
from tests.agent_trainers.conftest import LOOKUP_ID

CALL = '<tool_call>\n{"name": "lookup", "arguments": {"country": "France"}}\n</tool_call>'


def test_the_engine_and_the_env_share_one_stop_reason_enum():
    assert agent_trainers.rollout.StopReason is agent_gym.StopReason is rollout_types.StopReason


def test_every_trajectory_ending_is_a_stop_reason_value(smollm2_tokenizer):
    policies = {
        "answer": ["<answer>Paris</answer>"],
        "max_turns": [CALL] * 4,
        "token_budget": [CALL] * 10,
    }
    configs = {"token_budget": RolloutConfig(max_total_tokens=330, max_turns=10)}
    for expected, script in policies.items():
        policy = ScriptedPolicy(smollm2_tokenizer, script)
        (t,) = rollout(policy, LOOKUP_ID, task_indices=[0], config=configs.get(expected, RolloutConfig()))
        assert t.stop_reason == expected and agent_gym.StopReason(t.stop_reason) == expected
        assert type(t.stop_reason) is str, "trajectories keep a plain str (JSON export, user envs' own reasons)"

"""Trajectories -> tensors: process rewards on the last model token of their turn, masks, turn indices, returns."""

from __future__ import annotations

import pytest
import torch

from agent_trainers.algorithms.shared.batch import AgentBatch, discounted_returns
from agent_trainers.policies import ScriptedPolicy
from agent_trainers.rollout import Trajectory, TurnSpan, rollout
from tests.agent_trainers.conftest import LOOKUP_ID

CALL = '<tool_call>\n{"name": "lookup", "arguments": {"country": "France"}}\n</tool_call>'


def test_rewards_sit_on_the_last_model_token_of_each_turn(smollm2_tokenizer):
    script = [CALL, "not an action", "<answer>Paris</answer>"]
    (t,) = rollout(ScriptedPolicy(smollm2_tokenizer, script), LOOKUP_ID, task_indices=[0])
    assert len(t.turns) == 3 and len(set(t.turn_rewards)) == 3  # evidence, format penalty, answer
    b = AgentBatch.from_trajectories([t], group_size=1, width=len(t.completion_ids) + 3)
    nonzero = b.token_rewards[0].nonzero().flatten().tolist()
    assert nonzero == [turn.end - 1 for turn in t.turns]
    assert b.token_rewards[0, nonzero].tolist() == pytest.approx(t.turn_rewards)
    assert b.scores.tolist() == pytest.approx([t.total_reward])
    assert b.model_mask[0, : len(t.loss_mask)].tolist() == [bool(m) for m in t.loss_mask]
    assert not b.model_mask[0, len(t.loss_mask) :].any() and not b.valid[0, len(t.loss_mask) :].any()
    for k, turn in enumerate(t.turns):  # model and env tokens of a turn share its index
        assert b.turn_index[0, turn.start : turn.env_end].tolist() == [k] * (turn.env_end - turn.start)
    assert b.turn_index[0, len(t.completion_ids) :].tolist() == [-1] * 3
    assert b.turn_starts == [[turn.start for turn in t.turns]]
    # the observation each turn was taken from: the prompt, then the env's reply to the previous turn
    first, second, third = b.turn_states[0]
    assert first == tuple(t.prompt_ids) and "What is the capital of France?" in smollm2_tokenizer.decode(first)
    assert "The capital of France is Paris." in smollm2_tokenizer.decode(second)
    assert "Paris" not in smollm2_tokenizer.decode(third)  # the reply to "not an action"
    assert torch.allclose(b.behaviour_logprobs[0, : len(t.logprobs)], torch.tensor(t.logprobs))


def test_returns_discount_once_per_turn_boundary():
    r = torch.tensor([[0.0, 1.0, 0.0, 0.0, 4.0, 0.0]])
    turns = torch.tensor([[0, 0, 0, 1, 1, -1]])  # turn 0 has an env token (index 2), then padding
    # G4 = 4, G3 = 4, G2 = 0.5 * 4 = 2 (env token of turn 0), G1 = 1 + 2 = 3, G0 = 3
    assert discounted_returns(r, turns, gamma=0.5).tolist() == [[3.0, 3.0, 2.0, 4.0, 4.0, 0.0]]
    assert discounted_returns(r, turns, gamma=1.0).tolist() == [[5.0, 5.0, 4.0, 4.0, 4.0, 0.0]]


def test_bad_batches_are_refused():
    t = Trajectory("e", {}, 0, "t", 0, 0, completion_ids=[1, 2], loss_mask=[1, 1], logprobs=[0.0, 0.0])
    t.turns = [TurnSpan(0, 2, 2, 1.0)]
    with pytest.raises(ValueError, match="divisible by group_size"):
        AgentBatch.from_trajectories([t, t, t], group_size=2, width=4)
    with pytest.raises(ValueError, match="more than the batch width 1"):
        AgentBatch.from_trajectories([t], group_size=1, width=1)
    text_mode = Trajectory("e", {}, 0, "t", 0, 0, turns=[TurnSpan(0, 0, 0, 1.0)])
    with pytest.raises(ValueError, match="text mode cannot be trained on"):
        AgentBatch.from_trajectories([text_mode], group_size=1, width=4)


def test_edges_of_the_layout():
    t = Trajectory("e", {}, 0, "t", 0, 0, completion_ids=[1, 2], loss_mask=[1, 0], logprobs=[-0.5, 0.0])
    t.turns = [TurnSpan(0, 1, 2, 2.0)]
    b = AgentBatch.from_trajectories([t], group_size=1, width=2)  # exactly as wide as the longest completion
    assert b.token_rewards.tolist() == [[2.0, 0.0]] and b.turn_index.tolist() == [[0, 0]]
    assert b.model_mask.tolist() == [[True, False]] and b.valid.tolist() == [[True, True]]
    assert b.behaviour_logprobs.tolist() == [[-0.5, 0.0]] and b.shape == (1, 2)
    with pytest.raises(ValueError, match="divisible by group_size"):
        AgentBatch.from_trajectories([t], group_size=0, width=2)
    no_model_token = Trajectory("e", {}, 0, "t", 0, 0, completion_ids=[1], loss_mask=[0], logprobs=[0.0])
    no_model_token.turns = [TurnSpan(0, 0, 1, 0.5)]
    with pytest.raises(ValueError, match="trajectory 0: turn 0 has a reward but no model token"):
        AgentBatch.from_trajectories([no_model_token], group_size=1, width=1)
    no_model_token.turns = [TurnSpan(0, 0, 1, 0.0)]  # no reward: nothing to carry, fine
    assert AgentBatch.from_trajectories([no_model_token], group_size=1, width=1).token_rewards.tolist() == [[0.0]]
    # a turn without model tokens (and reward) before a normal one: the later turn is still laid out
    t = Trajectory("e", {}, 0, "t", 0, 0, completion_ids=[1, 2, 3], loss_mask=[0, 1, 0], logprobs=[0.0, -1.0, 0.0])
    t.turns = [TurnSpan(0, 0, 1, 0.0), TurnSpan(1, 2, 3, 0.7)]
    b = AgentBatch.from_trajectories([t], group_size=1, width=3)
    assert b.token_rewards.tolist() == [[0.0, pytest.approx(0.7), 0.0]] and b.turn_index.tolist() == [[0, 1, 1]]
    assert AgentBatch.from_trajectories([], group_size=2, width=0).shape == (0, 0)  # no trajectories: an empty batch
    empty = AgentBatch.from_trajectories([Trajectory("e", {}, 0, "t", 0, 0)] * 2, group_size=1, width=0)
    assert empty.shape == (2, 0) and discounted_returns(empty.token_rewards, empty.turn_index, 0.5).shape == (2, 0)

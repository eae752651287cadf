"""The engine under a context policy other than ``append``: each turn's prompt is the env's view, recorded as fed
(``Trajectory.step_prompts``), while the trajectory still records the whole history."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agent_gym.integrations.session import EnvSession
from agent_trainers.policies import tiny_random_model
from agent_trainers.policies.scripted import ScriptedPolicy
from agent_trainers.rollout import RolloutConfig, rollout
from agent_trainers.rollout.chat import ChatTokenizer

ORACLE = [
    "<calculator>5 * 11.49</calculator>",
    "<calculator>7 * 8.49</calculator>",
    "<calculator>57.45 + 59.43</calculator>",
    "<calculator>200 - 116.88</calculator>",
    "<answer>83.12</answer>",
]
"""Calculator-v0 task 0's oracle actions in the tags format (83.12 is its answer)."""


class Recorder:
    """A scripted policy that keeps every prompt it was fed."""

    def __init__(self, tok, texts):
        self.prompts: list[list[int]] = []
        queue = list(texts)

        def respond(ids):
            self.prompts.append(ids)
            return queue.pop(0) if queue else ""

        self.policy = ScriptedPolicy(tok, respond)


def _play(kwargs, budget=4096):
    _model, tok = tiny_random_model(seed=0)
    rec = Recorder(tok, ORACLE)
    cfg = RolloutConfig(max_new_tokens_per_turn=32, max_total_tokens=budget)
    (traj,) = rollout(rec.policy, "AgentR1/Calculator-v0", task_indices=[0], env_kwargs=kwargs, config=cfg)
    return traj, rec.prompts, tok


@pytest.mark.parametrize(
    "context", [{"context": "window", "context_turns": 1}, {"context": "fold", "context_turns": 1}]
)
def test_a_view_is_what_the_model_is_fed_and_what_the_trajectory_records(context):
    traj, fed, tok = _play({"action_format": "tags", **context})
    assert traj.stop_reason == "answer" and traj.metrics["answer_em"] == 1.0
    assert len(traj.step_prompts) == len(traj.turns) == len(fed) == 5
    assert traj.step_prompts == fed  # exactly the ids the policy got
    # each is the chat template of the env's view at that step, replayed on a fresh env
    env = gym.make("AgentR1/Calculator-v0", action_format="tags", **context)
    _obs, info = env.reset(seed=traj.seed, options={"task_index": 0})
    chat = ChatTokenizer(tok)
    for k, action in enumerate(ORACLE):
        assert traj.step_prompts[k] == chat.prompt_ids(info["messages"])
        _obs, _r, _term, _trunc, info = env.step(action)
    # from turn 2 on the view is shorter than the whole history, which the trajectory keeps
    assert len(traj.step_prompts[3]) < len(traj.prompt_ids) + traj.turns[3].start
    assert traj.messages == info["history"] and len(traj.messages) == 11
    # the model's tokens in the history are exactly the ones it generated
    for k, turn in enumerate(traj.turns):
        assert tok.decode(traj.completion_ids[turn.start : turn.end]).startswith(ORACLE[k])
        assert set(traj.loss_mask[turn.start : turn.end]) == {1}


def test_under_append_no_step_prompts_are_kept_and_each_turn_continues_the_episode():
    traj, fed, _tok = _play({"action_format": "tags"})
    assert traj.step_prompts == [] and len(fed) == 5
    assert [traj.step_prompt(k) for k in range(5)] == fed


def test_the_token_budget_bounds_a_step_not_the_history():
    """A budget the whole episode exceeds, but every windowed step fits in: append is cut, window answers."""
    full, _, _ = _play({"action_format": "tags", "context": "window", "context_turns": 1})
    longest_step = max(len(p) for p in full.step_prompts) + 32
    whole = len(full.prompt_ids) + len(full.completion_ids)
    assert longest_step < whole  # the numbers that make the budget below discriminate
    budget = longest_step + 1
    windowed, _, _ = _play({"action_format": "tags", "context": "window", "context_turns": 1}, budget)
    appended, _, _ = _play({"action_format": "tags"}, budget)
    assert windowed.stop_reason == "answer" and windowed.metrics["answer_em"] == 1.0
    assert appended.stop_reason == "token_budget" and appended.truncated


def test_the_adapters_session_still_refuses_a_view():
    """EnvSession (verifiers, SkyRL, OpenEnv) concatenates the history, so it keeps refusing other contexts."""
    with pytest.raises(ValueError, match=r"EnvSession .* this env's context is 'window'"):
        EnvSession(gym.make("AgentR1/Calculator-v0", context="window", context_turns=2))
    assert EnvSession(gym.make("AgentR1/Calculator-v0")).done is False

"""Trajectory types: one episode as token ids, masks, log-probs, turn spans and rewards."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent_gym.core.info import StopReason

__all__ = ["StopReason", "Trajectory", "TurnSpan"]
# ``StopReason`` is agent_gym's enum itself (one closed set for env and engine): the env's reasons
# (answer, no_action, max_turns) and the engine's (token_budget, tool_timeout, env_error).


@dataclass
class TurnSpan:
    """One model turn inside ``completion_ids``.

    Attributes:
        start: First model token of the turn (index into ``completion_ids``).
        end: One past its last model token.
        env_end: One past the env tokens that follow it (``== end`` if none).
        reward: Env reward of the step this turn caused (0.0 if never stepped).
        reward_terms: The weighted reward terms of that step.
        format_errors: Why the env refused the turn's action as malformed
            (``info["format_errors"]``; empty when it was well formed or never stepped).
        cut: The reply hit a token limit (``max_new_tokens_per_turn``, or the episode's
            ``max_total_tokens``) before it ended: the env read an unfinished action.
    """

    start: int
    end: int
    env_end: int
    reward: float = 0.0
    reward_terms: dict[str, float] = field(default_factory=dict)
    format_errors: list[str] = field(default_factory=list)
    cut: bool = False


@dataclass
class Trajectory:
    """One episode as token ids, masks, log-probs and rewards.

    Attributes:
        env_id: The Gymnasium id played.
        env_kwargs: Constructor kwargs passed to ``gymnasium.make``.
        seed: The ``reset`` seed.
        task_id: The task's id (``info["task_id"]``).
        task_index: The task's index (``options={"task_index": ...}``).
        group_id: Index of the task within the rollout call; group members share it.
        prompt_ids: Chat-templated system+user prompt incl. the generation prompt.
        completion_ids: Everything after the prompt: model and env tokens interleaved.
        loss_mask: Per completion token: 1 model-generated, 0 env. Empty in text mode.
        logprobs: Per completion token: the sampling log-prob for model tokens,
            0.0 for env tokens. Empty in text mode.
        turns: The model turns, in order.
        messages: The final chat history (``info["messages"]``), plus the last
            model turn if it never reached the env (token budget, time-out).
        metrics: ``info["metrics"]`` at the end; empty unless the env reported
            them (absent metrics are absent, never 0.0).
        stop_reason: A :class:`StopReason` value (stored as a plain ``str``,
            so a user's env may report reasons of its own).
        terminated: The env ended the episode (an answer, or with
            ``on_no_action="end"`` a reply without an action: see ``answered``).
        truncated: A budget or failure cut the episode.
        tools: Tool schemas passed to the chat template (empty when, as by
            default, the env's system prompt lists the tools itself).
        error: What went wrong for ``env_error`` / ``tool_timeout`` endings.
        evidence_found: Gold evidence items revealed so far (``info["evidence_found"]``
            of the latest step, or of ``reset``).
        evidence_total: Gold evidence items of the task (0: the task has none, so
            evidence recall is undefined for it).
        step_prompts: Under a context policy other than ``"append"`` (the env shows
            the agent a view of its history, :mod:`agent_gym.core.context`): the
            prompt ids each turn was generated from, exactly as fed to the model,
            one list per turn. Then ``prompt_ids + completion_ids`` is the *full*
            history as one chat (for the viewer and exports) and trainers score
            turn ``k``'s tokens ``completion_ids[turns[k].start:turns[k].end]``
            after ``step_prompts[k]`` (per-step samples). Empty under ``"append"``,
            where turn ``k``'s prompt is ``prompt_ids + completion_ids[:turns[k].start]``
            (:meth:`step_prompt`).
        task_type: The kind of problem the task is (``info["task_type"]`` at reset; ``None`` when the env does
            not say): training metrics are broken down by it (``by_type/<type>/...``).
    """

    env_id: str
    env_kwargs: dict[str, Any]
    seed: int
    task_id: str
    task_index: int
    group_id: int
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[TurnSpan] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    stop_reason: str = ""
    terminated: bool = False
    truncated: bool = False
    tools: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    evidence_found: int = 0
    evidence_total: int = 0
    step_prompts: list[list[int]] = field(default_factory=list)
    task_type: str | None = None

    def step_prompt(self, k: int) -> list[int]:
        """The prompt ids turn ``k`` was generated from (see ``step_prompts``)."""
        if self.step_prompts:
            return list(self.step_prompts[k])
        return list(self.prompt_ids) + list(self.completion_ids[: self.turns[k].start])

    @property
    def answered(self) -> bool:
        """The episode ended with an answer (``terminated``, and not by ``on_no_action="end"``)."""
        return self.terminated and self.stop_reason != StopReason.NO_ACTION

    @property
    def total_reward(self) -> float:
        """Sum of the turn rewards."""
        return float(sum(t.reward for t in self.turns))

    @property
    def turn_rewards(self) -> list[float]:
        """The reward of each turn, in order."""
        return [t.reward for t in self.turns]

"""The ``info`` of ``reset()`` and ``step()``: every key a :class:`~agent_gym.ToolEnv` provides, typed.

The infos stay plain ``dict`` objects (what Gymnasium, its vector envs and
every RL loop expect); :class:`ResetInfo` and :class:`StepInfo` declare their
keys so that readers can index them (``info["evidence_total"]``) instead of
guessing defaults (``info.get("evidence_total", 0)``): a renamed key then
fails loudly where it is read. Every key is always present except
``StepInfo["metrics"]``, which only an episode's last step carries.

Example:
    >>> import gymnasium as gym, agent_gym
    >>> from agent_gym.core.info import StepInfo, StopReason
    >>> env = gym.make("AgentR1/Calculator-v0")
    >>> _, info = env.reset(seed=0, options={"task_index": 3})
    >>> _, _, terminated, _, info = env.step(env.unwrapped.oracle_action())  # a calculator call
    >>> set(StepInfo.__required_keys__) <= set(info), terminated, "metrics" in info
    (True, False, False)
    >>> info["stop_reason"] is None, StopReason("answer") is StopReason.ANSWER
    (True, True)
"""

# no ``from __future__ import annotations``: TypedDict reads NotRequired[...] at run time
from enum import StrEnum
from typing import Any, NotRequired, TypedDict

__all__ = ["BaseInfo", "ChatMessage", "ResetInfo", "StepInfo", "StopReason", "ToolCallInfo"]

ChatMessage = dict[str, Any]
"""One OpenAI / Hugging Face chat message: ``{"role", "content"}`` plus ``tool_calls`` or ``tool_call_id``/``name``."""


class StopReason(StrEnum):
    """Why an episode ended: the value of ``info["stop_reason"]`` and of a trajectory's ``stop_reason``.

    One closed set for the env and for whatever drives it. The env and its
    wrapper report the first three; a driver that ends an episode from outside
    (``agent_trainers``' rollout engine) records the last three, which no
    env ever puts in its ``info``.
    """

    ANSWER = "answer"
    """The env: a well-formed final answer ended the task (``terminated``)."""
    NO_ACTION = "no_action"
    """The env, with ``on_no_action="end"``: an action ran no tool and gave no answer (``terminated``, unanswered)."""
    MAX_TURNS = "max_turns"
    """The turn limit ran out (``truncated``; set by :class:`~agent_gym.wrappers.RecordStopReason`)."""
    TOKEN_BUDGET = "token_budget"
    """A driver: the trajectory's token budget ran out (truncated)."""
    TOOL_TIMEOUT = "tool_timeout"
    """A driver: an env step took longer than its time-out (truncated)."""
    ENV_ERROR = "env_error"
    """A driver: the env raised an exception (truncated)."""


class ToolCallInfo(TypedDict):
    """One executed tool call of a step (an item of ``StepInfo["tool_calls"]``).

    Attributes:
        id: The call id (as written in the action, or assigned by the parser).
        name: The tool's name.
        arguments: The arguments it was called with.
        ok: Whether the tool succeeded (after noise: a dropped call is not ok).
        content: The result text the agent sees (clipped to ``max_result_length``).
    """

    id: str
    name: str
    arguments: dict[str, Any]
    ok: bool
    content: str


class BaseInfo(TypedDict):
    """The keys every info carries, at ``reset()`` and at each ``step()``.

    Attributes:
        task_id: The task's stable id (``options={"task_id": ...}`` poses it again).
        task_index: The task's index in the env's task list.
        turn: Steps taken so far (0 at reset).
        stop_reason: Why the episode ended; ``None`` while it runs.
        messages: What the agent sees next, as chat messages: the env's
            context policy's view of the history (under the default
            ``"append"``, the whole history; see :mod:`agent_gym.core.context`).
        history: The whole history as chat messages (the recorded MDP state),
            whatever the context policy.
        new_messages: The messages this call appended to the whole history
            (at reset: all of them), so ``history`` ends with them. Not the
            change of ``messages``: under ``"window"`` or ``"fold"`` the view
            also loses or folds older turns.
        reward_terms: The weighted reward terms of the step, summing to its
            reward; empty at reset.
        evidence_found: Gold evidence items revealed so far.
        evidence_total: Gold evidence items of the task (0 when it has none).
    """

    task_id: str
    task_index: int
    turn: int
    stop_reason: StopReason | None
    messages: list[ChatMessage]
    history: list[ChatMessage]
    new_messages: list[ChatMessage]
    reward_terms: dict[str, float]
    evidence_found: int
    evidence_total: int


class ResetInfo(BaseInfo):
    """The info of ``reset()``.

    Attributes:
        tools: The episode's tool schemas in OpenAI / Hugging Face ``tools=``
            format (fixed for the episode, so step infos omit them).
        task_type: The kind of problem the task is (QA ``bridge`` or
            ``comparison``, a Calculator template, a SQLite query kind), from
            the env's ``task_type`` hook; ``None`` when the env does not say.
            Trainers break their training metrics down by it.
    """

    tools: list[dict[str, Any]]
    task_type: str | None


class StepInfo(BaseInfo):
    """The info of ``step()``.

    Attributes:
        reward_raw: Each rubric term's unweighted value.
        tool_calls: The tool calls the action ran, with their results.
        format_errors: Why the action was malformed (empty when well formed).
        noise_events: The tool noise that fired this step (e.g. a dropped call).
        new_evidence: Ids of the gold evidence items first revealed this step.
        metrics: End-of-episode metrics (``turns``, ``malformed_actions``,
            ``answer_<score>``, ``evidence_recall`` when the task has gold
            evidence); only on the step that ends the episode (``terminated``).
    """

    reward_raw: dict[str, float]
    tool_calls: list[ToolCallInfo]
    format_errors: list[str]
    noise_events: list[str]
    new_evidence: list[str]
    metrics: NotRequired[dict[str, float]]

"""One episode of a ToolEnv, seen the way chat-based frameworks see it.

Every adapter (verifiers, SkyRL-gym, OpenEnv) needs the same few things from
an environment: the opening chat messages and tool schemas, a way to turn a
model reply - plain text, or text plus *native* (OpenAI-style) tool calls -
into one env action, the chat messages to send back, and the episode's reward
split by rubric term. :class:`EnvSession` provides exactly that, through the
env's public API only (``reset``/``step``, ``info["messages"]``,
``info["new_messages"]``, ``info["tools"]``, ``info["tool_calls"]``,
``info["reward_raw"]``, ``env.unwrapped.rubric`` and ``env.unwrapped.parser``).

Native tool calls are written into the env's own action protocol with the
env's parser (``parser.format_call``), so the env parses, runs, times out,
perturbs and scores them exactly as it would the same calls written as text.

Example:
    >>> session = EnvSession(make_tool_env("AgentR1/Calculator-v0"))
    >>> messages, tools = session.reset(seed=0, task_index=0)
    >>> [m["role"] for m in messages]
    ['system', 'user']
    >>> view = session.step("<answer>0</answer>")
    >>> view.done, sorted(session.raw_totals) == sorted(session.weights)
    (True, True)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import gymnasium as gym

from agent_gym.core.context import require_append
from agent_gym.core.env import ToolEnv

__all__ = [
    "EnvSession",
    "EnvSource",
    "NativeCall",
    "ObservationStyle",
    "StepView",
    "make_tool_env",
    "user_text",
]

EnvSource = str | Callable[..., gym.Env]
"""A registered Gymnasium id (``"AgentR1/HotpotQA-v0"``) or a callable that builds the env."""


def make_tool_env(env: EnvSource, **env_kwargs: Any) -> gym.Env[str, str]:
    """Build the env an adapter drives: ``gymnasium.make(id, **kwargs)`` or ``factory(**kwargs)``.

    A ``module:Namespace/Name-vN`` id imports its module first, from the working directory too
    (:func:`agent_gym.registration.import_env_module`), as the ``agent-r1`` commands do.

    Raises:
        TypeError: If the result is not a :class:`~agent_gym.ToolEnv` (possibly wrapped).
    """
    if isinstance(env, str):
        import agent_gym  # noqa: F401  (registers the AgentR1/* ids)
        from agent_gym.registration import import_env_module

        import_env_module(env)
        built = gym.make(env, **env_kwargs)
    elif callable(env):
        built = env(**env_kwargs)
    else:
        raise TypeError(f"env must be a registered id or a callable returning an env, got {type(env).__name__}")
    if not isinstance(getattr(built, "unwrapped", None), ToolEnv):
        raise TypeError(f"{env!r} built {type(built).__name__}, which is not a ToolEnv (wrapped or not)")
    return built


class ObservationStyle(StrEnum):
    """How tool results that answer *text* tool calls go back to the model."""

    USER = "user"
    """One user message, each result inside ``<tool_response>`` tags (fits any chat template)."""
    TOOL = "tool"
    """The env's own messages: ``tool`` role (with ``name``/``tool_call_id``) and ``user`` feedback."""


@dataclass(frozen=True)
class NativeCall:
    """A tool call the model made through the API's ``tool_calls`` field.

    Attributes:
        id: The call id the API assigned (tool results must echo it).
        name: The tool name.
        arguments: The arguments as the model sent them: a JSON string or a decoded object.
    """

    id: str
    name: str
    arguments: str | Mapping[str, Any]


@dataclass(frozen=True)
class StepView:
    """What one env step means for a chat loop.

    Attributes:
        messages: Chat messages to send back: one ``tool`` message per native
            call (in call order), then any user message (results of text calls,
            format feedback). Empty when the env sent nothing back.
        reward: The step reward (sum of ``info["reward_terms"]``).
        terminated: The agent answered.
        truncated: A budget (the env's turn limit) ran out.
        info: The env's step ``info``.
    """

    messages: list[dict[str, Any]]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(repr=False)

    @property
    def done(self) -> bool:
        """``terminated or truncated``."""
        return self.terminated or self.truncated


def user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """Observation messages as one user-turn text (tool results inside ``<tool_response>`` tags)."""
    parts = []
    for m in messages:
        if m.get("role") == "tool":
            parts.append(f"<tool_response>\n{m.get('content', '')}\n</tool_response>")
        else:
            parts.append(str(m.get("content", "")))
    return "\n".join(parts)


class EnvSession:
    """Drive one (wrapped) ToolEnv episode by episode for a chat-based framework.

    Args:
        env: The env, as ``gymnasium.make`` returns it (wrappers, time limit included).
        observation_style: How results of text tool calls go back (see :class:`ObservationStyle`).

    Attributes:
        raw_totals: Per rubric term, the sum of its unweighted values over the episode.
        episode_return: The sum of step rewards over the episode.
        turns: Steps taken this episode.
        last_info: The latest ``info`` (reset or step).
    """

    def __init__(self, env: gym.Env[str, str], observation_style: ObservationStyle | str = ObservationStyle.USER):
        base = getattr(env, "unwrapped", None)
        if not isinstance(base, ToolEnv):
            raise TypeError(f"EnvSession needs a ToolEnv (wrapped or not), got {type(env).__name__}")
        require_append(base.context, "EnvSession (the verifiers, SkyRL and OpenEnv adapters)")
        self.env = env
        self.base: ToolEnv[Any] = base
        self.observation_style = ObservationStyle(observation_style)
        self.weights: dict[str, float] = {t.name: float(t.weight) for t in base.rubric.terms}
        self._reset_totals()
        self.last_info: dict[str, Any] = {}
        self.done = False

    def _reset_totals(self) -> None:
        self.raw_totals: dict[str, float] = dict.fromkeys(self.weights, 0.0)
        self.episode_return = 0.0
        self.turns = 0

    # ----------------------------------------------------------------- reset
    def reset(
        self, *, seed: int | None = None, task_index: int | None = None, task_id: str | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Start an episode; returns ``(chat messages, tool schemas)``.

        ``task_index`` wins over ``task_id``; with neither, the task is drawn
        from the env's generator seeded by ``seed``.
        """
        options: dict[str, Any] = {}
        if task_index is not None:
            options["task_index"] = task_index
        elif task_id is not None:
            options["task_id"] = task_id
        _, info = self.env.reset(seed=seed, options=options)
        self._reset_totals()
        self.last_info = info
        self.done = False
        return list(info["messages"]), list(info["tools"])

    # ------------------------------------------------------------------ step
    def step(self, action: str) -> StepView:
        """Step the env with a text action; results of its tool calls go back as text."""
        return self._step(action, ())

    def step_native(self, content: str | None, calls: Sequence[NativeCall]) -> StepView:
        """Step with a reply that may carry native tool calls.

        The action is ``content`` followed by each call written in the env's
        action protocol. Every native call gets a ``tool`` message with its id:
        the env's result, or why it did not run.
        """
        text = content or ""
        formatted: list[tuple[NativeCall, dict[str, Any] | None, str | None]] = []
        for call in calls:
            arguments, problem = _decode_arguments(call.arguments)
            block = None
            if problem is None:
                try:
                    block = self.base.parser.format_call(call.name, arguments)
                except (KeyError, TypeError, ValueError) as exc:
                    problem = f"{call.name!r} cannot be written in this env's action format ({exc})"
            if block is not None:
                text = f"{text}\n{block}" if text else block
            formatted.append((call, arguments if problem is None else None, problem))
        return self._step(text, formatted)

    def _step(self, action: str, formatted: Sequence[tuple[NativeCall, dict[str, Any] | None, str | None]]) -> StepView:
        if self.done:
            raise RuntimeError("the episode is over; call reset() first")
        _, reward, terminated, truncated, info = self.env.step(action)
        self.turns += 1
        self.episode_return += float(reward)
        raw = info["reward_raw"]
        for name in self.weights:
            self.raw_totals[name] += float(raw[name])  # a missing term is a KeyError, never a silent 0
        self.last_info = info
        self.done = bool(terminated or truncated)
        messages = self._observations(info, formatted)
        return StepView(messages, float(reward), bool(terminated), bool(truncated), info)

    def _observations(
        self, info: Mapping[str, Any], formatted: Sequence[tuple[NativeCall, dict[str, Any] | None, str | None]]
    ) -> list[dict[str, Any]]:
        new = [m for m in info["new_messages"] if m["role"] != "assistant"]
        results = [m for m in new if m["role"] == "tool"]
        used: set[int] = set()
        answers: list[dict[str, Any]] = []
        why_not = "; ".join(info["format_errors"]) or "the env did not run it"
        for call, arguments, problem in formatted:
            content = f"Error: {problem}" if problem else None
            if content is None:
                hit = _match(info["tool_calls"], call.name, arguments, used)
                content = results[hit]["content"] if hit is not None else f"Error: not run: {why_not}"
            answers.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})
        rest = [m for i, m in enumerate(new) if not (m["role"] == "tool" and _result_index(new, i) in used)]
        if not rest:
            return answers
        if self.observation_style is ObservationStyle.TOOL:
            return answers + [dict(m) for m in rest]
        return [*answers, {"role": "user", "content": user_text(rest)}]

    # ----------------------------------------------------------- episode end
    def weighted_totals(self) -> dict[str, float]:
        """Per term, ``weight * raw_total``; these sum to :attr:`episode_return`."""
        return {name: self.weights[name] * total for name, total in self.raw_totals.items()}

    def episode_metrics(self) -> dict[str, float]:
        """The env's end-of-episode metrics (``info["metrics"]``), when it reported them.

        Only an answered (terminated) episode carries them; an episode cut by
        the turn limit reports ``turns`` here and nothing it does not know.
        """
        metrics = self.last_info.get("metrics")
        if isinstance(metrics, Mapping):
            return {k: float(v) for k, v in metrics.items()}
        return {"turns": float(self.turns)}

    @property
    def stop_reason(self) -> str | None:
        """``"answer"``, ``"no_action"``, ``"max_turns"``, or ``None`` while the episode runs (or before it)."""
        return self.last_info["stop_reason"] if self.last_info else None

    def close(self) -> None:
        """Close the env."""
        self.env.close()


def _decode_arguments(arguments: str | Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    if isinstance(arguments, Mapping):
        return dict(arguments), None
    try:
        decoded = json.loads(arguments or "{}")
    except (json.JSONDecodeError, TypeError, RecursionError) as exc:
        return {}, f"tool arguments are not valid JSON ({exc})"
    if not isinstance(decoded, dict):
        return {}, f"tool arguments must be a JSON object, got {type(decoded).__name__}"
    return decoded, None


def _match(tool_calls: Sequence[Mapping[str, Any]], name: str, arguments: Any, used: set[int]) -> int | None:
    """Index of the first unused env result for ``name(arguments)`` (else for ``name``); marks it used.

    The name-only fallback covers parsers that normalise arguments (the tag
    parser strips whitespace), so a call that ran is never reported as not run.
    """
    for exact in (True, False):
        for i, record in enumerate(tool_calls):
            if i not in used and record["name"] == name and (not exact or record["arguments"] == arguments):
                used.add(i)
                return i
    return None


def _result_index(messages: Sequence[Mapping[str, Any]], position: int) -> int:
    """Among ``messages``, the index of the tool result at ``position`` counting tool messages only."""
    return sum(1 for m in messages[:position] if m["role"] == "tool")

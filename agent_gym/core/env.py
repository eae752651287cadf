"""``ToolEnv``: the orchestrator of the paper's extended MDP.

A :class:`ToolEnv` is a :class:`gymnasium.Env` whose actions and
observations are text. Tools report *what happened*; the env decides *what it
means*. ``step()`` reads top to bottom::

    parsed      = self._parse(action)            # text -> tool calls / answer
    raw_results = self._run_tools(parsed)        # execute each call
    transition  = self._transition(parsed, raw)  # noise, state update
    terms, raw  = self._score(transition)        # rubric of reward terms
    return self._observe(transition, terms, raw) # next observation + info

Subclasses describe a task family through a handful of hooks
(:meth:`num_tasks`, :meth:`load_task`, :meth:`make_tools`, :meth:`score_answer`
and friends); they never count turns (use ``max_episode_steps`` / a wrapper)
and never format chat templates (the trainer does).

The end of an episode: ``terminated`` means the agent gave a well-formed
final answer (or, with ``on_no_action="end"``, wrote an action that runs no
tool and gives no answer); ``truncated`` means a budget (the registry's turn
limit) ran out. After either, ``step()`` raises :class:`EpisodeOverError` until
``reset()``: the env itself refuses after ``terminated``, and the
:class:`~agent_gym.wrappers.RecordStopReason` wrapper that ``gymnasium.make``
adds refuses after ``truncated``. Vector envs never step an ended episode
(they reset it), so the rule costs them nothing.

Bad input never raises: any ``str`` is a legal action. An action longer than
``max_action_length`` is refused before it is parsed; parsing is linear in
the action's length with size budgets only (see
:mod:`agent_gym.core.parsing`), so the same action gives the same result on
any machine.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

import gymnasium as gym

from agent_gym.core.context import ContextName, ContextPolicy, make_context, render_view
from agent_gym.core.history import History, Message, ToolCall, ToolResult
from agent_gym.core.info import BaseInfo, ResetInfo, StepInfo, StopReason, ToolCallInfo
from agent_gym.core.noise import ToolNoise, coerce_noise
from agent_gym.core.parsing import ActionFormat, ParsedAction, make_parser, not_a_string
from agent_gym.core.rubric import Rubric, Transition
from agent_gym.core.spaces import TextSpace
from agent_gym.core.tool import Tool, ToolContext
from agent_gym.core.validation import positive_int

__all__ = ["TASK_TYPE_ATTRIBUTES", "EpisodeOverError", "EpisodeState", "OnNoAction", "StopReason", "ToolEnv"]

TaskT = TypeVar("TaskT")

TASK_TYPE_ATTRIBUTES = ("type", "kind", "template")
"""Task attributes that :meth:`ToolEnv.task_type` reads (QA ``type``, SQLite ``kind``, Calculator ``template``)."""


class OnNoAction(StrEnum):
    """What an action that runs no tool and gives no well-formed answer does (``on_no_action=``)."""

    FEEDBACK = "feedback"
    """An error observation answers it and the episode goes on."""
    END = "end"
    """The episode ends there (``terminated``, ``stop_reason`` ``"no_action"``, no answer)."""


class EpisodeOverError(RuntimeError):
    """``step()`` was called before ``reset()`` or after the episode ended."""


def _ranges(runs: Sequence[tuple[int, int]]) -> str:
    """``[(1, 3), (5, 5)]`` -> ``"1-3, 5"``."""
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@dataclass
class EpisodeState(Generic[TaskT]):
    """The typed state of one episode.

    Attributes:
        task: The task record being solved.
        task_index: Its index in the env's task list.
        history: The append-only message history (the MDP state proper).
        evidence: Gold evidence items of the task (for process rewards).
        found: Evidence items revealed so far.
        seen_calls: Canonical ``name(arguments)`` keys of earlier calls.
        turn: Steps taken so far.
        malformed: Malformed actions so far.
        done: The episode terminated.
        answer: The final answer, once given.
        answer_scores: Its scores, once given.
    """

    task: TaskT
    task_index: int
    history: History = field(default_factory=History)
    evidence: frozenset[str] = frozenset()
    found: set[str] = field(default_factory=set)
    seen_calls: set[str] = field(default_factory=set)
    turn: int = 0
    malformed: int = 0
    done: bool = False
    answer: str | None = None
    answer_scores: dict[str, float] = field(default_factory=dict)

    @property
    def potential(self) -> float:
        """Φ(s): the fraction of gold evidence found so far (0 when there is none)."""
        return len(self.found & self.evidence) / len(self.evidence) if self.evidence else 0.0


class ToolEnv(gym.Env[str, str], Generic[TaskT]):
    """Base class for text environments whose agents act through tools.

    Any ``str`` is a legal action; ``step()`` never raises for what the agent wrote. After ``terminated`` (a
    well-formed answer) ``step()`` raises :class:`EpisodeOverError` until ``reset()``; the same holds after
    ``truncated`` for registered envs (their :class:`~agent_gym.wrappers.RecordStopReason` wrapper enforces it,
    since the time limit is a wrapper too). Envs pickle and deep-copy (tools are copied with them; see
    :class:`~agent_gym.core.tool.Tool`), so a copy made mid-episode continues exactly like the original.

    Args:
        rubric: The per-step reward terms.
        action_format: ``"tool_call"`` (Hermes JSON blocks) or ``"tags"``.
        tool_noise: A :class:`~agent_gym.core.noise.ToolNoise` (or a dict of
            its fields); default none.
        max_action_length: Size of the action space. Longer actions are still
            accepted: they are refused unparsed, with an error observation and
            the format penalty.
        max_observation_length: Size of the observation space (any value >= 1); a longer view is shown with its
            middle elided, or, when even that does not fit, as its last ``max_observation_length`` characters.
        max_result_length: Tool results are clipped to this many characters.
        on_no_action: An :class:`OnNoAction` (or its string value): what an action that runs no tool and gives
            no well-formed answer (plain text, a broken call) does: ``"feedback"`` (default) answers it with an
            error observation and the episode goes on; ``"end"`` ends the episode there (``terminated``,
            ``info["stop_reason"] == "no_action"``, no answer), as TRL's tool loop and Agent-R1's env do. Either
            way the step is scored as a malformed non-final step (format penalty, step cost; the outcome and
            answer terms stay 0).
        context: What the agent sees next (:mod:`agent_gym.core.context`): ``"append"``
            (default: all), ``"window"``, ``"fold"`` or a ``ContextPolicy``; the
            observation and ``info["messages"]`` are its view of ``info["history"]``.
        context_turns: How many recent turns ``"window"`` / ``"fold"`` show in full.
        context_digest_chars: How long each folded turn's one-line digest may be (``"fold"``).
        render_mode: ``"ansi"`` or ``None``.

    Raises:
        ValueError: A size or context setting is not a positive int, or
            ``action_format`` / ``on_no_action`` / ``render_mode`` / ``context``
            is unknown, or a context setting is missing or misplaced.
        TypeError: ``rubric`` is not a ``Rubric`` or ``context`` not a ``ContextPolicy``.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"]}
    action_space: TextSpace
    observation_space: TextSpace

    def __init__(
        self,
        *,
        rubric: Rubric,
        action_format: str | ActionFormat = ActionFormat.TOOL_CALL,
        tool_noise: ToolNoise | Mapping[str, Any] | None = None,
        max_action_length: int = 16_384,
        max_observation_length: int = 1_000_000,
        max_result_length: int = 4_000,
        on_no_action: str | OnNoAction = OnNoAction.FEEDBACK,
        context: str | ContextPolicy = ContextName.APPEND,
        context_turns: int | None = None,
        context_digest_chars: int | None = None,
        render_mode: str | None = None,
    ):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']} or None (got {render_mode!r})"
            )
        if not isinstance(rubric, Rubric):
            raise TypeError(f"rubric must be a Rubric, got {type(rubric).__name__}")
        formats = [f.value for f in ActionFormat]
        if action_format not in formats:
            raise ValueError(f"action_format must be one of {formats} (got {action_format!r})")
        self.action_format = ActionFormat(action_format)
        if on_no_action not in [r.value for r in OnNoAction]:
            raise ValueError(f"on_no_action must be 'feedback' or 'end' (got {on_no_action!r})")
        self.on_no_action = OnNoAction(on_no_action)
        self.context = make_context(context, context_turns=context_turns, context_digest_chars=context_digest_chars)
        self.rubric = rubric
        self.tool_noise = coerce_noise(tool_noise)
        self.max_result_length = positive_int("max_result_length", max_result_length)
        self.action_space = TextSpace(positive_int("max_action_length", max_action_length))
        self.observation_space = TextSpace(positive_int("max_observation_length", max_observation_length))
        self.reward_range = rubric.reward_range
        self.render_mode = render_mode
        self._state: EpisodeState[TaskT] | None = None
        self._tools: dict[str, Tool] = {}
        self._parser: Any = None  # built per episode from that episode's tools

    # ------------------------------------------------------------------ hooks
    def num_tasks(self) -> int:
        """How many tasks the env can pose."""
        raise NotImplementedError

    def load_task(self, index: int) -> TaskT:
        """The task record at ``index`` (``0 <= index < num_tasks()``)."""
        raise NotImplementedError

    def task_id(self, task: TaskT) -> str:
        """A stable identifier of ``task`` (used by ``options={"task_id": ...}``)."""
        return str(task.id)  # type: ignore[attr-defined]

    def task_type(self, task: TaskT) -> str | None:
        """The kind of problem ``task`` is, or ``None``: by default its first non-empty string attribute of
        :data:`TASK_TYPE_ATTRIBUTES` (QA ``type``, SQLite ``kind``, Calculator ``template``). Goes into the reset
        info; trainers and evaluations break their figures down by it."""
        for name in TASK_TYPE_ATTRIBUTES:
            value = getattr(task, name, None)
            if isinstance(value, str) and value:
                return value
        return None

    def make_tools(self, task: TaskT) -> Sequence[Tool]:
        """The tools available while solving ``task``."""
        raise NotImplementedError

    def system_prompt(self, task: TaskT, tools: Sequence[Tool]) -> str:
        """The system message; by default the parser's tool instructions."""
        return self._parser.instructions(tools)

    def user_prompt(self, task: TaskT) -> str:
        """The first user message (the question)."""
        raise NotImplementedError

    def gold_evidence(self, task: TaskT) -> frozenset[str]:
        """Gold evidence items of ``task`` for process rewards (default none)."""
        return frozenset()

    def revealed_evidence(self, call: ToolCall, result: ToolResult, state: EpisodeState[TaskT]) -> set[str]:
        """Evidence a (noisy) result shows; default ``result.metadata["evidence"]``."""
        return set(result.metadata.get("evidence", ())) if result.ok else set()

    def score_answer(self, task: TaskT, answer: str) -> dict[str, float]:
        """Scores of a final answer, each in ``[0, 1]`` (e.g. ``em``, ``f1``)."""
        raise NotImplementedError

    def oracle_action(self) -> str:
        """The expert's next action for the current state (for oracle policies).

        An oracle may read privileged state (gold evidence, gold answer); it is
        for tests, solvability checks and cold-start SFT data, not for agents.
        """
        raise NotImplementedError(f"{type(self).__name__} has no oracle")

    def task_index_of(self, task_id: str) -> int:
        """The index of the task with id ``task_id`` (linear scan; override for speed)."""
        for i in range(self.num_tasks()):
            if self.task_id(self.load_task(i)) == task_id:
                return i
        raise KeyError(f"no task with id {task_id!r}")

    # -------------------------------------------------------------- gym API
    # gymnasium declares the info as dict[str, Any]; ours is a TypedDict (a plain dict at run time), which
    # type checkers do not count as a dict[str, Any] (PEP 589), so these two overrides are flagged
    def reset(  # type: ignore[override]
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, ResetInfo]:
        """Start an episode.

        Options:
            task_index: Pose this task (an integer in ``range(num_tasks())``;
                numpy integers are accepted).
            task_id: Pose the task with this id.

        Without either option the task is drawn from ``np_random``. G copies of
        an env reset with the same ``task_index`` and seed replay the same
        question under the same noise; with different seeds, the same question
        under different noise (what GRPO groups need).

        The reset ``info`` (a :class:`~agent_gym.core.info.ResetInfo`) also
        carries ``"tools"``: the episode's tool schemas in OpenAI / Hugging
        Face ``tools=`` format (step infos omit it: tools do not change within
        an episode).
        """
        super().reset(seed=seed)
        index = self._select_task(options or {})
        task = self.load_task(index)
        tools = self.make_tools(task)
        self._tools = {t.name: t for t in tools}
        self._parser = make_parser(self.action_format, tools)
        state: EpisodeState[TaskT] = EpisodeState(task=task, task_index=index, evidence=self.gold_evidence(task))
        state.history.append(Message.system(self.system_prompt(task, tools)))
        state.history.append(Message.user(self.user_prompt(task)))
        self._state = state
        tool_schemas = [t.schema() for t in tools]  # fixed for the episode, so only at reset
        return self._render_observation(), ResetInfo(
            **self._info(state, new_from=0), tools=tool_schemas, task_type=self.task_type(task)
        )

    def step(self, action: str) -> tuple[str, float, bool, bool, StepInfo]:  # type: ignore[override]
        """Parse the action, run its tools, apply the transition, score it, observe.

        Any ``str`` is a legal action (malformed text gets an error observation
        and the format penalty); nothing the agent writes makes this raise.
        The ``info`` is a :class:`~agent_gym.core.info.StepInfo`.

        Raises:
            EpisodeOverError: Before ``reset()`` or after the episode terminated.
        """
        state = self._require_running()
        state.turn += 1
        first_new = len(state.history)
        parsed = self._parse(action)
        raw_results = self._run_tools(parsed)
        transition = self._transition(parsed, raw_results)
        weighted, raw = self._score(transition)
        return self._observe(transition, weighted, raw, first_new)

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._render_observation() if self._state is not None else ""
        return None

    # ------------------------------------------------------------ the steps
    def _parse(self, action: str) -> ParsedAction:
        state = self._state
        assert state is not None
        if not isinstance(action, str):
            return not_a_string(action)
        limit = self.action_space.max_length
        if len(action) > limit:  # checked first: an over-long action is never parsed
            return ParsedAction(raw=action, errors=(f"action is {len(action)} characters long; the limit is {limit}",))
        return self._parser.parse(action, turn=state.turn)

    def _run_tools(self, parsed: ParsedAction) -> list[tuple[ToolCall, ToolResult]]:
        state = self._state
        assert state is not None
        ctx = ToolContext(rng=self.np_random, noise=self.tool_noise, turn=state.turn)
        out = []
        for call in parsed.tool_calls:
            tool = self._tools.get(call.name)
            if tool is None:
                known = ", ".join(sorted(self._tools))
                result = ToolResult.error(
                    f"unknown tool {call.name!r}; available tools: {known}", reason="unknown_tool"
                )
            else:
                result = tool.call(call.arguments, ctx)
            out.append((call, result))
        return out

    def _transition(self, parsed: ParsedAction, raw_results: list[tuple[ToolCall, ToolResult]]) -> Transition:
        state = self._state
        assert state is not None
        potential_before = state.potential
        history = state.history
        history.append(Message.assistant(self._clip(parsed.raw, self.action_space.max_length), parsed.tool_calls))
        results: list[tuple[ToolCall, ToolResult]] = []
        events: list[str] = []
        new_evidence: set[str] = set()
        repeated = 0
        for call, result in raw_results:
            events.extend(str(e) for e in result.metadata.get("noise_events", ()))  # fired inside the tool
            result, fired = self.tool_noise.apply(call.name, result, self.np_random)
            events.extend(fired)
            result = ToolResult(self._clip(result.content, self.max_result_length), result.ok, result.metadata)
            key = f"{call.name}:{json.dumps(dict(call.arguments), sort_keys=True, ensure_ascii=False)}"
            repeated += key in state.seen_calls
            state.seen_calls.add(key)
            revealed = self.revealed_evidence(call, result, state) & state.evidence
            new_evidence |= revealed - state.found
            state.found |= revealed
            history.append(Message.tool(call, result))
            results.append((call, result))
        ends_here = self.on_no_action is OnNoAction.END and not parsed.tool_calls and not parsed.is_final
        if not parsed.well_formed:
            state.malformed += 1
            if not ends_here:  # after the tool messages, which must follow their call in chat format
                history.append(Message.user(self._format_feedback(parsed)))
        state.done = ends_here  # the rubric still scores this step as a non-final one
        terminated = parsed.is_final
        if terminated:
            assert parsed.answer is not None
            state.done = True
            state.answer = parsed.answer
            state.answer_scores = self.score_answer(state.task, parsed.answer)
        return Transition(
            turn=state.turn,
            action=parsed,
            results=tuple(results),
            terminated=terminated,
            answer_scores=dict(state.answer_scores) if terminated else {},
            new_evidence=frozenset(new_evidence),
            evidence_total=len(state.evidence),
            repeated_calls=repeated,
            potential_before=potential_before,
            potential_after=state.potential,
            episode_malformed=state.malformed,
            noise_events=tuple(events),
        )

    def _score(self, transition: Transition) -> tuple[dict[str, float], dict[str, float]]:
        return self.rubric.score(transition)

    def _observe(
        self, transition: Transition, weighted: dict[str, float], raw: dict[str, float], first_new: int
    ) -> tuple[str, float, bool, bool, StepInfo]:
        state = self._state
        assert state is not None
        info = StepInfo(
            **self._info(state, new_from=first_new, terms=weighted),
            reward_raw=raw,
            tool_calls=[
                ToolCallInfo(id=c.id, name=c.name, arguments=dict(c.arguments), ok=r.ok, content=r.content)
                for c, r in transition.results
            ],
            format_errors=list(transition.action.errors),
            noise_events=list(transition.noise_events),
            new_evidence=sorted(transition.new_evidence),
        )
        if state.done:  # a final answer, or (``on_no_action="end"``) no action
            info["stop_reason"] = StopReason.ANSWER if transition.terminated else StopReason.NO_ACTION
            info["metrics"] = self._episode_metrics(state)
        reward = float(sum(weighted.values()))
        return self._render_observation(), reward, state.done, False, info

    # -------------------------------------------------------------- helpers
    def _select_task(self, options: Mapping[str, Any]) -> int:
        n = self.num_tasks()
        if "task_index" in options:
            index = options["task_index"]
            if isinstance(index, bool) or not isinstance(index, numbers.Integral) or not 0 <= int(index) < n:
                raise ValueError(f"options['task_index'] must be an int in [0, {n}) (got {index!r})")
            return int(index)
        if "task_id" in options:
            return self.task_index_of(str(options["task_id"]))
        return int(self.np_random.integers(n))

    def _require_running(self) -> EpisodeState[TaskT]:
        if self._state is None:
            raise EpisodeOverError("call reset() before step()")
        if self._state.done:
            raise EpisodeOverError("the episode has terminated; call reset() to start a new one")
        return self._state

    @staticmethod
    def _format_feedback(parsed: ParsedAction) -> str:
        """The error observation of a malformed action; it says truthfully which calls ran."""
        problems = "; ".join(parsed.errors)
        if not parsed.tool_calls:
            ran = "No tool was run."
        else:
            names = ", ".join(c.name for c in parsed.tool_calls)
            ran = f"Ran tool call(s) {_ranges(parsed.ran_ranges())} of {parsed.calls_written} ({names})"
            refused = parsed.refused_ranges()
            ran += f"; refused {_ranges(refused)}." if refused else "."
        return f"Format error: {problems}. {ran} Follow the tool-call format from the instructions."

    @staticmethod
    def _clip(text: str, limit: int) -> str:
        """``text`` cut to at most ``limit`` characters, with a note saying how many were cut when it fits."""
        if len(text) <= limit:
            return text
        keep = limit - len(f" [... {len(text)} characters cut]")  # the note is never longer than this
        if keep < 1:
            return text[:limit]
        return f"{text[:keep]} [... {len(text) - keep} characters cut]"

    def _view(self) -> list[Message]:
        """What the agent sees next: the context policy's view of the whole history."""
        assert self._state is not None
        return self.context.view(self._state.history.messages)

    def _render_observation(self) -> str:
        return render_view(self._view(), self.observation_space.max_length)

    def _episode_metrics(self, state: EpisodeState[TaskT]) -> dict[str, float]:
        metrics = {f"answer_{k}": float(v) for k, v in state.answer_scores.items()}
        metrics["turns"] = float(state.turn)
        metrics["malformed_actions"] = float(state.malformed)
        if state.evidence:  # a task without gold evidence (e.g. question-only data) has no recall: absent, not 0
            metrics["evidence_recall"] = state.potential
        return metrics

    def _info(self, state: EpisodeState[TaskT], new_from: int, terms: dict[str, float] | None = None) -> BaseInfo:
        history, view = state.history.to_chat(), self._view()  # under append the view is the history: convert once
        return BaseInfo(
            task_id=self.task_id(state.task),
            task_index=state.task_index,
            turn=state.turn,
            stop_reason=None,
            messages=list(history) if view == state.history.messages else [m.to_chat() for m in view],
            history=history,
            new_messages=[m.to_chat() for m in state.history.messages[new_from:]],
            reward_terms={} if terms is None else terms,
            evidence_found=len(state.found & state.evidence),
            evidence_total=len(state.evidence),
        )

    @property
    def state(self) -> EpisodeState[TaskT] | None:
        """The current episode's typed state (read it; do not mutate it)."""
        return self._state

    @property
    def tools(self) -> dict[str, Tool]:
        """The tools of the current episode, by name."""
        return dict(self._tools)

    @property
    def parser(self) -> Any:
        """The current action parser (also writes actions, for scripted policies)."""
        return self._parser

"""verifiers adapter: any ToolEnv as a ``verifiers.v1`` taskset, played by an in-process harness.

verifiers 0.4 splits an environment into a *taskset* (the rows, their scoring)
and a *harness* (the program the model runs in; every model call goes through
verifiers' interception server, which records the trace). Our env is both the
task and the tool executor, so this module ships the two halves:

* :class:`AgentGymTaskset` - one task per env task (``task_indices``), its
  prompt the env's own system and user messages. Each rubric term of the env
  is a verifiers reward function of the same name and weight (its value: the
  term's unweighted sum over the episode), so ``trace.reward`` is the env's
  episode return and ``--env.taskset.task.rewards.<term>.weight`` re-weights a
  term; the env's episode metrics (``answer_f1``, ``turns``, ...) are metrics.
* :class:`AgentGymHarness` - an in-process chat loop (the harness contract
  allows one: every model call goes to the interception ``endpoint``). It
  resets the env, offers the env's tools as native ``tools=``, steps the env
  with each reply - native tool calls are written in the env's action format,
  text actions pass as they are - and sends the env's observations back as
  ``tool`` messages (native calls) or a user message (text calls, format
  feedback) until the env terminates or truncates.

``vf-eval agent-r1-gym --env.taskset.env-id AgentR1/HotpotQA-v0`` runs it
(the top-level ``agent_r1_gym`` module is the plugin verifiers imports);
:func:`load_environment` builds the same env in Python.

Example:
    >>> env = load_environment("AgentR1/Calculator-v0", task_indices=[0, 1])  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import verifiers.v1 as vf
from openai import APIStatusError, AsyncOpenAI
from pydantic import Field
from verifiers.v1.utils.decorators import discover_decorated

from agent_gym.core.env import ToolEnv
from agent_gym.integrations.session import EnvSession, NativeCall, ObservationStyle, make_tool_env

__all__ = [
    "PLUGIN_ID",
    "AgentGymData",
    "AgentGymEnv",
    "AgentGymEnvConfig",
    "AgentGymHarness",
    "AgentGymHarnessConfig",
    "AgentGymState",
    "AgentGymTask",
    "AgentGymTaskset",
    "AgentGymTasksetConfig",
    "load_environment",
]

PLUGIN_ID = "agent-r1-gym"
"""The taskset/harness id verifiers resolves to the top-level ``agent_r1_gym`` module."""


class AgentGymData(vf.TaskData):
    """One env task as a verifiers row (``id`` is the env's task id)."""

    env_id: str
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    task_index: int
    seed: int | None = None


class AgentGymState(vf.State):
    """What the harness hands to scoring: the episode's reward split and metrics."""

    raw_totals: dict[str, float] = Field(default_factory=dict)
    episode_return: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    stop_reason: str | None = None
    turns: int = 0


@functools.lru_cache(maxsize=64)
def _rubric_terms(env_id: str, env_kwargs_json: str) -> tuple[tuple[str, float], ...]:
    """``(name, weight)`` of each rubric term of the env (built once per env and kwargs)."""
    env = make_tool_env(env_id, **json.loads(env_kwargs_json))
    try:
        return tuple((t.name, float(t.weight)) for t in cast(ToolEnv[Any], env.unwrapped).rubric.terms)
    finally:
        env.close()


def _term_reward(name: str, weight: float) -> Callable[..., Any]:
    """A verifiers reward function for one rubric term: its unweighted episode total."""

    async def term(trace: vf.Trace) -> float:
        totals = trace.state.raw_totals
        if name not in totals:
            raise KeyError(f"the episode reported no total for rubric term {name!r} (got {sorted(totals)})")
        return totals[name]

    term.__name__ = name
    return vf.reward(term, weight=weight)


async def episode_metrics(trace: vf.Trace) -> dict[str, float]:
    """The env's end-of-episode metrics, plus the stop reason as ``answered`` (1/0)."""
    state = trace.state
    return {**state.metrics, "answered": float(state.stop_reason == "answer")}


class AgentGymTask(vf.Task[AgentGymData, AgentGymState]):
    """Scoring of one env task: one reward function per rubric term, the env's metrics as metrics."""

    @property
    def key(self) -> str:
        return f"{self.data.env_id}:{self.data.id}"

    def hooks(self, attr: str) -> list[Callable[..., Any]]:
        """The base hooks, with the rubric's terms (rewards) and the episode metrics added.

        Config-plugged entries still override them by name, as for decorated methods.
        """
        if attr not in ("reward", "metric"):
            return super().hooks(attr)
        from verifiers.v1.utils.loaders import load_plugged_fn

        data = self.data
        if attr == "reward":
            terms = _rubric_terms(data.env_id, json.dumps(data.env_kwargs, sort_keys=True))
            generated = [_term_reward(name, weight) for name, weight in terms]
        else:
            generated = [vf.metric(episode_metrics)]
        merged = {fn.__name__: fn for fn in generated}
        merged |= {fn.__name__: fn for fn in discover_decorated(self, attr)}
        plugged = self.config.rewards if attr == "reward" else self.config.metrics
        merged |= {
            name: load_plugged_fn(name, spec, attr, decorated=merged.get(name)) for name, spec in plugged.items()
        }
        return sorted(merged.values(), key=lambda fn: (-getattr(fn, f"{attr}_priority", 0), fn.__name__))


class AgentGymTasksetConfig(vf.TasksetConfig):
    """``--env.taskset.*`` of ``vf-eval agent-r1-gym``."""

    env_id: str = "AgentR1/HotpotQA-v0"
    """The registered env id (``gymnasium.make``)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for ``gymnasium.make`` (e.g. ``data_path``)."""
    task_indices: list[int] | None = None
    """Which tasks, by index (default: every task of the env)."""
    seed: int | None = 0
    """Episode seed (noise draws); ``None`` leaves it unseeded."""


class AgentGymTaskset(vf.Taskset[AgentGymTask, AgentGymTasksetConfig]):
    """The env's tasks as verifiers rows, built lazily (``vf-eval -n 5`` builds five)."""

    def load(self) -> Iterator[AgentGymTask]:
        config = self.config
        session = EnvSession(make_tool_env(config.env_id, **config.env_kwargs))
        try:
            indices = config.task_indices
            if indices is None:
                indices = list(range(session.base.num_tasks()))
            for index in indices:
                messages, _ = session.reset(seed=config.seed, task_index=int(index))
                system = "\n\n".join(m["content"] for m in messages if m["role"] == "system") or None
                user = "\n\n".join(m["content"] for m in messages if m["role"] == "user")
                data = AgentGymData(
                    id=str(session.last_info["task_id"]),
                    name=f"{config.env_id}#{index}",
                    prompt=user,
                    system_prompt=system,
                    env_id=config.env_id,
                    env_kwargs=dict(config.env_kwargs),
                    task_index=int(index),
                    seed=config.seed,
                )
                yield AgentGymTask(data, config.task)
        finally:
            session.close()


class AgentGymHarnessConfig(vf.HarnessConfig):
    """``--env.agent.harness.*`` of the in-process harness."""

    native_tools: bool = True
    """Offer the env's tools as API ``tools=`` (native calls); ``False``: text protocol only."""
    observation_style: str = ObservationStyle.USER.value
    """Results of *text* tool calls: ``"user"`` (one user message) or ``"tool"``."""


class AgentGymHarness(vf.Harness[AgentGymHarnessConfig]):
    """Plays one env episode in-process; every model call goes through verifiers' interception."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        tool_interception_url: str | None = None,
    ) -> vf.ProgramResult:
        if not isinstance(data, AgentGymData):
            data = AgentGymData.model_validate(data.model_dump())
        session = EnvSession(make_tool_env(data.env_id, **data.env_kwargs), self.config.observation_style)
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=2)
        try:
            messages, tools = session.reset(seed=data.seed, task_index=data.task_index)
            kwargs: dict[str, Any] = {"tools": tools} if tools and self.config.native_tools else {}
            state = trace.state
            while not session.done:
                try:
                    completion = await client.chat.completions.create(
                        model=ctx.model, messages=cast(Any, messages), **kwargs
                    )
                except APIStatusError:
                    if trace.stop_condition is not None:  # a limit or @stop refused the turn: a normal end
                        break
                    raise
                reply = completion.choices[0].message
                messages.append(reply.model_dump(exclude_none=True))
                calls = []
                for c in reply.tool_calls or ():
                    if c.type != "function":  # the env offers only function tools
                        raise ValueError(f"the model made a {c.type!r} tool call; the env offers function tools")
                    calls.append(NativeCall(c.id, c.function.name, c.function.arguments))
                view = session.step_native(reply.content, calls)
                messages.extend(view.messages)
                _record(state, session)
        finally:
            await client.close()
            session.close()
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


def _record(state: AgentGymState, session: EnvSession) -> None:
    state.raw_totals = dict(session.raw_totals)
    state.episode_return = session.episode_return
    state.turns = session.turns
    state.stop_reason = session.stop_reason
    state.metrics = session.episode_metrics() if session.done else {"turns": float(session.turns)}


class AgentGymEnvConfig(vf.SingleAgentEnvConfig):
    """The env's config: one ``agent`` seat whose harness runs in-process on the local host.

    The harness never executes model-written code, so the local ``subprocess``
    runtime (no container, no tunnel) is the default instead of a remote sandbox.
    """

    # model_construct: validating would resolve the harness id by importing agent_r1_gym,
    # the module that is importing this one (verifiers re-validates the config at run time).
    agent: vf.AgentConfig = vf.AgentConfig.model_construct(
        runtime=vf.SubprocessConfig(), harness=AgentGymHarnessConfig(id=PLUGIN_ID)
    )


class AgentGymEnv(vf.Env[AgentGymEnvConfig]):
    """One agent plays one env episode per verifiers episode."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        await agents.agent.run(task)


def load_environment(
    env_id: str,
    *,
    task_indices: list[int] | None = None,
    seed: int | None = 0,
    harness: Mapping[str, Any] | None = None,
    **env_kwargs: Any,
) -> vf.Env:
    """The verifiers environment (``SingleAgentEnv``) that plays ``env_id`` with :class:`AgentGymHarness`.

    Args:
        env_id: A registered env id.
        task_indices: Which tasks (default all).
        seed: Episode seed.
        harness: :class:`AgentGymHarnessConfig` fields (e.g. ``{"native_tools": False}``).
        **env_kwargs: Keyword arguments for ``gymnasium.make``.
    """
    from verifiers.v1.utils.loaders import load_environment as vf_load_environment
    from verifiers.v1.utils.loaders import resolve_env_config

    config = resolve_env_config(
        {
            "taskset": {
                "id": PLUGIN_ID,
                "env_id": env_id,
                "env_kwargs": env_kwargs,
                "task_indices": task_indices,
                "seed": seed,
            },
            "agent": {"harness": {"id": PLUGIN_ID, **dict(harness or {})}},
        }
    )
    return vf_load_environment(config)

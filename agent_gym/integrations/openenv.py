"""OpenEnv adapter: serve any ToolEnv as an OpenEnv environment server.

Written for ``openenv`` 0.10 (the ``openenv`` extra); it runs unchanged on
``openenv-core`` 0.3, its predecessor (the ``openenv-core`` extra), which
installs beside verifiers 0.4 where ``openenv`` 0.10 does not.

Server side, :class:`AgentGymEnvironment` is an ``openenv.core`` ``Environment``
around one env instance; :func:`make_app` builds the FastAPI app with
OpenEnv's own ``create_app`` (``/ws`` sessions, ``/reset``, ``/step``,
``/state``, ``/schema``, ``/health``), one env per WebSocket session.

Client side, :class:`AgentGymClient` is a typed ``EnvClient``, and
:class:`AgentGymSessionFactory` makes the per-rollout ``ResourceSession`` that
OpenEnv's harness adapters - and so TRL's experimental async GRPO
``HarnessRolloutWorker`` - drive: the env's tools (plus an ``answer`` tool) as
MCP-style tools, one env step per tool call, and ``verify()`` forwarding the
episode return the env produced.

Actions are :class:`AgentGymAction`: raw ``text`` (the env's native action),
one tool call (``tool_name`` + ``arguments``, written in the env's own action
format by its parser) or a final ``answer``. Observations carry the new chat
messages, the reward terms, ``truncated`` and the stop reason.

Example:
    >>> with background_server("AgentR1/Calculator-v0") as url:  # doctest: +SKIP
    ...     client = AgentGymClient(base_url=url).sync()
    ...     with client:
    ...         result = client.reset(seed=0, task_index=3)
    ...         result = client.step(AgentGymAction(answer="42"))
"""

from __future__ import annotations

import argparse
import contextlib
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server import Action, Environment, Observation, State, create_app
from openenv.core.env_server.mcp_types import Tool as McpTool
from openenv.core.env_server.types import ConcurrencyConfig
from openenv.core.harness import ResourceSession, ResourceSessionFactory, ToolResult, VerifyResult
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError
from starlette.websockets import WebSocketDisconnect

from agent_gym.integrations.session import EnvSession, EnvSource, NativeCall, ObservationStyle, make_tool_env
from agent_gym.retrieval.server import BackgroundServer

__all__ = [
    "ANSWER_TOOL",
    "AgentGymAction",
    "AgentGymClient",
    "AgentGymEnvironment",
    "AgentGymObservation",
    "AgentGymResourceSession",
    "AgentGymSessionFactory",
    "AgentGymState",
    "RequestError",
    "background_server",
    "make_app",
    "serve",
]

DEFAULT_IDLE_TIMEOUT_S = 300.0
"""Sessions (WebSocket or HTTP MCP) with no request for this long are closed, freeing their slot."""


class RequestError(ValueError):
    """A client's mistake, answered over HTTP with ``status`` (4xx) and the message as ``detail``."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


ANSWER_TOOL = "answer"
"""The extra tool a :class:`AgentGymResourceSession` offers to submit the final answer."""


class AgentGymAction(Action):
    """One env step: exactly one of ``text``, ``tool_name`` (+ ``arguments``) or ``answer``."""

    text: str | None = Field(default=None, description="A raw action in the env's own format")
    tool_name: str | None = Field(default=None, description="Call this tool (written in the env's action format)")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Arguments of the tool call")
    answer: str | None = Field(default=None, description="Submit this final answer")

    @model_validator(mode="after")
    def _exactly_one(self) -> AgentGymAction:
        given = [name for name in ("text", "tool_name", "answer") if getattr(self, name) is not None]
        if len(given) != 1:
            # A PydanticCustomError (not ValueError): OpenEnv (0.3 and 0.10) echoes e.errors() to the client,
            # and a ValueError in their context cannot be serialised, which would end the session.
            raise PydanticCustomError(
                "exactly_one_action", "give exactly one of text, tool_name or answer (got {given})", {"given": given}
            )
        return self


class AgentGymObservation(Observation):
    """What the agent sees after a reset or a step (``done``/``reward`` are OpenEnv's own fields)."""

    messages: list[dict[str, Any]] = Field(default_factory=list, description="New chat messages (reset: all)")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="Tool schemas (reset only)")
    task_id: str | None = None
    task_index: int | None = None
    turn: int = 0
    truncated: bool = Field(default=False, description="The turn limit ended the episode (not the agent)")
    stop_reason: str | None = None
    reward_terms: dict[str, float] = Field(default_factory=dict)
    tool_calls: list[dict[str, Any]] = Field(default_factory=list, description="name, arguments, ok, content")
    metrics: dict[str, float] | None = Field(default=None, description="Episode metrics, once the episode ends")


class AgentGymState(State):
    """Server-side episode state (``episode_id``/``step_count`` are OpenEnv's fields)."""

    env_id: str = ""
    task_id: str | None = None
    task_index: int | None = None
    done: bool = False
    episode_return: float = 0.0
    stop_reason: str | None = None


class AgentGymEnvironment(Environment[AgentGymAction, AgentGymObservation, AgentGymState]):
    """An OpenEnv ``Environment`` around one ToolEnv.

    Args:
        env: A registered id or a factory of a ToolEnv.
        env_kwargs: Keyword arguments for building it.
        observation_style: How results of text tool calls come back (``"user"`` or ``"tool"``).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # one env instance per session; shared indexes are read-only

    def __init__(
        self,
        env: EnvSource,
        env_kwargs: Mapping[str, Any] | None = None,
        observation_style: ObservationStyle | str = ObservationStyle.TOOL,
    ):
        super().__init__()
        self.session = EnvSession(make_tool_env(env, **dict(env_kwargs or {})), observation_style)
        self._closed = False
        self._state = AgentGymState(env_id=env if isinstance(env, str) else getattr(env, "__name__", "custom"))

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_index: int | None = None,
        task_id: str | None = None,
        **kwargs: Any,
    ) -> AgentGymObservation:
        """Start an episode on ``task_index``/``task_id`` (else one drawn under ``seed``)."""
        self._check_open()
        if kwargs:
            raise RequestError(f"unknown reset arguments {sorted(kwargs)}; use seed, episode_id, task_index, task_id")
        try:
            messages, tools = self.session.reset(seed=seed, task_index=task_index, task_id=task_id)
        except (KeyError, IndexError, TypeError, ValueError) as exc:  # no such task, a bad seed or index
            raise RequestError(f"cannot reset: {exc}") from None
        info = self.session.last_info
        self._state = AgentGymState(
            episode_id=episode_id or uuid.uuid4().hex,
            env_id=self._state.env_id,
            task_id=info["task_id"],
            task_index=info["task_index"],
        )
        return AgentGymObservation(
            messages=messages, tools=tools, task_id=info["task_id"], task_index=info["task_index"]
        )

    def step(self, action: AgentGymAction, timeout_s: float | None = None, **kwargs: Any) -> AgentGymObservation:
        """Apply one action; stepping a finished episode raises a clear error."""
        self._check_open()
        if self._state.episode_id is None:
            raise RequestError(
                "no episode to step: send reset first. OpenEnv's HTTP /step builds a fresh env for every request, "
                "so play episodes over a session (the /ws WebSocket, or HTTP /mcp with openenv/session/create)",
                status=409,
            )
        if self._state.done:
            raise RequestError("the episode is over; send reset first", status=409)
        if action.tool_name is not None:
            view = self.session.step_native(None, [NativeCall("openenv_call", action.tool_name, action.arguments)])
        elif action.answer is not None:
            view = self.session.step(self.session.base.parser.format_answer(action.answer))
        else:
            view = self.session.step(action.text or "")
        info = view.info
        state = self._state
        state.step_count += 1
        state.done = view.done
        state.episode_return = self.session.episode_return
        state.stop_reason = self.session.stop_reason
        return AgentGymObservation(
            done=view.done,
            reward=view.reward,
            messages=view.messages,
            task_id=state.task_id,
            task_index=state.task_index,
            turn=info["turn"],
            truncated=view.truncated and not view.terminated,
            stop_reason=state.stop_reason,
            reward_terms=dict(info["reward_terms"]),
            tool_calls=[
                {"name": c["name"], "arguments": c["arguments"], "ok": c["ok"], "content": c["content"]}
                for c in info["tool_calls"]
            ],
            metrics=self.session.episode_metrics() if view.done else None,
        )

    @property
    def state(self) -> AgentGymState:
        return self._state

    def close(self) -> None:
        self._closed = True
        self.session.close()

    def _check_open(self) -> None:
        # OpenEnv's reaper (0.3 and 0.10) closes an idle session's env and frees its slot, but a WebSocket handler
        # keeps its env and its socket open: without this check a client idle past the timeout would go on
        # playing on an env outside the count, so idling then returning would slip past the cap.
        if self._closed:
            raise RequestError(
                "this session was closed (idle past the server's session timeout); open a new one", status=410
            )


def make_app(
    env: EnvSource,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    observation_style: ObservationStyle | str = ObservationStyle.TOOL,
    max_concurrent_envs: int = 8,
    session_idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
) -> FastAPI:
    """The OpenEnv FastAPI app serving ``env`` (one env per session).

    Args:
        env: A registered id or a factory of a ToolEnv.
        env_kwargs: ``gymnasium.make`` kwargs of every session's env.
        observation_style: How text tool results come back (``"user"`` or ``"tool"``).
        max_concurrent_envs: The most sessions open at once; one more is refused (``CAPACITY_REACHED``).
        session_idle_timeout_s: Close a session after this many seconds without a request, so clients that
            opened one and vanished cannot hold every slot (OpenEnv's reaper checks every
            ``max(timeout / 4, 5)`` s); ``None`` keeps sessions until their client closes them.

    A client's mistake over HTTP (``/step`` without a session's reset, ``/reset`` with unknown arguments or
    a task that does not exist) is answered 409 or 422 with a ``detail`` message, never 500.
    """
    if max_concurrent_envs < 1 or (session_idle_timeout_s is not None and session_idle_timeout_s <= 0):
        raise ValueError(
            "max_concurrent_envs must be >= 1 and session_idle_timeout_s > 0 or None "
            f"(got {max_concurrent_envs}, {session_idle_timeout_s})"
        )
    kwargs = dict(env_kwargs or {})
    make_tool_env(env, **kwargs).close()  # fail here, not in the first session, on a bad id or kwargs

    def factory() -> AgentGymEnvironment:
        return AgentGymEnvironment(env, kwargs, observation_style)

    name = env if isinstance(env, str) else getattr(env, "__name__", "custom")
    limits = ConcurrencyConfig(max_concurrent_envs=max_concurrent_envs, session_timeout=session_idle_timeout_s)
    app = create_app(factory, AgentGymAction, AgentGymObservation, env_name=name, concurrency_config=limits)
    app.add_middleware(_ClosedSocketMiddleware)

    async def client_mistake(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestError)
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    app.add_exception_handler(RequestError, client_mistake)
    return app


class _ClosedSocketMiddleware:
    """Drop the ``WebSocketDisconnect`` OpenEnv raises when it closes a socket the client already closed.

    Its ``/ws`` handler always calls ``websocket.close()`` after the session
    ends; when the client hung up first (every normal ``close``), Starlette
    raises and uvicorn logs a spurious "Exception in ASGI application".
    """

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            pass  # the client is gone; nothing is left to tell it


def serve(env: EnvSource, host: str = "127.0.0.1", port: int = 8000, **app_kwargs: Any) -> None:
    """Serve ``env`` with uvicorn until interrupted (``python -m agent_gym.integrations.openenv``)."""
    uvicorn.run(make_app(env, **app_kwargs), host=host, port=port, log_level="warning")


@contextlib.contextmanager
def background_server(env: EnvSource, host: str = "127.0.0.1", port: int = 0, **app_kwargs: Any) -> Iterator[str]:
    """Run the server in a thread (``port=0``: a free port); yields its ``http://host:port`` URL."""
    with BackgroundServer(make_app(env, **app_kwargs), host, port, lifespan="on") as server:  # "on": the reaper
        yield f"http://{server.host}:{server.port}"


class AgentGymClient(EnvClient[AgentGymAction, AgentGymObservation, AgentGymState]):
    """Typed OpenEnv client for an :func:`make_app` server (``.sync()`` for blocking use)."""

    def _step_payload(self, action: AgentGymAction) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"}, exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[AgentGymObservation]:
        observation = AgentGymObservation(
            **payload.get("observation", {}), done=payload.get("done", False), reward=payload.get("reward")
        )
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> AgentGymState:
        return AgentGymState(**payload)


class AgentGymResourceSession(ResourceSession):
    """One rollout against an :func:`make_app` server, for OpenEnv harness adapters (and TRL's).

    Each tool call is one env step (so a model turn with three calls spends
    three of the env's turns); the ``answer`` tool submits the final answer.
    ``verify()`` submits the last assistant message as the final action when
    the episode is still running (a model that answers in text, not through
    the tool), then forwards the env's episode return as ``env_reward``.

    Args:
        base_url: The server's URL.
        task: A mapping with ``task_index`` or ``task_id`` selects the task;
            anything else (e.g. TRL's prompt) leaves the choice to ``seed``.
        seed: Seeds the env (TRL passes the GRPO group id, so a group shares a task).
        episode_id: Recorded on the server's state.
    """

    def __init__(self, base_url: str, task: Any = None, seed: int | None = None, episode_id: str | None = None):
        self._client = AgentGymClient(base_url=base_url).sync()
        self._client.connect()
        reset: dict[str, Any] = {"seed": seed, "episode_id": episode_id}
        if isinstance(task, Mapping):
            reset.update({k: task[k] for k in ("task_index", "task_id") if task.get(k) is not None})
        try:
            first = self._client.reset(**{k: v for k, v in reset.items() if v is not None}).observation
        except Exception:
            self._client.close()
            raise
        self._messages = list(first.messages)
        names = {t["function"]["name"] for t in first.tools}
        self._tools = [
            McpTool(
                name=t["function"]["name"],
                description=t["function"]["description"],
                input_schema=t["function"]["parameters"],
            )
            for t in first.tools
        ]
        self._answer_tool = ANSWER_TOOL not in names  # never shadow an env tool of that name
        if self._answer_tool:
            self._tools.append(
                McpTool(
                    name=ANSWER_TOOL,
                    description="Submit your final answer to the question; this ends the episode.",
                    input_schema={
                        "type": "object",
                        "properties": {"answer": {"type": "string"}},
                        "required": ["answer"],
                    },
                )
            )
        self._last: AgentGymObservation | None = None
        self.episode_return = 0.0
        self.done = False

    def initial_messages(self) -> list[dict[str, Any]]:
        return list(self._messages)

    def list_tools(self) -> list[McpTool]:
        return list(self._tools)

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if self.done:
            return ToolResult(data="Error: the episode is over.", done=True, error="episode over")
        if name == ANSWER_TOOL and self._answer_tool:
            action = AgentGymAction(answer=str(arguments.get("answer", "")))
        else:
            action = AgentGymAction(tool_name=name, arguments=dict(arguments))
        obs = self._apply(action)
        text = "\n".join(str(m.get("content", "")) for m in obs.messages)
        failed = [c["content"] for c in obs.tool_calls if not c["ok"]]
        return ToolResult(
            data=text,
            done=obs.done,
            metadata={
                "step_reward": obs.reward,
                "episode_return": self.episode_return,
                "reward_terms": obs.reward_terms,
                "stop_reason": obs.stop_reason,
            },
            error=failed[0] if failed else None,
        )

    def _apply(self, action: AgentGymAction) -> AgentGymObservation:
        obs = self._client.step(action).observation
        self.episode_return += float(obs.reward or 0.0)
        self.done = obs.done
        self._last = obs
        return obs

    def verify(self, transcript: list[dict[str, Any]], final_state: Any | None = None) -> VerifyResult:
        if not self.done:
            replies = [m for m in transcript if m.get("role") == "assistant"]
            if replies and not replies[-1].get("tool_calls"):
                self._apply(AgentGymAction(text=str(replies[-1].get("content") or "")))
        last = self._last
        metrics = dict(last.metrics or {}) if last is not None else {}
        return VerifyResult(
            env_reward=self.episode_return if last is not None else None,
            done=self.done,
            metrics=metrics,
            artifacts={"stop_reason": last.stop_reason if last is not None else None},
        )

    def close(self) -> None:
        self._client.close()


class AgentGymSessionFactory(ResourceSessionFactory):
    """Makes :class:`AgentGymResourceSession` objects against one server.

    For TRL: ``HarnessRolloutWorker(harness_session_factory=functools.partial(AgentGymSessionFactory, url),
    harness_adapter=MCPHarnessAdapter(), ...)``.

    Args:
        base_url: The server's URL.
        sampling: Accepted (and ignored) so loop-owning callers may pass it.
    """

    def __init__(self, base_url: str, sampling: Any = None):
        self.base_url = base_url

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> AgentGymResourceSession:
        return AgentGymResourceSession(self.base_url, task, seed=seed, episode_id=episode_id)


def main(argv: list[str] | None = None) -> None:
    """``python -m agent_gym.integrations.openenv ENV_ID [--host H] [--port P] [--max-concurrent-envs N]
    [--session-idle-timeout-s S]``."""
    parser = argparse.ArgumentParser(description="Serve an AgentR1 environment as an OpenEnv server")
    parser.add_argument("env_id", help="a registered id, e.g. AgentR1/HotpotQA-v0")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-concurrent-envs", type=int, default=8, help="the most open sessions (default 8)")
    parser.add_argument(
        "--session-idle-timeout-s",
        type=float,
        default=DEFAULT_IDLE_TIMEOUT_S,
        help=f"close a session idle this long, freeing its slot (default {DEFAULT_IDLE_TIMEOUT_S:g}; 0: never)",
    )
    args = parser.parse_args(argv)
    serve(
        args.env_id,
        args.host,
        args.port,
        max_concurrent_envs=args.max_concurrent_envs,
        session_idle_timeout_s=args.session_idle_timeout_s or None,
    )


if __name__ == "__main__":
    main()

"""A scripted OpenAI-compatible chat server: a stand-in model for testing adapters end to end.

Frameworks such as verifiers talk to the model over HTTP
(``POST /v1/chat/completions``). :func:`make_chat_app` serves a *policy* - a
function from the request's messages and tools to one assistant reply - with
FastAPI, so a framework's real client code, retries and tracing all run while
the replies stay deterministic. :func:`oracle_policy` replays the env's own
privileged oracle (``env.unwrapped.oracle_action()``) for chosen tasks, as text
or as native tool calls.

Example:
    >>> policy = oracle_policy("AgentR1/Calculator-v0", [0, 1])  # doctest: +SKIP
    >>> with background_uvicorn(make_chat_app(policy)) as url:  # doctest: +SKIP
    ...     pass  # point the framework's client at f"{url}/v1"
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, HTTPException

from agent_gym.integrations.session import EnvSession, make_tool_env
from agent_gym.retrieval.server import BackgroundServer

__all__ = ["ChatPolicy", "Reply", "background_uvicorn", "make_chat_app", "oracle_policy"]

Reply = dict[str, Any]
"""``{"content": str | None, "tool_calls": [{"name": str, "arguments": dict | str}, ...]}``."""

ChatPolicy = Callable[[list[dict[str, Any]], list[dict[str, Any]]], Reply]
"""``policy(messages, tools) -> Reply``: the next assistant turn."""


def make_chat_app(policy: ChatPolicy, model: str = "scripted") -> FastAPI:
    """A FastAPI app answering ``POST /v1/chat/completions`` (non-streaming) with ``policy``.

    ``app.state.requests`` counts the completions served.
    """
    app = FastAPI(title="scripted chat model")
    app.state.requests = 0
    ids = itertools.count()

    @app.post("/v1/chat/completions")
    def chat(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("stream"):
            raise HTTPException(status_code=400, detail="the scripted model serves non-streaming requests only")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise HTTPException(status_code=400, detail="'messages' must be a non-empty list")
        reply = policy(messages, list(body.get("tools") or []))
        app.state.requests += 1
        return _completion(reply, body.get("model") or model, next(ids))

    return app


def _completion(reply: Mapping[str, Any], model: str, number: int) -> dict[str, Any]:
    calls = [
        {
            "id": f"call_{number}_{i}",
            "type": "function",
            "function": {
                "name": c["name"],
                "arguments": c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"]),
            },
        }
        for i, c in enumerate(reply.get("tool_calls") or ())
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if calls:
        message["tool_calls"] = calls
    text = str(reply.get("content") or "")
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": max(1, len(text.split())), "total_tokens": 2},
    }


def oracle_policy(
    env_id: str, task_indices: Iterable[int], *, seed: int | None = 0, native: bool = True, **env_kwargs: Any
) -> ChatPolicy:
    """Replay the env's oracle for these tasks, keyed by each task's question.

    The oracle runs once per task here (same env, kwargs and seed as the
    episodes it will answer), and the policy then returns its ``k``-th action
    for the ``k``-th assistant turn of the conversation whose user prompt
    matches. With ``native=True`` tool calls become API ``tool_calls`` (the
    final answer stays text); otherwise every action is text.
    """
    session = EnvSession(make_tool_env(env_id, **env_kwargs))
    scripts: dict[str, list[str]] = {}
    for index in task_indices:
        messages, _ = session.reset(seed=seed, task_index=int(index))
        actions = []
        while not session.done:
            actions.append(session.base.oracle_action())
            session.step(actions[-1])
        scripts[_question(messages)] = actions
    parser = session.base.parser
    session.close()

    def policy(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        script = scripts.get(_question(messages))
        if script is None:
            raise HTTPException(status_code=400, detail="no oracle script for this question")
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        action = script[min(turn, len(script) - 1)]
        parsed = parser.parse(action)
        if native and tools and parsed.tool_calls:
            return {
                "content": None,
                "tool_calls": [{"name": c.name, "arguments": dict(c.arguments)} for c in parsed.tool_calls],
            }
        return {"content": action, "tool_calls": []}

    return policy


def _question(messages: Sequence[Mapping[str, Any]]) -> str:
    return next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")


@contextlib.contextmanager
def background_uvicorn(app: Any, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve an ASGI app from a thread (``port=0``: a free port); yields ``http://host:port``.

    A thin wrapper of :class:`agent_gym.retrieval.server.BackgroundServer` that yields the base URL.
    """
    with BackgroundServer(app, host, port) as server:
        yield f"http://{server.host}:{server.port}"

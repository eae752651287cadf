"""OpenEnv adapter: a real server on a free port, driven by OpenEnv's own clients and harness."""

from __future__ import annotations

import time

import gymnasium as gym
import httpx
import pytest

pytest.importorskip("openenv.core")
from openenv import GenericEnvClient
from openenv.core.harness import MCPHarnessAdapter, ModelStepResult, build_harness_rollout_func
from openenv.core.llm_client import LLMResponse, ToolCall

from agent_gym.core.parsing import make_parser
from agent_gym.integrations.openenv import (
    ANSWER_TOOL,
    AgentGymAction,
    AgentGymClient,
    AgentGymSessionFactory,
    background_server,
)
from tests.agent_gym.integrations.conftest import native_oracle_run
from tests.conftest import LookupEnv


def test_every_env_served_and_stepped_by_the_typed_client(env_id):
    with background_server(env_id) as url, AgentGymClient(base_url=url).sync() as client:
        for task_index in (0, 4):
            native = native_oracle_run(env_id, task_index, seed=3)
            first = client.reset(seed=3, task_index=task_index).observation
            assert first.messages == native.messages and first.tools and not first.done
            results = [client.step(AgentGymAction(text=a)) for a in native.actions]
            assert [r.reward for r in results] == pytest.approx(native.rewards)
            assert [r.done for r in results][-1] and not any(r.done for r in results[:-1])
            last = results[-1].observation
            assert last.stop_reason == native.stop_reason and last.metrics == pytest.approx(native.metrics)
            state = client.state()
            assert state.episode_return == pytest.approx(native.episode_return)
            assert state.step_count == len(native.actions) and state.task_index == task_index


def test_http_mistakes_are_4xx_with_a_message_not_500():
    """OpenEnv's HTTP /step builds a fresh, never-reset env per request; both answered 500 before (issue 25.2)."""
    with background_server("AgentR1/Calculator-v0") as url:
        step = httpx.post(f"{url}/step", json={"action": {"answer": "1"}}, timeout=10)
        assert (
            step.status_code == 409 and "/ws" in step.json()["detail"] and "send reset first" in step.json()["detail"]
        )
        bad = httpx.post(f"{url}/reset", json={"seed": 0, "difficulty": "hard"}, timeout=10)
        assert bad.status_code == 422 and "unknown reset arguments ['difficulty']" in bad.json()["detail"]
        missing = httpx.post(f"{url}/reset", json={"task_id": "calc-0-999999999"}, timeout=10)
        assert missing.status_code == 422 and "cannot reset" in missing.json()["detail"]
        assert httpx.post(f"{url}/reset", json={"seed": 0, "task_index": 1}, timeout=10).status_code == 200


def _create_session(url: str) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
    return httpx.post(f"{url}/mcp", json=body, timeout=10).json()


def test_abandoned_sessions_are_reaped_and_free_their_slots():
    """Eight session/create requests with no connection kept locked the server for good (issue 25.2)."""
    with background_server("AgentR1/Calculator-v0", max_concurrent_envs=2, session_idle_timeout_s=1.0) as url:
        assert all("session_id" in _create_session(url)["result"] for _ in range(2))  # then the clients vanish
        full = _create_session(url)
        assert "error" in full and full["error"]["data"] == {"active_sessions": 2, "max_sessions": 2}
        deadline = time.monotonic() + 15  # the reaper looks every max(1 / 4, 5) s
        while "error" in _create_session(url):
            assert time.monotonic() < deadline, "idle sessions were never closed"
            time.sleep(0.5)
    with pytest.raises(ValueError, match="session_idle_timeout_s > 0 or None"):
        background_server("AgentR1/Calculator-v0", session_idle_timeout_s=0).__enter__()


def test_silent_websocket_clients_are_reaped_and_cannot_play_on_past_the_cap():
    """Eight silent WebSocket clients held every slot (issue 25.2). OpenEnv's reaper frees the slot but its
    socket handler keeps the env, so a client that idled and came back would play outside the count."""
    import json

    from websockets.sync.client import connect

    def reset(ws, task_index: int) -> dict:
        ws.send(json.dumps({"type": "reset", "data": {"task_index": task_index}}))
        return json.loads(ws.recv(timeout=10))

    with background_server("AgentR1/Calculator-v0", max_concurrent_envs=2, session_idle_timeout_s=1.0) as url:
        ws_url = url.replace("http", "ws", 1) + "/ws"
        silent = [connect(ws_url) for _ in range(2)]  # open, then say nothing
        with connect(ws_url) as third:
            refused = json.loads(third.recv(timeout=10))
        assert refused["data"]["code"] == "CAPACITY_REACHED" and refused["data"]["active_sessions"] == 2
        deadline = time.monotonic() + 15  # the reaper looks every max(1 / 4, 5) s
        while True:
            with connect(ws_url) as newcomer:
                try:
                    reply = json.loads(newcomer.recv(timeout=0.5))  # a full server says so at once and closes
                except TimeoutError:
                    reply = reset(newcomer, 1)
            if reply["type"] == "observation":
                break
            assert reply["data"]["code"] == "CAPACITY_REACHED" and time.monotonic() < deadline, reply
            time.sleep(0.5)
        assert reply["data"]["observation"]["task_index"] == 1
        for ws in silent:  # the reaped clients speak again: refused, not served on an env outside the cap
            reply = reset(ws, 0)
            assert reply["type"] == "error" and "session was closed" in reply["data"]["message"], reply
            ws.close()


def test_tool_call_and_answer_actions_are_written_in_the_envs_format():
    with background_server("AgentR1/HotpotQA-v0", env_kwargs={"action_format": "tags"}) as url:
        with AgentGymClient(base_url=url).sync() as client:
            client.reset(seed=0, task_index=0)
            step = client.step(AgentGymAction(tool_name="search", arguments={"query": "Odile Marchetti"}))
            assert step.reward == pytest.approx(-0.01)  # the default (gated) preset: evidence is paid on the answer
            assert step.observation.tool_calls[0]["ok"] and step.observation.messages[0]["role"] == "tool"
            final = client.step(AgentGymAction(answer="River Lisse"))
            assert final.done and final.observation.reward_terms["answer"] == 1.0


def test_errors_come_back_as_errors_and_the_session_survives():
    with background_server("AgentR1/Calculator-v0") as url, AgentGymClient(base_url=url).sync() as client:
        with pytest.raises(RuntimeError, match="no episode to step: send reset first"):
            client.step(AgentGymAction(answer="1"))
        client.reset(seed=0, task_index=0)
        with pytest.raises(RuntimeError, match="unknown reset arguments"):
            client.reset(seed=0, task_index=0, difficulty="hard")
        with GenericEnvClient(base_url=url).sync() as raw:
            raw.reset(seed=0, task_index=0)
            with pytest.raises(RuntimeError, match="Invalid message"):
                raw.step({"text": "a", "answer": "b"})  # both fields: the server's validation refuses it
            assert raw.step({"answer": "0"}).done
        client.reset(seed=0, task_index=0)
        assert client.step(AgentGymAction(answer="0")).done
        with pytest.raises(RuntimeError, match="episode is over"):
            client.step(AgentGymAction(answer="0"))


def test_concurrent_sessions_are_isolated_and_the_generic_client_works():
    native0 = native_oracle_run("AgentR1/SQLite-v0", 0)
    native5 = native_oracle_run("AgentR1/SQLite-v0", 5)
    with background_server("AgentR1/SQLite-v0") as url:
        a, b = GenericEnvClient(base_url=url).sync(), AgentGymClient(base_url=url).sync()
        with a, b:
            a.reset(seed=0, task_index=0)
            b.reset(seed=0, task_index=5)
            rewards_a, rewards_b = [], []
            for i in range(max(len(native0.actions), len(native5.actions))):
                if i < len(native0.actions):
                    rewards_a.append(a.step({"text": native0.actions[i]}).reward)
                if i < len(native5.actions):
                    rewards_b.append(b.step(AgentGymAction(text=native5.actions[i])).reward)
            assert rewards_a == pytest.approx(native0.rewards) and rewards_b == pytest.approx(native5.rewards)
        health = httpx.get(f"{url}/health", timeout=10).json()
        schema = httpx.get(f"{url}/schema", timeout=10).json()
        assert health["status"] == "healthy"
        assert {"text", "tool_name", "arguments", "answer"} <= set(schema["action"]["properties"])


def scripted_step(replies):
    """A white-box ``ModelStep`` that replays chat replies (as TRL's would after sampling)."""
    script = iter(replies)
    seen_tools = []

    def step(messages, tools, sampling):
        seen_tools.append([t.name for t in tools])
        reply = next(script)
        calls = [ToolCall(id=f"c{i}", name=n, args=a) for i, (n, a) in enumerate(reply.get("calls", []))]
        return ModelStepResult(response=LLMResponse(content=reply.get("content", ""), tool_calls=calls))

    return step, seen_tools


def test_trl_style_harness_rollout_forwards_the_env_return():
    native = native_oracle_run("AgentR1/HotpotQA-v0", 0, seed=7)
    with background_server("AgentR1/HotpotQA-v0") as url:
        factory = AgentGymSessionFactory(url)
        session = factory.create({"task_index": 0}, seed=7, episode_id="ep-1")
        assert session.initial_messages() == native.messages
        step, seen = scripted_step(
            [
                {"calls": [("search", {"query": "Odile Marchetti"})]},
                {"calls": [("search", {"query": "Varnholt"})]},
                {"content": "<answer>River Lisse</answer>"},
            ]
        )
        result = MCPHarnessAdapter().run_white_box(step, session)
        verify = session.verify(result.messages)
        session.close()
        assert seen[0] == ["search", ANSWER_TOOL]
        steps = [e.result.metadata["step_reward"] for e in result.tool_trace]
        assert steps == pytest.approx([-0.01, -0.01])  # the default (gated) preset: step costs
        assert verify.env_reward == pytest.approx(native.episode_return) and verify.done
        assert verify.metrics["answer_f1"] == 1.0


def oracle_as_tool_calls(run, parser):
    """The oracle's actions as native tool calls; the final answer through the ``answer`` tool."""
    replies = []
    for action in run.actions:
        parsed = parser.parse(action)
        calls = [(c.name, dict(c.arguments)) for c in parsed.tool_calls] or [(ANSWER_TOOL, {"answer": parsed.answer})]
        replies.append({"calls": calls})
    return replies


def test_answer_tool_and_openenvs_trl_rollout_builder():
    parser = make_parser("tool_call")
    native = {i: native_oracle_run("AgentR1/Calculator-v0", i) for i in (1, 2)}
    replies = {run.messages[-1]["content"]: oracle_as_tool_calls(run, parser) for run in native.values()}

    def model_step_builder(trainer, session):
        return scripted_step(replies[session.initial_messages()[-1]["content"]])[0]

    with background_server("AgentR1/Calculator-v0") as url:
        rollout = build_harness_rollout_func(
            session_factory=AgentGymSessionFactory(url),
            harness_adapter=MCPHarnessAdapter(),
            model_step_builder=model_step_builder,
        )
        out = rollout([{"task_index": 1}, {"task_index": 2}], trainer=None)
    assert out["env_reward"] == pytest.approx([native[1].episode_return, native[2].episode_return])
    assert [m["answer_em"] for m in out["verify_metrics"]] == [1.0, 1.0]


def test_a_users_own_tool_env_is_served():
    with background_server(lambda: gym.wrappers.TimeLimit(LookupEnv(), 3)) as url:
        with AgentGymClient(base_url=url).sync() as client:
            first = client.reset(seed=0, task_index=3).observation
            assert first.messages[-1]["content"] == "What is the capital of Peru?"
            step = client.step(AgentGymAction(tool_name="lookup", arguments={"country": "Peru"}))
            assert step.observation.messages[0]["content"] == "The capital of Peru is Lima."
            assert client.step(AgentGymAction(answer="Lima")).done


def test_turn_limit_is_reported_as_truncation_not_termination():
    with background_server("AgentR1/HotpotQA-v0", env_kwargs={"max_episode_steps": 2}) as url:
        with AgentGymClient(base_url=url).sync() as client:
            client.reset(seed=0, task_index=0)
            search = AgentGymAction(tool_name="search", arguments={"query": "nothing relevant"})
            first, second = client.step(search), client.step(search)
            assert not first.done and not first.observation.truncated
            assert second.done and second.observation.truncated and second.observation.stop_reason == "max_turns"
            assert second.observation.metrics == {"turns": 2.0}
            client.reset(seed=0, task_index=0)
            answered = client.step(AgentGymAction(answer="River Lisse"))
            assert answered.done and not answered.observation.truncated

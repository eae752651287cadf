"""verifiers adapter, driven through verifiers' own eval runner and ``vf-eval`` against a scripted model server.

The model is a FastAPI stand-in speaking the OpenAI chat API; everything between
it and our env - verifiers' config resolution, plugin loading, interception
server, eval client, trace building and scoring - is the real library.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

pytest.importorskip("verifiers.v1")
import verifiers.v1 as vf
from fastapi import HTTPException
from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.configs.cli.eval import EvalConfig

from agent_gym.integrations.scripted import background_uvicorn, make_chat_app, oracle_policy
from agent_gym.integrations.verifiers import AgentGymTaskset, load_environment
from tests.agent_gym.integrations.conftest import native_oracle_run
from tests.conftest import LookupEnv

TASKS = [0, 2]


def vf_eval(policy, tmp_path: Path, taskset: dict[str, Any], agent: dict[str, Any] | None = None) -> list[vf.Trace]:
    """Run verifiers' eval runner against a scripted model; returns every trace."""
    app = make_chat_app(policy)
    with background_uvicorn(app) as url:
        config = EvalConfig.model_validate(
            {
                "env": {"taskset": {"id": "agent-r1-gym", **taskset}, **({"agent": agent} if agent else {})},
                "model": "scripted",
                "client": {"base_url": f"{url}/v1", "api_key_var": "SCRIPTED_MODEL_KEY"},
                "push": False,
                "rich": None,
                "output_dir": str(tmp_path),
            }
        )
        episodes = asyncio.run(run_eval(config))
    return [trace for episode in episodes for trace in episode.traces]


def assert_matches_native(trace: vf.Trace, env_id: str, **env_kwargs: Any) -> None:
    native = native_oracle_run(env_id, trace.task.data.task_index, seed=trace.task.data.seed, **env_kwargs)
    weights = {t.name: t.weight for t in gym.make(env_id, **env_kwargs).unwrapped.rubric.terms}
    assert trace.ok, trace.errors
    assert trace.reward == pytest.approx(native.episode_return)
    assert {k: r.score for k, r in trace.rewards.items()} == pytest.approx(native.raw_totals)
    assert {k: r.weight for k, r in trace.rewards.items()} == pytest.approx(weights)
    assert trace.metrics == pytest.approx({**native.metrics, "answered": 1.0})
    assert trace.num_turns == len(native.actions)


@pytest.mark.parametrize("native_tools", [True, False], ids=["native-tool-calls", "text-protocol"])
def test_every_env_evaluated_by_verifiers_scores_like_the_native_env(env_id, native_tools, tmp_path):
    policy = oracle_policy(env_id, TASKS, native=native_tools)
    traces = vf_eval(
        policy, tmp_path, {"env_id": env_id, "task_indices": TASKS}, {"harness": {"native_tools": native_tools}}
    )
    assert sorted(t.task.data.task_index for t in traces) == TASKS
    for trace in traces:
        assert_matches_native(trace, env_id)
        roles = [m.role for m in trace.branches[-1].messages]
        assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
        assert ("tool" in roles) == native_tools  # native calls get tool messages; text calls a user turn


def test_reweighting_a_rubric_term_from_verifiers_config(tmp_path):
    policy = oracle_policy("AgentR1/HotpotQA-v0", [0])
    taskset = {"env_id": "AgentR1/HotpotQA-v0", "task_indices": [0], "task": {"rewards": {"answer": {"weight": 2.0}}}}
    (trace,) = vf_eval(policy, tmp_path, taskset)
    assert trace.rewards["answer"].weight == 2.0
    assert trace.reward == pytest.approx(1.18 + 1.0)  # the episode return plus one more answer point


def test_a_rambling_model_hits_the_turn_limit_with_format_penalties(tmp_path):
    (trace,) = vf_eval(
        lambda messages, tools: {"content": "Let me think about it."},
        tmp_path,
        {"env_id": "AgentR1/Calculator-v0", "task_indices": [0], "env_kwargs": {"max_episode_steps": 3}},
    )
    assert trace.ok and trace.num_turns == 3
    assert trace.rewards["format"].score == -3.0 and trace.rewards["answer"].score == 0.0
    assert trace.metrics == {"turns": 3.0, "answered": 0.0}  # no answer scores: absent, not zero
    feedback = [m for m in trace.branches[-1].messages if m.role == "user"][1:]
    assert len(feedback) == 2 and all(str(m.content).startswith("Format error") for m in feedback)


def test_a_failing_model_endpoint_fails_the_trace_not_the_eval(tmp_path):
    def broken(messages, tools):
        raise HTTPException(status_code=400, detail="model refuses")

    (trace,) = vf_eval(broken, tmp_path, {"env_id": "AgentR1/Calculator-v0", "task_indices": [1]})
    assert not trace.ok and trace.errors
    assert trace.reward == 0.0 and all(r is None for r in trace.rewards.values())  # unscored, not scored 0


def test_a_users_own_tool_env(tmp_path):
    gym.register("test/VfLookup-v0", entry_point=LookupEnv, max_episode_steps=3)
    policy = oracle_policy("test/VfLookup-v0", [0, 3])
    traces = vf_eval(policy, tmp_path, {"env_id": "test/VfLookup-v0", "task_indices": [0, 3]})
    assert [t.task.data.id for t in sorted(traces, key=lambda t: t.task.data.task_index)] == ["q0", "q3"]
    for trace in traces:
        assert_matches_native(trace, "test/VfLookup-v0")


def test_load_environment_builds_the_env_and_its_taskset():
    env = load_environment("AgentR1/MuSiQue-v0", task_indices=[1, 4], seed=5)
    assert isinstance(env.taskset, AgentGymTaskset)
    tasks = list(env.taskset)
    assert [t.data.task_index for t in tasks] == [1, 4] and tasks[0].data.seed == 5
    assert tasks[0].data.prompt == native_oracle_run("AgentR1/MuSiQue-v0", 1).messages[-1]["content"]
    assert (
        len(list(load_environment("AgentR1/HotpotQA-v0").taskset))
        == gym.make("AgentR1/HotpotQA-v0").unwrapped.num_tasks()
    )


@pytest.mark.slow  # ~20 s (vf-eval in a subprocess); CI runs it after the default suite
def test_the_vf_eval_command_line(tmp_path):
    policy = oracle_policy("AgentR1/SQLite-v0", [0, 1])
    with background_uvicorn(make_chat_app(policy)) as url:
        command = [
            sys.executable, "-c", "from verifiers.v1.cli.eval.main import main; main()", "agent-r1-gym",
            "--env.taskset.env-id", "AgentR1/SQLite-v0", "--env.taskset.task-indices", "[0, 1]",
            "-m", "scripted", "--client.base-url", f"{url}/v1", "--client.api-key-var", "SCRIPTED_MODEL_KEY",
            "--no-push", "--no-rich", "-o", str(tmp_path), "--run.dir", "cli",
        ]  # fmt: skip
        out = subprocess.run(
            command, capture_output=True, text=True, timeout=240, env={**os.environ, "NO_COLOR": "1"},
        )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    traces = [json.loads(line) for line in (tmp_path / "cli" / "traces.jsonl").read_text().splitlines()]
    rows = [trace for episode in traces for trace in episode["traces"]]
    by_index = {t["task"]["data"]["task_index"]: t for t in rows}
    for index in (0, 1):
        native = native_oracle_run("AgentR1/SQLite-v0", index)
        rewards = by_index[index]["rewards"]
        assert sum(r["score"] * r["weight"] for r in rewards.values()) == pytest.approx(native.episode_return)

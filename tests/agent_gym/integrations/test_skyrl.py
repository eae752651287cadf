"""SkyRL-gym adapter, driven through ``skyrl_gym.make`` and SkyRL's init/step/get_metrics/close loop."""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium as gym
import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")
from omegaconf import DictConfig  # noqa: E402  (a skyrl-gym dependency)

from agent_gym.integrations.skyrl import (  # noqa: E402
    AgentGymTextEnv,
    register_skyrl_env,
    register_skyrl_envs,
    skyrl_dataset_rows,
)
from tests.agent_gym.integrations.conftest import ENV_IDS, native_oracle_run  # noqa: E402
from tests.conftest import REPO_ROOT, LookupEnv  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def registered() -> list[str]:
    return register_skyrl_envs()


def skyrl_loop(env, actions):
    """What SkyRL's generator does with an env: init, step until done, metrics, close."""
    prompt, init_meta = env.init([])
    outputs = []
    for action in actions:
        out = env.step(action)
        outputs.append(out)
        if out["done"]:
            break
    metrics = env.get_metrics()
    env.close()
    return prompt, init_meta, outputs, metrics


def test_every_registered_env_is_made_by_skyrl_and_replays_the_native_episode(registered, env_id):
    assert env_id in registered and env_id in skyrl_gym.registry
    for task_index in (0, 3):
        native = native_oracle_run(env_id, task_index)
        env = skyrl_gym.make(env_id, env_config=DictConfig({}), extras={"task_index": task_index, "max_turns": 20})
        assert isinstance(env, AgentGymTextEnv)
        prompt, meta, outputs, metrics = skyrl_loop(env, native.actions)
        assert prompt == native.messages
        assert [o["reward"] for o in outputs] == pytest.approx(native.rewards)
        assert [o["done"] for o in outputs] == [False] * (len(outputs) - 1) + [True]
        assert outputs[-1]["observations"] == []
        assert outputs[-1]["metadata"]["stop_reason"] == native.stop_reason
        assert metrics["episode_return"] == pytest.approx(native.episode_return)
        for name, total in native.raw_totals.items():
            weight = next(t.weight for t in env.session.base.rubric.terms if t.name == name)
            assert metrics[f"reward/{name}"] == pytest.approx(weight * total)
        assert {k: metrics[k] for k in native.metrics} == pytest.approx(native.metrics)


def test_observations_are_one_user_message_by_default_and_tool_messages_on_request():
    env = skyrl_gym.make("AgentR1/HotpotQA-v0", env_config={}, extras={"task_index": 0})
    env.init([])
    out = env.step(env.session.base.oracle_action())
    assert [m["role"] for m in out["observations"]] == ["user"]
    assert out["observations"][0]["content"].startswith("<tool_response>\nDoc 1 (Title: Odile Marchetti)")
    env = skyrl_gym.make("AgentR1/HotpotQA-v0", env_config={"observation_style": "tool"}, extras={"task_index": 0})
    env.init([])
    out = env.step(env.session.base.oracle_action())
    assert [(m["role"], m["name"]) for m in out["observations"]] == [("tool", "search")]


def test_skyrl_max_turns_ends_the_episode_before_the_env_limit():
    env = skyrl_gym.make("AgentR1/HotpotQA-v0", env_config={}, extras={"task_index": 0, "max_turns": 2})
    env.init([])
    search = env.session.base.parser.format_call("search", {"query": "nothing relevant"})
    first, second = env.step(search), env.step(search)
    assert not first["done"] and second["done"]
    assert second["metadata"]["stop_reason"] == "max_turns"
    assert second["observations"] == []
    metrics = env.get_metrics()
    assert "answer_f1" not in metrics and metrics["turns"] == 2.0  # no answer: no answer score at all


def test_env_config_reaches_gymnasium_make_and_bad_keys_are_refused():
    env = skyrl_gym.make(
        "AgentR1/HotpotQA-v0", env_config=DictConfig({"env_kwargs": {"reward": "outcome"}}), extras={"task_index": 0}
    )
    assert [t.name for t in env.session.base.rubric.terms] != [
        t.name for t in gym.make("AgentR1/HotpotQA-v0").unwrapped.rubric.terms
    ]
    with pytest.raises(ValueError, match="env_kwargs"):
        skyrl_gym.make("AgentR1/HotpotQA-v0", env_config={"reward": "outcome"}, extras={})
    with pytest.raises(TypeError, match="task_index"):
        skyrl_gym.make("AgentR1/HotpotQA-v0", env_config={}, extras={"task_index": "zero"})


def test_malformed_text_is_a_penalised_step_not_a_crash():
    env = skyrl_gym.make("AgentR1/Calculator-v0", env_config={}, extras={"task_index": 0})
    env.init([])
    out = env.step("\x00 not an action {")
    assert not out["done"] and out["reward"] < 0
    assert out["metadata"]["format_errors"]
    assert out["observations"][0]["content"].startswith("Format error")


def test_a_users_own_tool_env_registers_through_a_factory():
    skyrl_id = register_skyrl_env(lambda: gym.wrappers.TimeLimit(LookupEnv(), 4), "test/Lookup-v0")
    env = skyrl_gym.make(skyrl_id, env_config={}, extras={"task_index": 2})
    prompt, meta = env.init([])
    assert prompt[-1]["content"] == "What is the capital of Kenya?" and meta["task_id"] == "q2"
    assert env.step('<tool_call>{"name": "lookup", "arguments": {"country": "Kenya"}}</tool_call>')["reward"] > 0
    assert env.step("<answer>Nairobi</answer>")["done"]
    with pytest.raises(ValueError, match="skyrl_id"):
        register_skyrl_env(LookupEnv)


def test_dataset_rows_carry_the_prompt_init_returns():
    rows = skyrl_dataset_rows("AgentR1/MuSiQue-v0", [0, 2])
    assert [r["task_index"] for r in rows] == [0, 2] and rows[0]["env_class"] == "AgentR1/MuSiQue-v0"
    env = skyrl_gym.make(rows[1]["env_class"], env_config={}, extras={k: rows[1][k] for k in ("task_index",)})
    prompt, _ = env.init(rows[1]["prompt"])
    assert prompt == rows[1]["prompt"] and not env.prompt_replaced


def test_all_registry_ids_are_registered_once(registered):
    assert registered[: len(ENV_IDS)] == ENV_IDS  # then any id registered with register_env so far
    assert register_skyrl_envs()[: len(ENV_IDS)] == ENV_IDS  # idempotent


USERS_SCRIPT = """
import skyrl_gym

import units_env  # the user's module: register_env("Newcomer/Units-v0", ...)
from agent_gym.integrations.skyrl import register_skyrl_envs, skyrl_dataset_rows

register_skyrl_envs()
env = skyrl_gym.make("Newcomer/Units-v0", env_config={}, extras={"task_index": 1, "max_turns": 8})
prompt, _ = env.init([])
print(prompt[-1]["role"], env.step("no tool call")["reward"] < 0)
row = skyrl_dataset_rows("units_env:Newcomer/Units-v0", [0])[0]  # a module:id, as agent-r1 takes it
env = skyrl_gym.make(row["env_class"], env_config={}, extras={"task_index": row["task_index"]})
print(env.init(row["prompt"])[0] == row["prompt"])
"""


def test_a_users_own_env_follows_the_documented_steps(tmp_path):
    """integrations.md's SkyRL steps on one's own env (issue 41.5): ``register_skyrl_envs()`` registered only
    the ``AgentR1/*`` ids, so ``skyrl_gym.make`` did not know an id registered with ``register_env``. Run as a
    user's script in their own folder, beside their module."""
    (tmp_path / "units_env.py").write_text(
        "from agent_gym import register_env\n"
        'register_env("Newcomer/Units-v0", "tests.conftest:LookupEnv", max_episode_steps=3)\n'
    )
    (tmp_path / "train_skyrl.py").write_text(USERS_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "train_skyrl.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["user", "True", "True"]


def test_an_unknown_id_is_one_line_naming_it():
    with pytest.raises(ValueError, match=r"register_skyrl_env: 'no_such_module_here:X/Y-v0': No module named"):
        register_skyrl_envs(["no_such_module_here:X/Y-v0"])
    with pytest.raises(ValueError, match=r"'AgentR1/HotpotQ-v0': .*Did you mean: `HotpotQA`"):
        register_skyrl_env("AgentR1/HotpotQ-v0")

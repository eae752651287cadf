"""RayEnvPool on a local Ray (2 CPUs): the same trajectories as in-process envs, live envs shipped, clear failures."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import data_equivalence

from agent_trainers.policies import ScriptedPolicy, TransformersPolicy
from agent_trainers.rollout import RolloutConfig, check_trajectory, ray_pool, rollout, trajectory_to_dict
from agent_trainers.rollout.ray_pool import RayEnvPool
from tests.agent_trainers.rollout import ray_envs

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (extra `ray`)")

ROOT = Path(__file__).resolve().parents[3]
HOTPOT = "AgentR1/HotpotQA-v0"


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray with 2 CPUs; its workers can import ``tests`` (for ``setup=ray_envs.register``)."""
    import ray

    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), before) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray_pool._SHARED.clear()  # its actors end with this Ray instance
    ray.shutdown()
    if before is None:
        os.environ.pop("PYTHONPATH")
    else:
        os.environ["PYTHONPATH"] = before


@pytest.fixture(scope="module")
def pool(local_ray):
    """Two actors (two threads each) shared by the module's tests: starting actors is the slow part."""
    with RayEnvPool(num_actors=2, max_concurrency=2, setup=ray_envs.register) as p:
        yield p


def search_then_answer(tok):
    """Searches the question's text (tool noise and retrieval matter), then answers with the first result's title."""

    def respond(ids):
        text = tok.decode(ids)
        if "<|im_start|>tool" not in text:
            question = text.split("Question:")[-1].split("<|im_end|>")[0].strip()
            return f'<tool_call>\n{{"name": "search", "arguments": {{"query": "{question[:60]}"}}}}\n</tool_call>'
        return "<answer>" + text.split("<|im_start|>tool")[-1][12:40].replace("<", " ") + "</answer>"

    return ScriptedPolicy(tok, respond)


def test_trajectories_equal_the_in_process_ones(pool, smollm2_tokenizer):
    config = RolloutConfig(max_turns=3, max_new_tokens_per_turn=64, max_total_tokens=4096)
    kwargs = {"split": "train", "tool_noise": {"truncate_prob": 0.6, "failure_prob": 0.2}}  # seeds matter
    args = {"task_indices": [0, 3, 5], "group_size": 2, "seed": 11, "env_kwargs": kwargs, "config": config}
    local = rollout(search_then_answer(smollm2_tokenizer), HOTPOT, **args)
    remote = rollout(search_then_answer(smollm2_tokenizer), HOTPOT, make_env=pool.make, **args)
    assert pool.sizes() == [0, 0], "every env is closed and dropped when its episode ends"
    assert [trajectory_to_dict(t) for t in remote] == [trajectory_to_dict(t) for t in local]
    assert all(len(t.turns) == 2 and t.terminated for t in local)
    results = [t.messages[3]["content"] for t in local]
    assert any(results[i] != results[i + 1] for i in range(0, 6, 2)), "group members' tool noise differs"
    for t in remote:
        check_trajectory(t, smollm2_tokenizer)


def test_sampled_rollouts_equal_too(pool, tiny_model, one_thread):
    config = RolloutConfig(max_turns=2, max_new_tokens_per_turn=8, max_total_tokens=2048)
    args = {"task_indices": [1, 2], "group_size": 2, "seed": 4, "config": config}
    local = rollout(TransformersPolicy(*tiny_model, seed=9), HOTPOT, **args)
    remote = rollout(TransformersPolicy(*tiny_model, seed=9), HOTPOT, make_env=pool.make, **args)
    assert [trajectory_to_dict(t) for t in remote] == [trajectory_to_dict(t) for t in local]


def test_a_live_env_ships_mid_episode_and_continues_identically(pool):
    env = gym.make("AgentR1/Calculator-v0")
    env.reset(seed=3, options={"task_index": 2})
    call = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "2 * (3 + 4)"}}\n</tool_call>'
    env.step(call)
    remote = pool.put(env)
    for action in (call, "<answer>14</answer>"):
        assert data_equivalence(remote.step(action), env.step(action))
    assert remote.spec.id == "AgentR1/Calculator-v0" and remote.unwrapped.action_format == "tool_call"
    remote.close()


def test_setup_registers_ids_in_the_actors_and_time_outs_end_episodes(pool, smollm2_tokenizer):
    ray_envs.register()
    config = RolloutConfig(tool_timeout_s=0.2)
    policy = ScriptedPolicy(smollm2_tokenizer, lambda ids: "<answer>Paris</answer>")
    fast = rollout(policy, ray_envs.SLOW_ID, task_indices=[0, 1], env_kwargs={"latency_s": 0.0}, make_env=pool.make)
    slow = rollout(policy, ray_envs.SLOW_ID, task_indices=[0], env_kwargs={"latency_s": 2.0}, config=config,
                   make_env=pool.make)  # fmt: skip
    assert [t.stop_reason for t in fast] == ["answer", "answer"] and fast[0].metrics["answer_em"] == 1.0
    assert slow[0].stop_reason == "tool_timeout" and slow[0].truncated


@pytest.mark.slow  # ~14 s each (a pool of its own); CI runs it after the default suite
def test_a_killed_actor_ends_only_its_episodes_and_the_others_come_back(local_ray, smollm2_tokenizer):
    """``kill -9`` of one actor made rollout() raise ActorDiedError from clean-up, losing all (issue 25.5)."""
    call = '<tool_call>\n{"name": "lookup", "arguments": {"country": "France"}}\n</tool_call>'
    seen_tool = lambda ids: "<|im_start|>tool" in smollm2_tokenizer.decode(ids)  # noqa: E731
    policy = ScriptedPolicy(smollm2_tokenizer, lambda ids: "<answer>Paris</answer>" if seen_tool(ids) else call)
    with RayEnvPool(num_actors=2, setup=ray_envs.register) as pool:  # task 0 on actor 0 (dies), task 1 on actor 1
        start = time.monotonic()
        dead, alive = rollout(policy, ray_envs.FAULTY_ID, task_indices=[0, 1], make_env=pool.make,
                              config=RolloutConfig(tool_timeout_s=20))  # fmt: skip
        assert time.monotonic() - start < 20
    assert dead.stop_reason == "env_error" and "ActorDiedError" in dead.error and dead.truncated
    assert alive.stop_reason == "answer" and len(alive.turns) == 2
    check_trajectory(alive, smollm2_tokenizer)


@pytest.mark.slow  # ~14 s each (a pool of its own); CI runs it after the default suite
def test_a_hung_step_does_not_time_out_a_healthy_episode_on_the_same_actor(local_ray, smollm2_tokenizer):
    """With one thread per actor, a step hung on one env held up every env of that actor (issue 25.5)."""
    policy = ScriptedPolicy(smollm2_tokenizer, lambda ids: "<answer>Tokyo</answer>")
    with RayEnvPool(num_actors=1, setup=ray_envs.register) as pool:  # both envs in one actor, default threads
        hang = {"fault": "hang", "hang_s": 6.0}
        hung, healthy = rollout(policy, ray_envs.FAULTY_ID, task_indices=[0, 1], make_env=pool.make, env_kwargs=hang,
                                config=RolloutConfig(tool_timeout_s=2))  # fmt: skip
        assert hung.stop_reason == "tool_timeout"
        assert healthy.stop_reason == "answer" and healthy.metrics["answer_em"] == 1.0


def test_unschedulable_actors_fail_with_a_clear_error(local_ray):
    pool = RayEnvPool(num_actors=2, num_cpus_per_actor=3, ready_timeout_s=1)
    try:
        with pytest.raises(RuntimeError, match=r"2 of 2 Ray actors did not start within 1 s \(the cluster has 2 CPUs"):
            pool.make(HOTPOT)
    finally:
        pool.shutdown()


def test_rollout_config_env_actors_uses_the_shared_pool(local_ray, smollm2_tokenizer):
    config = RolloutConfig(max_turns=2, max_new_tokens_per_turn=64, env_actors=1)
    call = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "6 * 7"}}\n</tool_call>'
    script = [call, "<answer>42</answer>"] * 2
    remote = rollout(ScriptedPolicy(smollm2_tokenizer, list(script)), "AgentR1/Calculator-v0", task_indices=[0, 4],
                     config=config)  # fmt: skip
    local_config = RolloutConfig(max_turns=2, max_new_tokens_per_turn=64)
    local = rollout(ScriptedPolicy(smollm2_tokenizer, list(script)), "AgentR1/Calculator-v0", task_indices=[0, 4],
                    config=local_config)  # fmt: skip
    assert [trajectory_to_dict(t) for t in remote] == [trajectory_to_dict(t) for t in local]
    assert list(ray_pool._SHARED) == [1] and ray_pool._SHARED[1].sizes() == [0]
    with pytest.raises(ValueError, match="env_actors must be >= 0"):
        RolloutConfig(env_actors=-1)


def test_bad_arguments_and_missing_ray(monkeypatch):
    with pytest.raises(ValueError, match="num_actors"):
        RayEnvPool(num_actors=0)
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"agent-r1-gym\[ray\]"):
        RayEnvPool()

"""The config keys of scaling out: a TRL algorithm's vllm / vllm_server_url and rollout.env_actors."""

from __future__ import annotations

import pytest
from datasets import Dataset

from agent_trainers.algorithms.shared.names import VLLMMode
from agent_trainers.algorithms.trl_adapter.grpo import AgentGRPOTrainer
from agent_trainers.algorithms.trl_adapter.rollout_func import EnvRolloutFunc, env_reward
from agent_trainers.algorithms.trl_adapter.trl_args import make_grpo_config, vllm_args
from agent_trainers.pipeline.config import load_config
from agent_trainers.policies import tiny_random_model
from agent_trainers.rollout.training import task_rows
from tests.agent_trainers.conftest import LOOKUP_ID


def test_the_sections_vllm_becomes_trls_vllm_fields():
    server = load_config("configs/tiny.yaml", {"grpo.vllm": "server", "grpo.vllm_server_url": "http://10.0.0.2:8000"})
    assert server.algorithm_settings.vllm is VLLMMode.SERVER
    assert vllm_args(server.algorithm_settings) == {
        "use_vllm": True,
        "vllm_mode": "server",
        "vllm_server_base_url": "http://10.0.0.2:8000",
    }
    colocate = load_config("configs/tiny.yaml", {"grpo.vllm": "colocate"}).algorithm_settings
    assert vllm_args(colocate)["vllm_mode"] == "colocate"
    assert vllm_args(load_config("configs/tiny.yaml", {}).algorithm_settings) == {}
    with pytest.raises(ValueError, match="'none', 'colocate' or 'server'"):
        load_config("configs/tiny.yaml", {"grpo.vllm": "gpu"})


def test_without_vllm_trl_refuses_use_vllm_at_once(tmp_path):
    model, tok = tiny_random_model()
    rows = task_rows(LOOKUP_ID, range(2))
    section = load_config("configs/tiny.yaml", {"grpo.vllm": "colocate"}).algorithm_settings
    args = make_grpo_config(device="cpu", output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2,
                            **vllm_args(section))  # fmt: skip
    with pytest.raises(ImportError, match="vLLM is not available"):
        AgentGRPOTrainer(model=model, reward_funcs=[env_reward], args=args, processing_class=tok,
                         train_dataset=Dataset.from_list(rows), rollout_func=EnvRolloutFunc(rows))  # fmt: skip


def test_rollout_env_actors_is_a_rollout_setting():
    assert load_config("configs/tiny.yaml", {"rollout.env_actors": "2"}).rollout.env_actors == 2
    assert load_config("configs/tiny.yaml", {}).rollout.env_actors == 0
    with pytest.raises(ValueError, match="env_actors must be >= 0"):
        load_config("configs/tiny.yaml", {"rollout.env_actors": "-1"})

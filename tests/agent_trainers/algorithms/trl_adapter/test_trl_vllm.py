"""Our rollout function on TRL's vLLM engine (use_vllm=True): policy, seeds, barrier, a real step on a fake engine."""

from __future__ import annotations

import sys
import warnings
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset

from agent_trainers.algorithms.shared.sections import GRPOSettings
from agent_trainers.algorithms.trl_adapter import trl_vllm
from agent_trainers.algorithms.trl_adapter.grpo import AgentGRPOTrainer
from agent_trainers.algorithms.trl_adapter.rollout_func import EnvRolloutFunc, env_reward
from agent_trainers.algorithms.trl_adapter.trl_args import make_grpo_config
from agent_trainers.algorithms.trl_adapter.trl_vllm import trl_vllm_policy
from agent_trainers.policies import TransformersPolicy, VLLMPolicy, VLLMServerPolicy, tiny_random_model
from agent_trainers.rollout import RolloutConfig
from agent_trainers.rollout.training import task_rows
from tests.agent_trainers.conftest import LOOKUP_ID
from tests.agent_trainers.policies.test_vllm_policy import fake_vllm, server  # noqa: F401  (fixtures)
from tests.agent_trainers.policies.vllm_fakes import FakeLLM


class Accelerator:
    def __init__(self, index=0):
        self.process_index, self.barriers = index, 0

    def wait_for_everyone(self):
        self.barriers += 1


def fake_trainer(tok, mode, *, llm=None, client=None, url=None, index=0, sleep=False):
    generation = SimpleNamespace(
        mode=mode, llm=llm, vllm_client=client, enable_sleep_mode=sleep, server_base_url=url,
        server_host="127.0.0.1", server_port=8000, server_timeout=5.0,
    )  # fmt: skip
    return SimpleNamespace(
        use_vllm=True, vllm_generation=generation, processing_class=tok, accelerator=Accelerator(index)
    )


def test_colocate_uses_trls_engine_with_a_per_process_seed(fake_vllm, tiny_model):  # noqa: F811
    model, tok = tiny_model
    llm = FakeLLM(model, tok)
    with pytest.warns(UserWarning, match="experimental"):
        policy = trl_vllm_policy(fake_trainer(tok, "colocate", llm=llm, index=1), seed=4)
    assert isinstance(policy, VLLMPolicy) and policy.llm is llm and policy.seed == 4 + 7_919
    with pytest.raises(ValueError, match="vllm_enable_sleep_mode"):
        trl_vllm_policy(fake_trainer(tok, "colocate", llm=llm, sleep=True), seed=0)
    with pytest.raises(ValueError, match="'colocate' or 'server'"):
        trl_vllm_policy(fake_trainer(tok, "remote"), seed=0)
    with pytest.raises(ValueError, match="use_vllm=True"):
        trl_vllm_policy(SimpleNamespace(use_vllm=False), seed=0)


def test_server_reuses_trls_client_on_the_main_process_and_opens_one_elsewhere(server, tiny_model):  # noqa: F811
    tok = tiny_model[1]
    main = fake_trainer(tok, "server", client="trl's client")
    with pytest.warns(UserWarning):
        policy = trl_vllm_policy(main, seed=0)
    assert isinstance(policy, VLLMServerPolicy) and policy.client == "trl's client"
    assert main.accelerator.barriers == 1, "every process waits for the main one to push the weights"
    other = fake_trainer(tok, "server", url=server.base_url, index=1)
    trl_vllm._CLIENTS.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first, second = trl_vllm_policy(other, seed=0), trl_vllm_policy(other, seed=1)
    assert first.client is second.client and first.client.base_url == server.base_url
    assert other.accelerator.barriers == 2
    trl_vllm._CLIENTS.clear()


def make_trainer(tmp_path, tokens=8):
    model, tok = tiny_random_model()
    rows = task_rows(LOOKUP_ID, range(2))
    fn = EnvRolloutFunc(rows, config=RolloutConfig(max_new_tokens_per_turn=tokens, max_total_tokens=1024))
    args = make_grpo_config(
        device="cpu", output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4, num_generations=2,
        learning_rate=1e-2, max_completion_length=1024, seed=0,
    )  # fmt: skip
    return AgentGRPOTrainer(
        model=model, reward_funcs=[env_reward], args=args, processing_class=tok,
        train_dataset=Dataset.from_list(rows), rollout_func=fn, algorithm="grpo",
        settings=GRPOSettings(advantage="turn"),
    )  # fmt: skip


def test_a_grpo_step_on_a_fake_colocated_engine_has_exact_behaviour_logprobs(tmp_path, one_thread, monkeypatch):
    import trl.generation.vllm_client  # noqa: F401  (imported before vllm is faked)

    from tests.agent_trainers.policies.vllm_fakes import fake_vllm_module

    trainer = make_trainer(tmp_path)
    vllm, inputs = fake_vllm_module(trainer.model, trainer.processing_class)
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    syncs = []
    # What GRPOTrainer(use_vllm=True, vllm_mode="colocate") sets up, with the fake engine over the trained model
    # itself (so TRL's weight sync has nothing to copy).
    trainer.use_vllm, trainer.vllm_mode, trainer._last_loaded_step = True, "colocate", -1
    trainer.vllm_generation = SimpleNamespace(
        mode="colocate", llm=FakeLLM(trainer.model, trainer.processing_class), enable_sleep_mode=False,
        sync_weights=lambda: syncs.append(trainer.state.global_step),
    )  # fmt: skip
    assert trainer.vllm_importance_sampling_correction
    with pytest.warns(UserWarning, match="VLLMPolicy is experimental"):
        trainer.train()
    logged = trainer.state.log_history[0]
    assert syncs == [0] and len(trainer.vllm_generation.llm.engine.requests) >= 4
    # TRL re-scores the sampled tokens with the policy: vLLM's sampling log-probs must agree token by token
    assert logged["sampling/sampling_logp_difference/max"] < 1e-3
    assert logged["sampling/importance_sampling_ratio/mean"] == pytest.approx(1.0, abs=1e-3)


def test_without_use_vllm_the_transformers_policy_plays(tmp_path):
    trainer = make_trainer(tmp_path)
    assert not trainer.use_vllm
    policy = trainer.rollout_func._policy(trainer.model, trainer.processing_class, trainer)
    assert isinstance(policy, TransformersPolicy) and torch.is_tensor(next(policy.model.parameters()))

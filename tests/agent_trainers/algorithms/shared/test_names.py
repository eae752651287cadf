"""The torch-free names the config validates with, and the estimator registry they describe."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from agent_trainers.algorithms.shared import advantages
from agent_trainers.algorithms.shared.names import ESTIMATOR_TRAITS, Algorithm, EstimatorTraits


def test_every_estimator_registered_under_the_traits_the_config_reads():
    assert set(advantages.ESTIMATORS) == set(ESTIMATOR_TRAITS) == {a.value for a in Algorithm} - {"ppo"}
    for name, est in advantages.ESTIMATORS.items():
        traits = ESTIMATOR_TRAITS[name]
        assert (est.kl_in_reward, est.min_group_size, est.reads) == (
            traits.kl_in_reward,
            traits.min_group_size,
            traits.reads,
        )
    assert ESTIMATOR_TRAITS["rloo"].min_group_size == 2 and ESTIMATOR_TRAITS["grpo"].kl_in_reward is False
    assert "rl.gigpo_step_weight" in ESTIMATOR_TRAITS["gigpo"].reads
    assert "rl.gigpo_step_weight" not in ESTIMATOR_TRAITS["grpo"].reads


def test_a_user_estimator_is_recorded_for_the_config_too(monkeypatch):
    monkeypatch.setattr(advantages, "ESTIMATORS", dict(advantages.ESTIMATORS))
    monkeypatch.setitem(ESTIMATOR_TRAITS, "grpo", ESTIMATOR_TRAITS["grpo"])  # restored after the test

    @advantages.register("mine", kl_in_reward=True, min_group_size=3)
    def mine(values, returns, batch, opts):
        return torch.zeros_like(values)

    try:
        assert ESTIMATOR_TRAITS["mine"] == EstimatorTraits(True, 3, frozenset())
        assert advantages.ESTIMATORS["mine"].fn is mine
    finally:
        del ESTIMATOR_TRAITS["mine"]


def test_a_new_name_without_traits_is_refused():
    with pytest.raises(ValueError, match=r"register\('nameless'\): a new estimator needs kl_in_reward="):
        advantages.register("nameless")


def test_the_names_module_imports_no_torch():
    modules = "agent_trainers.algorithms.shared.names, agent_trainers.policies.device"
    code = f"import sys, {modules}\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"

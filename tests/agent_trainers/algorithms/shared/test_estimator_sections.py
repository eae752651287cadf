"""The estimator registry and the sections it reads: torch-free sections, a user's estimator with its own."""

from __future__ import annotations

import subprocess
import sys
from typing import ClassVar

import pytest
import torch

from agent_trainers.algorithms.shared import advantages
from agent_trainers.algorithms.shared.names import Algorithm
from agent_trainers.algorithms.shared.sections import ESTIMATOR_SECTIONS, TRLSettings


def test_every_estimator_is_registered_with_its_section():
    assert set(advantages.ESTIMATORS) == set(ESTIMATOR_SECTIONS) == {a.value for a in Algorithm} - {"ppo"}
    for name, est in advantages.ESTIMATORS.items():
        assert est.settings is ESTIMATOR_SECTIONS[Algorithm(name)]
    kl = {name for name, est in advantages.ESTIMATORS.items() if est.kl_in_reward}
    assert kl == {"rloo", "reinforce_pp", "reinforce_pp_baseline"}
    assert advantages.ESTIMATORS["rloo"].min_group_size == 2 and advantages.ESTIMATORS["grpo"].min_group_size == 1


def test_a_user_estimator_registers_with_its_own_section(monkeypatch):
    monkeypatch.setattr(advantages, "ESTIMATORS", dict(advantages.ESTIMATORS))

    class MineSettings(TRLSettings):
        kl_in_reward: ClassVar[bool] = True
        min_group_size: ClassVar[int] = 3
        bonus: float = 0.5

    @advantages.register("mine", settings=MineSettings)
    def mine(values, returns, batch, settings):
        return torch.full_like(values, settings.bonus)

    est = advantages.ESTIMATORS["mine"]
    assert (est.fn, est.kl_in_reward, est.min_group_size) == (mine, True, 3)


def test_a_new_name_without_a_section_is_refused():
    with pytest.raises(ValueError, match=r"register\('nameless'\): a new estimator needs settings="):
        advantages.register("nameless")


def test_the_names_and_sections_import_no_torch():
    modules = "agent_trainers.algorithms.shared.names, agent_trainers.algorithms.shared.sections"
    code = f"import sys, {modules}, agent_trainers.policies.device\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"

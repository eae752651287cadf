"""bf16 on a CPU: on where the CPU multiplies bf16 natively, refused where torch would fall back to a slow loop."""

from __future__ import annotations

import pytest

from agent_trainers.algorithms.shared.settings import device_args
from agent_trainers.policies import device as settings
from agent_trainers.policies.device import bf16_enabled


@pytest.mark.parametrize("native", [False, True])
def test_auto_precision_is_fp32_on_a_cpu(monkeypatch, native):
    monkeypatch.setattr(settings, "cpu_has_native_bf16", lambda: native)
    assert bf16_enabled("cpu", None) is False
    assert bf16_enabled("cpu", False) is False


def test_bf16_on_a_cpu_with_native_bf16_is_taken(monkeypatch):
    monkeypatch.setattr(settings, "cpu_has_native_bf16", lambda: True)
    assert bf16_enabled("cpu", True) is True
    assert device_args("cpu", True)["bf16"] is True


def test_bf16_on_a_cpu_without_native_bf16_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(settings, "cpu_has_native_bf16", lambda: False)
    with pytest.raises(ValueError, match=r"^bf16: true on a CPU without native bf16 .*set bf16: null \(or false\)$"):
        bf16_enabled("cpu", True)
    with pytest.raises(ValueError, match="bf16: true on a CPU"):
        device_args("cpu", True)


def test_the_probe_answers_a_bool():
    assert isinstance(settings.cpu_has_native_bf16(), bool)


def test_a_config_with_bf16_on_such_a_cpu_is_refused_at_validation(monkeypatch):
    from agent_trainers.pipeline.config import config_from_dict

    monkeypatch.setattr(settings, "cpu_has_native_bf16", lambda: False)
    with pytest.raises(ValueError, match="bf16: true on a CPU without native bf16"):
        config_from_dict({"device": "cpu", "bf16": True, "model": {"name": "tiny-random"}})
    assert config_from_dict({"device": "cpu", "bf16": None, "model": {"name": "tiny-random"}}).bf16 is None
    monkeypatch.setattr(settings, "cpu_has_native_bf16", lambda: True)
    assert config_from_dict({"device": "cpu", "bf16": True, "model": {"name": "tiny-random"}}).bf16 is True


def test_agent_r1_eval_bf16_on_such_a_cpu_is_a_one_line_error(monkeypatch, capsys):
    from agent_trainers.pipeline.cli import main

    monkeypatch.setattr(settings, "cpu_has_native_bf16", lambda: False)
    code = main(["eval", "--env", "AgentR1/Calculator-v0", "--model", "tiny-random", "--limit", "1", "--device",
                 "cpu", "--bf16", "--out", "unused"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "bf16: true on a CPU without native bf16" in err and err.count("\n") == 1

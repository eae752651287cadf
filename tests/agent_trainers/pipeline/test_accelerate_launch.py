"""``agent-r1 train`` under ``accelerate launch`` (2 CPU processes), and the shipped accelerate/DeepSpeed configs."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.utils import DistributedType

from agent_trainers.algorithms import Algorithm
from agent_trainers.pipeline.plots import MetricsLog
from agent_trainers.pipeline.processes import is_main_process, process_rank
from tests.agent_trainers.algorithms.trl_adapter.test_grpo_multiprocess import accelerate_launch

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("name", "kind", "stage"),
    [
        ("accelerate_ddp.yaml", DistributedType.MULTI_GPU, None),
        ("accelerate_zero2.yaml", DistributedType.DEEPSPEED, 2),
        ("accelerate_zero3.yaml", DistributedType.DEEPSPEED, 3),
    ],
)
def test_shipped_accelerate_configs_load(name, kind, stage):
    config = load_config_from_file(str(ROOT / "configs" / name))
    assert config.distributed_type == kind and config.num_machines == 1 and not config.use_cpu
    if stage is None:
        assert config.num_processes == 2 and config.mixed_precision == "no"
    else:
        assert config.deepspeed_config["zero_stage"] == stage and config.mixed_precision == "bf16"
        assert config.deepspeed_config["zero3_init_flag"] is (stage == 3)


def test_only_rank_0_writes(monkeypatch, tmp_path):
    monkeypatch.setenv("RANK", "1")
    assert process_rank() == 1 and not is_main_process()
    log = MetricsLog(tmp_path / "m.jsonl", enabled=is_main_process())
    log.write({"step": 1})
    assert not (tmp_path / "m.jsonl").exists()
    monkeypatch.delenv("RANK")
    assert is_main_process()


ALGORITHMS = ["grpo", pytest.param("ppo", marks=pytest.mark.skipif(
    "ppo" not in {a.value for a in Algorithm}, reason="PPO is not in this checkout"))]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_agent_r1_train_on_two_processes(tmp_path, algorithm):
    out = tmp_path / "run"
    done = accelerate_launch(
        ["agent_trainers.pipeline.cli", "train", "--config", "configs/tiny.yaml", "--set", f"output_dir={out}",
         "--set", "device=cpu", "--set", f"algorithm={algorithm}"]
    )  # fmt: skip
    assert done.stdout.count("plot: ") == 1, "rank 0 alone prints the table"
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = collections.Counter(r["phase"] for r in records if r["stage"] == "eval")
    assert evals == {"before": 1, "after_sft": 1, "final": 1}, "rank 0 alone writes metrics"
    rl_steps = [r["step"] for r in records if r["stage"] == "rl" and "loss" in r]
    assert rl_steps == [1, 2]
    assert (out / "final" / "agent_r1.json").is_file() and (out / "rl" / "checkpoint-2").is_dir()

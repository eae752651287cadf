"""GRPO under ``accelerate launch --num_processes 2`` on CPUs (gloo): groups stay on one process, advantages match.

The launched script (``two_process_grpo.py``) records, per rank and rollout
call, the trajectories it played and the advantages it trained on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from agent_trainers.algorithms.shared.batch import AgentBatch
from agent_trainers.algorithms.trl_adapter.grpo import check_groups_stay_local
from agent_trainers.rollout import trajectory_from_dict
from tests.agent_trainers.conftest import advantages_of

ROOT = Path(__file__).resolve().parents[4]
GROUP = 2


def accelerate_launch(module_args: list[str], timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``accelerate launch`` with the shipped DDP config, 2 processes, from the repository root."""
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ROOT / "configs/accelerate_ddp.yaml"),
        "--num_processes", "2", "-m", *module_args,
    ]  # fmt: skip
    env = os.environ | {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "TRL_EXPERIMENTAL_SILENCE": "1"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("two_process_grpo")
    accelerate_launch(
        ["tests.agent_trainers.algorithms.trl_adapter.two_process_grpo", "--out", str(out), "--steps", "2"]
    )
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow  # the two_ranks fixture launches two processes (~20 s); CI runs it after the default suite
def test_two_gloo_processes_trained_one_model(two_ranks):
    for r, rank in enumerate(two_ranks):
        assert rank["rank"] == r and rank["world_size"] == 2
        assert rank["distributed_type"] == "DistributedType.MULTI_CPU" and rank["backend"] == "gloo"
        assert len(rank["records"]) == 2
    assert two_ranks[0]["before"] == two_ranks[1]["before"] != two_ranks[0]["after"]
    assert two_ranks[0]["after"] == pytest.approx(two_ranks[1]["after"], rel=0, abs=1e-9), "DDP keeps replicas equal"


@pytest.mark.slow  # the two_ranks fixture launches two processes (~20 s); CI runs it after the default suite
def test_each_group_stays_on_one_process_and_processes_share_no_task(two_ranks):
    for call in range(2):
        tasks = []
        for rank in two_ranks:
            trajs = rank["records"][call]["trajectories"]
            assert len(trajs) == 2 * GROUP  # prompts_per_process x num_generations
            for start in range(0, len(trajs), GROUP):
                members = trajs[start : start + GROUP]
                assert len({(t["task_index"], t["group_id"]) for t in members}) == 1, members
                assert len({t["seed"] for t in members}) == GROUP
            tasks.append({t["task_index"] for t in trajs})
        assert not tasks[0] & tasks[1], f"call {call}: both processes played tasks {tasks[0] & tasks[1]}"


@pytest.mark.slow  # the two_ranks fixture launches two processes (~20 s); CI runs it after the default suite
def test_advantages_equal_those_of_the_whole_batch_in_one_process(two_ranks):
    for call in range(2):
        records = [rank["records"][call] for rank in two_ranks]
        trajs = [trajectory_from_dict(t) for rec in records for t in rec["trajectories"]]
        width = max(len(t.completion_ids) for t in trajs)
        whole = advantages_of(
            AgentBatch.from_trajectories(trajs, group_size=GROUP, width=width), "grpo", advantage="turn"
        )
        rows = [row for rec in records for row in rec["advantages"]]
        assert torch.count_nonzero(whole) > 0, "right and wrong answers in every group: non-zero advantages"
        for b, (traj, row) in enumerate(zip(trajs, rows, strict=True)):
            n = len(traj.completion_ids)
            assert row[:n] == pytest.approx(whole[b, :n].tolist(), abs=1e-6), b
            assert all(v == 0 for v in row[n:])


def test_a_group_that_would_straddle_processes_is_refused():
    split = SimpleNamespace(per_device_train_batch_size=3, steps_per_generation=1, num_generations=2)
    with pytest.raises(ValueError, match=r"divisible by num_generations.*3 \* 1 and 2"):
        check_groups_stay_local(split)
    check_groups_stay_local(SimpleNamespace(per_device_train_batch_size=3, steps_per_generation=2, num_generations=2))

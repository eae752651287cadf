"""scripts/algorithms_report.py: train rewards per step, the paired table against the SFT checkpoint, the plot."""

from __future__ import annotations

import json

import pytest

from agent_trainers.evaluation import EpisodeRecord
from agent_trainers.evaluation.compare import Run
from tests.conftest import load_script

report = load_script("scripts/algorithms_report.py", "algorithms_report")


def record(i, em, reward):
    return EpisodeRecord(i, f"t{i}", f"q{i}", ["1"], None, "1", True, {"em": em, "f1": em},
                         2, 1, 0, None, reward, "answer")  # fmt: skip


def write_run(folder, rewards, times):
    folder.mkdir(parents=True)
    rows = [{"stage": "eval", "phase": "final", "step": len(rewards), "reward": 9.0}]  # not a train step
    rows += [
        {"stage": "rl", "step": s, "reward": r, "step_time": t}
        for s, (r, t) in enumerate(zip(rewards, times, strict=True), 1)
    ]
    rows.append({"stage": "rl", "step": len(rewards), "train_runtime": 5.0})  # TRL's closing record: no reward
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_train_rewards_are_the_rl_steps_in_order_and_absent_is_an_error(tmp_path):
    run = write_run(tmp_path / "a", [0.1, -0.2, 0.5], [2.0, 4.0, 6.0])
    assert report.train_rewards(run) == [(1, 0.1), (2, -0.2), (3, 0.5)]
    assert report.step_seconds(run) == 4.0
    empty = tmp_path / "b"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text(json.dumps({"stage": "eval", "reward": 1.0}) + "\n")
    with pytest.raises(ValueError, match="no RL step with a reward"):
        report.train_rewards(empty)


def test_table_pairs_each_algorithm_with_the_sft_checkpoint_on_the_same_questions(tmp_path):
    sft = Run("agent (SFT)", tmp_path, {}, [record(i, em, 0.0) for i, em in enumerate([1, 0, 0, 0])])
    same = Run("agent (grpo)", tmp_path, {}, [record(i, em, 0.0) for i, em in enumerate([1, 0, 0, 0])])
    better = Run("agent (ppo)", tmp_path, {}, [record(i, 1.0, 1.0) for i in range(4)])  # +0.75 em, +1 reward on each
    runs = {"grpo": (write_run(tmp_path / "g", [0.0, 0.25], [3.0, 3.0]), same),
            "ppo": (write_run(tmp_path / "p", [0.5, 1.0], [7.0, 9.0]), better)}  # fmt: skip
    lines = report.table(sft, runs).splitlines()
    assert lines[2].startswith("| SFT checkpoint | — | — | 0.250 [")
    assert lines[3].startswith("| grpo | 0.000 → 0.250 | 3 | 0.250 [")
    assert lines[3].endswith("| +0.000 [+0.000, +0.000] | +0.000 [+0.000, +0.000] |")  # identical answers
    assert lines[4].startswith("| ppo | 0.500 → 1.000 | 8 | 1.000 [1.000, 1.000] | 1.000 [1.000, 1.000] |")
    # em: differences 0, 1, 1, 1 (mean 0.75); reward: 1 on every question
    assert "+0.750 [" in lines[4] and lines[4].endswith("| +1.000 [+1.000, +1.000] |")
    report.plot(runs, tmp_path / "out" / "p.png", "t")
    assert (tmp_path / "out" / "p.png").stat().st_size > 1000

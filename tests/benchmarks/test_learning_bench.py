"""benchmarks/learning.py's test protocol: the checkpoint is chosen on the dev curve, and found on disk."""

from __future__ import annotations

import json

import pytest

from tests.conftest import load_script

bench = load_script("benchmarks/learning.py", "bench_learning")


def _stage(tmp_path, rows):
    folder = tmp_path / "grpo"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return bench.Stage("grpo", folder, [])


def test_the_dev_curve_is_read_from_the_eval_rows_only(tmp_path):
    stage = _stage(tmp_path, [
        {"stage": "rl", "step": 10, "em": 0.9, "reward": 0.5},  # a training row: never a curve point
        {"stage": "eval", "step": 20, "em": 0.61, "em_low": 0.55},
        {"stage": "eval", "step": 10, "em": 0.735, "em_low": 0.67},
        {"stage": "eval", "step": 5, "f1": 0.2},  # no em: not a point of the em curve
    ])  # fmt: skip
    assert bench.dev_curve(stage, "em") == [(10, 0.735), (20, 0.61)]


def test_the_best_dev_step_wins_and_a_tie_goes_to_the_earliest():
    assert bench.choose_step([(10, 0.735), (20, 0.61)]) == 10
    assert bench.choose_step([(5, 0.70), (10, 0.72), (15, 0.72), (20, 0.40)]) == 10
    assert bench.choose_step([(0, 0.675), (10, 0.675)]) == 0  # no step beat SFT: SFT itself
    with pytest.raises(ValueError, match="no held-aside evaluation during RL"):
        bench.choose_step([])


def test_the_chosen_step_maps_to_its_saved_model(tmp_path):
    stage = _stage(tmp_path, [])
    for name in ("rl/checkpoint-10", "final"):
        (stage.folder / name).mkdir(parents=True)
        (stage.folder / name / "config.json").write_text("{}")
    sft = tmp_path / "sft" / "final"
    assert bench.checkpoint_of(stage, 10, 20, sft) == stage.folder / "rl" / "checkpoint-10"
    assert bench.checkpoint_of(stage, 20, 20, sft) == stage.folder / "final"
    assert bench.checkpoint_of(stage, 0, 20, sft) == sft
    with pytest.raises(FileNotFoundError, match="no model saved at step 15"):
        bench.checkpoint_of(stage, 15, 20, sft)


def test_every_repeated_override_flag_reaches_the_rl_stage():
    """`--rl-set a --rl-set b` once kept only `b` (tyro's list flag replaced the earlier value): the documented
    commands of docs/learning.md silently ran with one override of two."""
    args = bench.parse_args(["--rl-set", "rl.advantage=outcome", "--rl-set", "rl.scale_rewards=batch",
                             "--set", "rl.steps=4", "--set", "seed=1"])  # fmt: skip
    assert args.rl_set == ["rl.advantage=outcome", "rl.scale_rewards=batch"]
    rl = bench.stages(args)[1]
    assert rl.overrides[-4:] == ["rl.steps=4", "seed=1", "rl.advantage=outcome", "rl.scale_rewards=batch"]
    assert bench.stages(args)[0].overrides[-2:] == ["rl.steps=4", "seed=1"]  # --set goes to SFT too, --rl-set not


def test_each_algorithm_gets_the_recipe_minus_what_its_trainer_does_not_read():
    """configs/learn_hasty.yaml is written for GRPO (rl.scale_rewards: batch, rl.dynamic_sampling: true,
    rl.micro_batch: 8, rl.advantage: outcome); RLOO refused the whole run over scale_rewards. Each algorithm gets
    exactly the settings it does not read set back to their defaults, and keeps everything else."""
    args = bench.parse_args(["--config", "configs/learn_hasty.yaml", "--set", "rl.steps=10",
                             "--algorithms", "grpo,rloo,reinforce_pp,ppo,gigpo"])  # fmt: skip
    by_name = {s.name: s.overrides for s in bench.stages(args)[1:]}
    keys = {"rl.scale_rewards", "rl.dynamic_sampling", "rl.dynamic_sampling_tries", "rl.micro_batch", "rl.advantage"}
    resets = {name: [o for o in ov if o.split("=")[0] in keys] for name, ov in by_name.items()}
    assert resets == {
        "grpo": [],
        "gigpo": [],
        "rloo": ["rl.scale_rewards=group"],
        "reinforce_pp": ["rl.scale_rewards=group", "rl.dynamic_sampling=False", "rl.dynamic_sampling_tries=3"],
        "ppo": [
            "rl.micro_batch=1",
            "rl.advantage=turn",
            "rl.scale_rewards=group",
            "rl.dynamic_sampling=False",
            "rl.dynamic_sampling_tries=3",
        ],
    }
    assert all(ov[-1] == "rl.steps=10" for ov in by_name.values())  # the user's --set still comes last


def test_the_report_ends_with_what_each_rl_run_changed(tmp_path):
    """The main job (scripts/run.sh) is this report: its last lines must say what RL changed, with the paired
    interval. SFT right on 2 of 20 tasks, GRPO on those and 8 more: +0.400, 8 wins, 0 losses; the no-op run
    changed nothing measurably."""
    from tests.agent_trainers.evaluation.test_report import folder

    sft_ems, rl_ems = [1, 1] + [0] * 18, [1] * 10 + [0] * 10
    for name, phase, ems in [("sft", "after_sft", sft_ems), ("grpo", "final", rl_ems), ("rloo", "final", sft_ems)]:
        made = folder(tmp_path / name, name, "calc", ems)
        (tmp_path / name / "eval").mkdir()
        made.rename(tmp_path / name / "eval" / phase)
    (tmp_path / "grpo" / "metrics.jsonl").write_text(json.dumps({"stage": "rl", "step": 1, "step_time": 40.0}) + "\n")
    (tmp_path / "rloo" / "metrics.jsonl").write_text("")
    done = [bench.Stage(n, tmp_path / n, []) for n in ("sft", "grpo", "rloo")]
    text = bench.report(bench.parse_args([]), done, {})
    table, changes = text.split("\n\n")
    assert "| grpo | 0.500 [" in table and "| +0.400 [" in table and "| 8 / 0 | 40.0 |" in table
    grpo_line, rloo_line = changes.strip().splitlines()
    assert grpo_line.startswith("- RL (grpo) changed em +0.400 [+0.200, +0.600] (vs sft; 20 questions,")
    assert rloo_line.startswith("- RL (rloo) changed no metric measurably")

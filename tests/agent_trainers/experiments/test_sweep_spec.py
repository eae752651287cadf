"""A sweep as data: its rules, the packaged sweeps, and the runs planned from it (typed copies of the recipe)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_trainers.experiments.plan import describe, plan_runs
from agent_trainers.experiments.spec import BASELINES, PACKAGED_SWEEPS, SweepSpec, find_sweep, load_sweep
from agent_trainers.pipeline.config import load_config

DEV = {"env_kwargs": {"task_seed": 3}, "tasks": 10}


def spec(**changes):
    return SweepSpec.model_validate({"recipe": "tiny", "seeds": [0], "dev": DEV,
                                     "arms": [{"name": "sft", "stage": "sft"}, {"name": "grpo", "start": "sft"}]}
                                    | changes)  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"arms": [{"name": "a"}, {"name": "a"}]}, "arm names must be distinct"),
        ({"arms": [{"name": "rl", "start": "sft"}, {"name": "sft", "stage": "sft"}]}, "not an arm before it"),
        ({"arms": [{"name": "sft", "stage": "sft", "algorithm": "rloo"}]}, "runs SFT alone"),
        ({"test": DEV}, "the test set must differ from the dev set"),
        ({"seeds": []}, "seeds"),
        ({"arms": [{"name": "a b"}]}, "name"),
    ],
)
def test_a_sweep_refuses_what_cannot_run_under_the_protocol(changes, message):
    with pytest.raises(ValueError, match=message):
        spec(**changes)


def test_every_packaged_sweep_loads_and_plans(tmp_path):
    names = sorted(p.stem for p in PACKAGED_SWEEPS.glob("*.yaml"))
    assert {"learn_main", "learn_hasty", "learn_calculator", "learn_textworld"} <= set(names)
    for name in names:
        sweep = load_sweep(name)
        runs = plan_runs(sweep, tmp_path / name)
        assert len(runs) == len(sweep.seeds) * len(sweep.arms) and describe(runs)
        for run in runs:  # every run is evaluated on the sweep's dev set
            assert run.config.env.eval_kwargs == sweep.dev.env_kwargs and run.config.eval.tasks == sweep.dev.tasks
    with pytest.raises(FileNotFoundError, match=r"no packaged sweep of that name: .*learn_main"):
        find_sweep("learn_mian")


def test_the_main_job_plans_the_runs_the_recipe_describes(tmp_path):
    """learn_main: the SFT stage alone, then GRPO from its model - the recipe otherwise unchanged, with the dev
    set the recipe's own held-aside tasks (so the recorded table reproduces)."""
    recipe = load_config("learn_main")
    sft, grpo = plan_runs(load_sweep("learn_main"), tmp_path)
    assert sft.name == "sft/seed0" and sft.folder == tmp_path / "seed0" / "sft"
    assert not sft.config.rl.enabled and sft.config.sft.enabled and not sft.config.eval.before
    assert grpo.start is sft and grpo.config.model.name == str(tmp_path / "seed0" / "sft" / "sft")
    assert not grpo.config.sft.enabled and grpo.config.rl.enabled and grpo.config.algorithm == "grpo"
    ignored = {"output_dir", "model", "sft", "eval"}
    assert {k: v for k, v in grpo.config.to_dict().items() if k not in ignored} == {
        k: v for k, v in recipe.to_dict().items() if k not in ignored
    }
    assert grpo.config.eval.model_dump() == recipe.eval.model_copy(update={"before": False}).model_dump()


def test_seeds_arms_algorithms_and_settings_are_typed_copies(tmp_path):
    sweep = spec(seeds=[0, 5], set={"rl.steps": 4, "grpo.scale_rewards": "batch"},
                 arms=[{"name": "sft", "stage": "sft"}, {"name": "grpo", "start": "sft"},
                       {"name": "ppo", "start": "sft", "algorithm": "ppo",
                        "set": {"ppo.update_epochs": 1}}])  # fmt: skip
    runs = plan_runs(sweep, tmp_path, {"rl.learning_rate": 0.003})
    assert [r.name for r in runs] == ["sft/seed0", "grpo/seed0", "ppo/seed0", "sft/seed5", "grpo/seed5", "ppo/seed5"]
    ppo5 = runs[-1]
    assert ppo5.config.seed == 5 and ppo5.start is runs[3] and ppo5.config.algorithm == "ppo"
    assert ppo5.config.algorithm_settings.update_epochs == 1 and ppo5.config.grpo is None
    assert ppo5.left_behind == ("grpo.scale_rewards",)  # set away from its default; ppo does not read it
    assert runs[1].config.algorithm_settings.scale_rewards == "batch"
    assert all(r.config.rl.steps == 4 and r.config.rl.learning_rate == 0.003 for r in runs)
    with pytest.raises(ValueError, match=r"rl\.stepz: not a setting"):
        plan_runs(spec(arms=[{"name": "a", "set": {"rl.stepz": 1}}]), tmp_path)


def test_the_sweep_of_docs_experiments_md_is_valid_and_plans(tmp_path):
    import yaml

    from tests.docs.test_code_blocks import BLOCKS

    block, table3, borrowed = [b for b in BLOCKS if b.page == "docs/experiments.md" and b.lang == "yaml"]
    sweep = SweepSpec.model_validate(yaml.safe_load(block.body))
    runs = plan_runs(sweep, tmp_path)
    assert len(runs) == 12 and runs[-1].config.algorithm == "ppo" and runs[-1].config.seed == 2
    # the transfer set and baselines of the Table 3 section, added to that sweep
    grown = SweepSpec.model_validate(yaml.safe_load(block.body) | yaml.safe_load(table3.body))
    assert grown.transfer["musique"].env == "AgentR1/MuSiQue-v0" and grown.baselines == list(BASELINES)
    # the borrowed arm of "An arm borrowed from another sweep", in that sweep: planned, marked, never trained here
    lent = SweepSpec.model_validate(yaml.safe_load(block.body) | yaml.safe_load(borrowed.body))
    lines = describe(plan_runs(lent, tmp_path))
    assert len(lines) == 9 and lines[1].endswith("sweeps/learn_hotpotqa/seed0/grpo once checked to be this run")


def test_every_packaged_borrowed_arm_has_the_config_of_its_archived_lender(tmp_path):
    """A packaged sweep that borrows an arm from a committed archive plans that run (and its start run) with the
    lender's settings, for every seed the archive holds: else `agent-r1 sweep` would refuse the borrow only after
    hours of training the other arms."""
    from agent_trainers.experiments.borrow import differing_configs, lender_folder, lender_start

    root, checked = Path(__file__).resolve().parents[3], []
    for path in sorted(PACKAGED_SWEEPS.glob("*.yaml")):
        for run in plan_runs(load_sweep(path.stem), tmp_path / path.stem):
            if run.arm.borrow is None or not (lender := root / lender_folder(run)).is_dir():
                continue
            assert list(differing_configs(run, lender, lender_start(run, lender))) == [], run.name
            checked.append(f"{path.stem}:{run.name}")
    assert {"hotpotqa_algorithms:rft/seed2", "hotpotqa_rewards:grpo-gated/seed0"} <= set(checked)
    assert {"hotpotqa_algorithms:grpo/seed1", "hotpotqa_process_turn:grpo-process/seed1"} <= set(checked)

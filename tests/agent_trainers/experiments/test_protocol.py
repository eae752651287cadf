"""The protocol in code: the checkpoint is chosen on the dev curve, the choices are frozen before the test set is
touched, a test set evaluated under other choices is refused, and no test figure is reported otherwise."""

from __future__ import annotations

import json

import pytest

from agent_trainers.experiments import protocol
from agent_trainers.experiments.plan import plan_runs
from agent_trainers.experiments.protocol import (
    ProtocolError,
    dev_curve,
    freeze_choices,
    frozen_test_folders,
    make_choices,
)
from agent_trainers.experiments.spec import SweepSpec

DEV = {"env_kwargs": {"task_seed": 3}, "tasks": 10}
TEST = {"env_kwargs": {"task_seed": 4}, "tasks": 10}


def sweep(choose="best_dev", test=TEST):
    return SweepSpec.model_validate({
        "recipe": "tiny", "set": {"rl.steps": 20, "eval.every": 10, "rl.save_steps": 10}, "seeds": [0], "dev": DEV,
        "test": test, "choose": choose, "arms": [{"name": "sft", "stage": "sft"}, {"name": "grpo", "start": "sft"}],
    })  # fmt: skip


def finished(tmp_path, spec, sft_em=0.675, rl=((10, 0.735), (20, 0.61))):
    """The runs of ``spec`` with their dev evaluations written as the pipeline writes them (metrics.jsonl)."""
    sft, grpo = plan_runs(spec, tmp_path)
    for run, rows in ((sft, [(0, sft_em), (0, sft_em)]), (grpo, list(rl))):
        run.folder.mkdir(parents=True)
        lines = [{"stage": "rl", "step": 10, "em": 0.99, "reward": 0.5}]  # a training row: never a curve point
        lines += [
            {"stage": "eval", "step": s, "em": v, "phase": "final" if s == 20 else f"rl_step_{s}"} for s, v in rows
        ]
        (run.folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    for folder in (grpo.folder / "rl" / "checkpoint-10", grpo.folder / "final", sft.folder / "sft"):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
    return sft, grpo


def test_the_dev_curve_starts_at_the_start_model_and_reads_eval_rows_only(tmp_path):
    sft, grpo = finished(tmp_path, sweep())
    assert dev_curve(grpo, "em") == [(0, 0.675), (10, 0.735), (20, 0.61)]
    assert dev_curve(sft, "em") == [(0, 0.675)]
    with pytest.raises(ProtocolError, match="no dev evaluation of 'f1'"):
        dev_curve(grpo.start, "f1")


@pytest.mark.parametrize(
    ("choose", "rl", "step", "where"),
    [
        ("best_dev", ((10, 0.735), (20, 0.61)), 10, "rl/checkpoint-10"),
        ("best_dev", ((10, 0.72), (20, 0.72)), 10, "rl/checkpoint-10"),  # a tie goes to the earliest
        ("best_dev", ((10, 0.60), (20, 0.675)), 0, "start"),  # never better than its start: the start model
        ("final", ((10, 0.735), (20, 0.61)), 20, "final"),
    ],
)
def test_the_checkpoint_is_chosen_on_dev(tmp_path, choose, rl, step, where):
    spec = sweep(choose)
    sft, grpo = finished(tmp_path, spec, rl=rl)
    chosen = {c.run: c for c in make_choices(spec, [sft, grpo])}
    assert chosen["grpo/seed0"].step == step and chosen["sft/seed0"].model == str(sft.folder / "sft")
    expected = sft.folder / "sft" if where == "start" else grpo.folder / where
    assert chosen["grpo/seed0"].model == str(expected)


def test_a_step_without_a_saved_model_is_refused(tmp_path):
    spec = sweep()
    sft, grpo = finished(tmp_path, spec)
    (grpo.folder / "rl" / "checkpoint-10" / "config.json").unlink()
    with pytest.raises(ProtocolError, match="no model saved at step 10"):
        make_choices(spec, [sft, grpo])


def test_no_test_figure_without_frozen_choices_and_under_other_ones(tmp_path):
    spec = sweep()
    runs = finished(tmp_path, spec)
    with pytest.raises(ProtocolError, match="no test figure is reported before the choices are frozen"):
        frozen_test_folders(spec, runs, tmp_path)
    frozen = freeze_choices(spec, runs, tmp_path)
    assert json.loads((tmp_path / protocol.CHOICES).read_text())["choices"] == frozen["choices"]
    with pytest.raises(ProtocolError, match="sft/seed0: no test evaluation under the frozen choices"):
        frozen_test_folders(spec, runs, tmp_path)
    log = {r.name: {"model": c["model"], "choices": frozen["choices"], "evaluated_at": "2026-12-05 10:00:00"}
           for r, c in zip(runs, frozen["runs"], strict=True)}  # fmt: skip
    (tmp_path / protocol.TEST_LOG).write_text(json.dumps(log))
    assert frozen_test_folders(spec, runs, tmp_path)["grpo/seed0"] == tmp_path / "test" / "grpo/seed0"
    # the dev curve changes afterwards (another recipe, say): the choices change, the looked-at test set is refused
    (runs[1].folder / "metrics.jsonl").write_text(json.dumps({"stage": "eval", "step": 20, "em": 0.9}) + "\n")
    with pytest.raises(
        ProtocolError, match=r"evaluated on 2026-12-05 10:00:00 under other choices.*a dev set from then"
    ):
        freeze_choices(spec, runs, tmp_path)


def test_the_test_evaluation_needs_a_test_set(tmp_path):
    spec = sweep(test=None)
    with pytest.raises(ProtocolError, match="names no test set"):
        protocol.evaluate_test(spec, finished(tmp_path, spec), tmp_path)

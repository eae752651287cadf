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


def sweep(choose="best_dev", test=TEST, rl_set=None, shared_set=None):
    return SweepSpec.model_validate({
        "recipe": "tiny", "set": {"rl.steps": 20, "eval.every": 10, "rl.save_steps": 10, **(shared_set or {})},
        "seeds": [0], "dev": DEV,
        "test": test, "choose": choose,
        "arms": [{"name": "sft", "stage": "sft"}, {"name": "grpo", "start": "sft", "set": rl_set or {}}],
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


def logged(runs, frozen, when="2026-12-05 10:00:00"):
    """The test-log entries :func:`protocol.evaluate_test` writes for ``runs``, without evaluating."""
    chosen = {c["run"]: c for c in frozen["runs"]}
    return {r.name: {"model": chosen[r.name]["model"], "step": chosen[r.name]["step"], "sweep": frozen["sweep"],
                     "choice": chosen[r.name]["digest"], "evaluated_at": when} for r in runs}  # fmt: skip


def test_no_test_figure_without_frozen_choices_and_under_other_ones(tmp_path):
    spec = sweep()
    runs = finished(tmp_path, spec)
    with pytest.raises(ProtocolError, match="no test figure is reported before the choices are frozen"):
        frozen_test_folders(spec, runs, tmp_path)
    frozen = freeze_choices(spec, runs, tmp_path)
    assert json.loads((tmp_path / protocol.CHOICES).read_text()) == frozen
    assert [(c["run"], c["step"], c["dev"]) for c in frozen["runs"]] == [
        ("sft/seed0", 0, 0.675),
        ("grpo/seed0", 10, 0.735),
    ]
    with pytest.raises(ProtocolError, match="sft/seed0: no test evaluation under its frozen choice"):
        frozen_test_folders(spec, runs, tmp_path)
    (tmp_path / protocol.TEST_LOG).write_text(json.dumps(logged(runs, frozen)))
    assert frozen_test_folders(spec, runs, tmp_path)["grpo/seed0"] == tmp_path / "test" / "grpo/seed0"
    assert freeze_choices(spec, runs, tmp_path) == frozen  # frozen again, unchanged: the same file
    # the dev curve changes afterwards (another run, say): the choice changes, the looked-at test set is refused
    (runs[1].folder / "metrics.jsonl").write_text(json.dumps({"stage": "eval", "step": 20, "em": 0.9}) + "\n")
    with pytest.raises(
        ProtocolError,
        match=r"evaluated for grpo/seed0 on 2026-12-05 10:00:00 under another choice.*a dev set from then",
    ):
        freeze_choices(spec, runs, tmp_path)


def test_the_sweep_s_definition_is_fixed_by_its_first_test_evaluation_and_seeds_may_grow(tmp_path):
    spec = sweep()
    digest = protocol.sweep_digest(spec)
    # what a run computes is in the digest; its seeds, its description and how it is carried out are not
    assert protocol.sweep_digest(spec.model_copy(update={"seeds": [0, 1, 2], "description": "x"})) == digest
    assert protocol.sweep_digest(spec, {"threads": 2, "report_to": "tensorboard"}) == digest
    assert protocol.sweep_digest(spec, {"rl.learning_rate": 1e-6}) != digest
    assert protocol.sweep_digest(sweep(choose="final")) != digest
    assert protocol.sweep_digest(sweep(test={"env_kwargs": {"task_seed": 5}, "tasks": 10})) != digest
    runs = finished(tmp_path, spec)
    frozen = freeze_choices(spec, runs, tmp_path)
    (tmp_path / protocol.TEST_LOG).write_text(json.dumps(logged(runs, frozen)))
    # a second seed later: seed 0's choices and test figures stand, seed 1's are frozen beside them
    grown = spec.model_copy(update={"seeds": [0, 1]})
    more = plan_runs(grown, tmp_path)
    for run, rows in zip(more[2:], ([(0, 0.5)], [(10, 0.55), (20, 0.6)]), strict=True):
        run.folder.mkdir(parents=True)
        lines = [{"stage": "eval", "step": s, "em": v} for s, v in rows]
        (run.folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (more[3].folder / "rl" / "checkpoint-10").mkdir(parents=True)
    (more[3].folder / "rl" / "checkpoint-10" / "config.json").write_text("{}")
    both = freeze_choices(grown, more, tmp_path)
    assert [c["run"] for c in both["runs"]] == ["sft/seed0", "grpo/seed0", "sft/seed1", "grpo/seed1"]
    assert both["runs"][:2] == frozen["runs"]
    assert set(frozen_test_folders(grown, more[:2], tmp_path)) == {"sft/seed0", "grpo/seed0"}
    # another rule (or recipe, arms, test set) after the test set was looked at: refused, whatever the seeds
    with pytest.raises(ProtocolError, match=r"evaluated on 2026-12-05 10:00:00 under another definition of the sweep"):
        freeze_choices(sweep(choose="final"), runs, tmp_path)
    with pytest.raises(ProtocolError, match="under another definition"):
        freeze_choices(spec, runs, tmp_path, protocol.sweep_digest(spec, {"rl.learning_rate": 1e-6}))


def test_the_test_evaluation_needs_a_test_set(tmp_path):
    spec = sweep(test=None)
    with pytest.raises(ProtocolError, match="names no test set"):
        protocol.evaluate_test(spec, finished(tmp_path, spec), tmp_path)


@pytest.mark.parametrize(
    ("rl", "rl_set", "shared_set", "copied"),
    [
        (((10, 0.60), (20, 0.675)), None, None, True),  # grpo never beat its start: it chose the SFT model
        (((10, 0.735), (20, 0.61)), None, None, False),  # grpo chose its own checkpoint
        (((10, 0.60), (20, 0.675)), {"eval.batch_size": 3}, None, False),  # the SFT model, evaluated otherwise
        (((10, 0.60), (20, 0.675)), None, {"eval.temperature": 0.7}, False),  # sampled: another draw
    ],
)
def test_a_run_whose_chosen_model_was_already_tested_gets_a_copy_of_that_evaluation(
    tmp_path, monkeypatch, rl, rl_set, shared_set, copied
):
    from agent_trainers.evaluation.outputs import EvalFolder
    from agent_trainers.pipeline import stages
    from agent_trainers.policies import loader

    spec = sweep(rl_set=rl_set, shared_set=shared_set)
    sft, grpo = runs = finished(tmp_path, spec, rl=rl)
    evaluated = []

    def evaluate(config, model, tokenizer, out, *, phase, tasks, label):  # what evaluate_model writes, played
        evaluated.append((model, label))
        folder = EvalFolder(out)
        folder.start(stages.eval_spec(config, phase=phase, tasks=tasks, label=label).to_json(), resume=False)
        (out / "episodes.jsonl").write_text(json.dumps({"task_index": 0, "model": model}) + "\n")
        em = {"mean": 0.5, "low": 0.25, "high": 0.75, "n": 10}
        summary = {
            "label": label,
            "model": model,
            "dataset": "toy",
            "episodes": 10,
            "metrics": {"em": em},
            "by_type": {},
        }
        folder.write_summary({**summary, "wall_s": 9.5})

    monkeypatch.setattr(stages, "evaluate_model", evaluate)
    monkeypatch.setattr(loader, "load_model", lambda path, **kw: (path, None))
    said: list[str] = []
    protocol.evaluate_test(spec, runs, tmp_path, say=said.append)
    sft_model = str(sft.folder / "sft")
    own = (
        []
        if copied
        else [(str(grpo.folder / "rl" / "checkpoint-10") if rl[0][1] > 0.7 else sft_model, "grpo/seed0 (test)")]
    )
    assert evaluated == [(sft_model, "sft/seed0 (test)"), *own]
    log = json.loads((tmp_path / protocol.TEST_LOG).read_text())
    assert "copied_from" not in log["sft/seed0"]
    assert log["grpo/seed0"].get("copied_from") == ("sft/seed0" if copied else None)
    folders = frozen_test_folders(spec, runs, tmp_path)  # a copy counts as the run's own test evaluation
    source, copy = (json.loads((folders[r] / "summary.json").read_text()) for r in ("sft/seed0", "grpo/seed0"))
    assert copy["label"] == "grpo/seed0 (test)" and json.loads((folders["grpo/seed0"] / "spec.json").read_text())[
        "label"] == "grpo/seed0 (test)"  # fmt: skip
    if copied:
        assert said[-1].endswith(f"grpo/seed0 ({sft_model}): sft/seed0's evaluation, copied")
        assert copy["metrics"] == source["metrics"] and copy["wall_s"] == 0.0
        assert copy["copied_from"] == str(tmp_path / "test" / "sft/seed0") and copy["model"].endswith("grpo (test)")
        assert (folders["grpo/seed0"] / "episodes.jsonl").read_text() == (
            folders["sft/seed0"] / "episodes.jsonl"
        ).read_text()
    else:
        assert "copied_from" not in copy and copy["wall_s"] == 9.5
    protocol.evaluate_test(spec, runs, tmp_path, say=said.append)  # done: nothing evaluated or copied again
    assert len(evaluated) == 1 + len(own) and json.loads((tmp_path / protocol.TEST_LOG).read_text()) == log

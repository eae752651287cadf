"""An arm borrowed from another sweep's archive: checked to be the run this sweep would train (config, start
model's dev answers, rule, held-out settings), copied with its choice and test figures, never trained or evaluated
here, and reported beside the arms that were."""

from __future__ import annotations

import json

import pytest

import agent_trainers.pipeline.stages as stages
import agent_trainers.policies.loader as loader
from agent_trainers.evaluation.outputs import EvalFolder
from agent_trainers.experiments.borrow import borrow_held_out, borrow_runs
from agent_trainers.experiments.plan import ARCHIVED, describe, plan_runs
from agent_trainers.experiments.protocol import TEST_LOG, ProtocolError
from agent_trainers.experiments.runner import COSTS, Cost, _write_config
from agent_trainers.experiments.spec import SweepSpec
from agent_trainers.experiments.sweep import run_sweep
from tests.agent_trainers.evaluation.test_records import make

DEV = {"env_kwargs": {"task_seed": 3}, "tasks": 4}
TEST = {"env_kwargs": {"task_seed": 4}, "tasks": 4}


def sweep(arms, test=TEST, **update):
    return SweepSpec.model_validate({
        "recipe": "tiny", "set": {"rl.steps": 20, "eval.every": 10, "rl.save_steps": 10}, "metric": "em",
        "seeds": [0], "dev": DEV, "test": test, "choose": "best_dev", "arms": arms, **update,
    })  # fmt: skip


LENDER = [{"name": "sft", "stage": "sft"}, {"name": "grpo", "start": "sft"}]


def borrower(archive, **borrowed):
    gated = {"name": "grpo-gated", "start": "sft", "borrow": {"archive": str(archive), "arm": "grpo"}, **borrowed}
    outcome = {"name": "grpo-outcome", "start": "sft", "set": {"rl.learning_rate": 1.0e-6}}
    return [{"name": "sft", "stage": "sft"}, gated, outcome]


# each run's dev EM per task at its evaluations (the SFT model: its one evaluation; an RL run: steps 10 and 20)
SFT_DEV = [1, 0, 0, 0]
DEV_EMS = {"sft": {0: SFT_DEV}, "grpo": {10: [1, 1, 1, 0], 20: [1, 1, 0, 0]}, "grpo-outcome": {10: [0, 0, 0, 0],
           20: [1, 1, 0, 0]}}  # fmt: skip
TEST_EMS = {"sft": [0, 1, 0, 0], "grpo": [1, 1, 1, 1], "grpo-outcome": [0, 1, 1, 0]}


def evaluation(path, ems, spec=None, label="x"):
    out = EvalFolder(path)
    out.start(spec or {"label": label}, resume=False)
    for i, em in enumerate(ems):
        out.append(make(i, em=float(em), f1=float(em)))
    summary = {"label": label, "dataset": "calc", "episodes": len(ems), "metrics": {}, "by_type": {}}
    (path / "summary.json").write_text(json.dumps(summary))


def fake_runner(dev_ems):
    """A runner that leaves each run as the pipeline would: its config, final model, metrics and dev evaluations."""
    trained = []

    def train(run):
        trained.append(run.name)
        _write_config(run)
        (run.folder / "final").mkdir(parents=True)
        (run.folder / "final" / "agent_r1.json").write_text("{}")
        saved = run.folder / "sft" if run.start is None else run.folder / "rl" / "checkpoint-10"
        saved.mkdir(parents=True)
        (saved / "config.json").write_text("{}")
        rows = []
        for step, ems in dev_ems[run.arm.name].items():
            phase = "after_sft" if run.start is None else ("final" if step == 20 else f"rl_step_{step}")
            evaluation(run.folder / "eval" / phase, ems)
            rows.append({"stage": "eval", "step": step, "phase": phase, "em": sum(ems) / len(ems), "em_low": 0.0,
                         "em_high": 1.0})  # fmt: skip
        (run.folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return Cost(60.0 * (1 + len(trained)), None)

    return train, trained


@pytest.fixture
def fake_evaluations(monkeypatch):
    """The test set's evaluations without a model: each writes the spec the real one writes and ``TEST_EMS``."""
    evaluated = []

    def evaluate_model(config, model, tokenizer, out, *, phase, tasks=None, label=None):
        evaluated.append(label)
        arm = label.split("/")[0]
        evaluation(out, TEST_EMS[arm], stages.eval_spec(config, phase=phase, tasks=tasks, label=label).to_json())

    monkeypatch.setattr(stages, "evaluate_model", evaluate_model)
    monkeypatch.setattr(loader, "load_model", lambda *a, **k: (object(), object()))
    return evaluated


def lend(tmp_path, fake_evaluations):
    """The lender: a sweep trained, tested and archived; returns its archive."""
    archive = tmp_path / "lender_archive"
    train, _ = fake_runner(DEV_EMS)
    run_sweep(sweep(LENDER), tmp_path / "lender", runner=train, say=lambda _: None, archive=archive)
    fake_evaluations.clear()
    return archive


def test_a_borrowed_arm_is_copied_checked_and_reported_not_trained(tmp_path, fake_evaluations):
    archive = lend(tmp_path, fake_evaluations)
    spec = sweep(borrower(archive))
    assert "borrowed, not trained here: " in describe(plan_runs(spec, tmp_path / "b"))[1]
    train, trained = fake_runner(DEV_EMS)
    said = []
    result = run_sweep(spec, tmp_path / "b", runner=train, say=said.append)
    assert trained == ["sft/seed0", "grpo-outcome/seed0"]  # the borrowed arm is never trained
    assert fake_evaluations == ["sft/seed0 (test)", "grpo-outcome/seed0 (test)"]  # nor evaluated
    assert any(x.startswith("[sweep] grpo-gated/seed0: borrowed from") for x in said)
    assert "[sweep] grpo-gated/seed0 (test): the lender's evaluation, borrowed" in said
    gated = tmp_path / "b" / "seed0" / "grpo-gated"
    stamp = json.loads((gated / ARCHIVED).read_text())
    assert stamp["borrowed_from"]["run"] == "grpo/seed0" and stamp["borrowed_from"]["archive"] == str(archive)
    log = json.loads((tmp_path / "b" / TEST_LOG).read_text())["grpo-gated/seed0"]
    lent = json.loads((archive / TEST_LOG).read_text())["grpo/seed0"]
    assert log["step"] == 10 and log["borrowed_from"]["choice"] == lent["choice"] != log["choice"]
    assert log["evaluated_at"] == lent["evaluated_at"]
    costs = json.loads((tmp_path / "b" / COSTS).read_text())
    assert costs["grpo-gated/seed0"] == json.loads((archive / COSTS).read_text())["grpo/seed0"]
    # the report: the lender's step 10 (dev 0.75 against SFT's 0.25), its test EM 1.0, paired with the others
    lines = result.report.splitlines()
    assert "| grpo-gated | 0 | 10 (0.750) | 0.750 [0.250, 1.000] (n=4) | +0.500 [+0.000, +1.000] | 2 / 0 |" in (
        "\n".join(lines[:12])
    )  # dev
    assert "| grpo-gated | 0 | 0.250 | 10: 0.750, 20: 0.500 | 10 |" in lines  # its dev curve, the speed table's
    test = "\n".join(lines[lines.index("## Test (evaluated once, after the choices were frozen)") :])
    assert "| grpo-gated | 0 | 10 (0.750) | 1.000 [1.000, 1.000] (n=4) | +0.750 [+0.250, +1.000] | 3 / 0 |" in test
    assert "| grpo-gated − grpo-outcome | sft | 0 | 1.000 − 0.500 | +0.500 [+0.000, +1.000] | 2 / 0 |" in test

    said.clear()  # again: nothing is borrowed twice, nothing trained or evaluated
    again = run_sweep(spec, tmp_path / "b", runner=train, say=said.append, archive=tmp_path / "b_archive")
    assert not [x for x in said if ": borrowed from" in x or x.endswith("borrowed")] and again.report == result.report
    kept = json.loads((tmp_path / "b_archive" / "seed0" / "grpo-gated" / ARCHIVED).read_text())
    assert kept["borrowed_from"] == stamp["borrowed_from"]  # the borrower's archive still names the lender

    trained.clear()  # another machine: the borrower's archive restores all three; the lender is not read again
    moved = run_sweep(sweep(borrower(tmp_path / "gone")), tmp_path / "b2", runner=train,
                      say=said.append, archive=tmp_path / "b_archive")  # fmt: skip
    assert trained == [] and fake_evaluations == ["sft/seed0 (test)", "grpo-outcome/seed0 (test)"]
    assert moved.report == result.report  # the lender's path is not part of the definition: the same sweep


def planned(tmp_path, spec):
    """The borrower's runs with its SFT run trained (its dev answers as given in ``DEV_EMS``)."""
    runs = plan_runs(spec, tmp_path / "b")
    train, _ = fake_runner(DEV_EMS)
    train(runs[0])
    return runs


def test_a_start_model_that_answered_dev_otherwise_is_refused(tmp_path, fake_evaluations):
    archive = lend(tmp_path, fake_evaluations)
    runs = planned(tmp_path, sweep(borrower(archive)))
    borrow_runs(sweep(borrower(archive)), runs, tmp_path / "b")  # the same answers: borrowed
    assert runs[1].done

    other = tmp_path / "other"
    runs = plan_runs(sweep(borrower(archive)), other)
    train, _ = fake_runner({"sft": {0: [1, 0, 0, 1]}})  # the same mean on task 0; task 3 answered otherwise
    train(runs[0])
    with pytest.raises(ProtocolError, match=r"not the lender's .* differently on 1 of 4 tasks, first t3"):
        borrow_runs(sweep(borrower(archive)), runs, other)
    assert not (other / "seed0" / "grpo-gated").exists()


def test_a_borrowed_run_waits_for_its_start(tmp_path, fake_evaluations):
    archive = lend(tmp_path, fake_evaluations)
    runs = plan_runs(sweep(borrower(archive)), tmp_path / "b")
    with pytest.raises(ProtocolError, match="once its start sft/seed0 is finished"):
        borrow_runs(sweep(borrower(archive)), runs, tmp_path / "b")


@pytest.mark.parametrize(
    ("spec_of", "match"),
    [  # each: the borrower is not what the lender was, in one respect
        (
            lambda a: sweep(borrower(a, set={"rl.learning_rate": 3.0e-6})),
            r"grpo-gated/seed0's config differs .*"
            r"rl.learning_rate: 0.001 there, 3e-06 here",
        ),
        (
            lambda a: sweep(
                borrower(a, set={"sft.learning_rate": 1.0e-3}),  # the borrowed run as lent, its start not
                set={"rl.steps": 20, "eval.every": 10, "rl.save_steps": 10, "sft.learning_rate": 1.0e-4},
            ),
            r"sft/seed0's config differs from .*/seed0/sft's \(sft.learning_rate: 0.001 there, 0.0001 here\)",
        ),
        (lambda a: sweep(borrower(a), metric="f1"), "its sweep chose on 'em' by 'best_dev', this one on 'f1'"),
        (
            lambda a: sweep([*borrower(a)[:1], {**borrower(a)[1], "borrow": {"archive": str(a), "arm": "rft"}}]),
            "borrowed from rft/seed0, which .* does not hold",
        ),
    ],
)
def test_a_lender_that_is_not_this_run_is_refused(tmp_path, fake_evaluations, spec_of, match):
    archive = lend(tmp_path, fake_evaluations)
    spec = spec_of(archive)
    runs = planned(tmp_path, spec)
    with pytest.raises(ProtocolError, match=match):
        borrow_runs(spec, runs, tmp_path / "b")


def test_a_test_set_evaluated_otherwise_is_refused(tmp_path, fake_evaluations):
    archive = lend(tmp_path, fake_evaluations)
    spec = sweep(borrower(archive), test={**TEST, "env_kwargs": {"task_seed": 5}})
    runs = planned(tmp_path, spec)
    borrow_runs(spec, runs, tmp_path / "b")  # the runs are the same; the test set is not
    with pytest.raises(ProtocolError, match="test evaluation was made under other settings"):
        borrow_held_out(spec, runs, tmp_path / "b", "digest")
    assert not (tmp_path / "b" / TEST_LOG).exists()


def test_a_changed_choice_is_refused(tmp_path, fake_evaluations):
    archive = lend(tmp_path, fake_evaluations)
    spec = sweep(borrower(archive))
    runs = planned(tmp_path, spec)
    borrow_runs(spec, runs, tmp_path / "b")
    metrics = runs[1].folder / "metrics.jsonl"  # a dev curve that chooses step 20, not the lender's 10
    metrics.write_text(metrics.read_text().replace('"em": 0.75', '"em": 0.25'))
    with pytest.raises(ProtocolError, match="chooses step 20 on the dev curve, its lender chose 10"):
        borrow_held_out(spec, runs, tmp_path / "b", "digest")


def test_nothing_starts_from_a_borrowed_arm_and_only_rl_arms_with_a_start_are_borrowed(tmp_path):
    lent = {"archive": str(tmp_path), "arm": "grpo"}
    with pytest.raises(ValueError, match="starts from the borrowed arm grpo-gated, whose weights stayed"):
        sweep([*borrower(tmp_path)[:2], {"name": "more", "start": "grpo-gated"}])
    with pytest.raises(ValueError, match="must be an RL arm with a start arm"):
        sweep([{"name": "sft", "stage": "sft", "borrow": lent}])
    with pytest.raises(ValueError, match="must be an RL arm with a start arm"):
        sweep([{"name": "grpo", "borrow": lent}])

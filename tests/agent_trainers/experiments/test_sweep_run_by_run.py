"""A sweep tests and archives each run as soon as it is finished, so a machine lost mid-seed loses only the run it
was training; on the next machine the restored SFT run, whose weights stayed behind, is trained again for the arms
still to train and checked against its archived dev answers (the model it rebuilt must be the one tested)."""

from __future__ import annotations

import json

import pytest

from agent_trainers.experiments.archive import needing_weights
from agent_trainers.experiments.plan import ARCHIVED, plan_runs
from agent_trainers.experiments.protocol import TEST_LOG, ProtocolError
from agent_trainers.experiments.sweep import run_sweep
from tests.agent_trainers.experiments.test_sweep_borrow import DEV_EMS, LENDER, fake_evaluations, fake_runner, sweep

__all__ = ["fake_evaluations"]  # a fixture, used by name

ARMS = [*LENDER, {"name": "grpo-outcome", "start": "sft", "set": {"rl.learning_rate": 1.0e-6}}]


def lost_at(arm_name, dev_ems=DEV_EMS):
    """A runner whose machine goes when it starts training ``arm_name``."""
    train, trained = fake_runner(dev_ems)

    def runner(run):
        if run.arm.name == arm_name:
            raise RuntimeError(f"run {run.name} failed (exit -9)")
        return train(run)

    return runner, trained


def first_machine(tmp_path, fake_evaluations):
    """Seed 0 trained up to its `grpo-outcome` arm, when the machine goes; returns the archive and what was said."""
    archive, said = tmp_path / "archive", []
    runner, trained = lost_at("grpo-outcome")
    with pytest.raises(RuntimeError, match="grpo-outcome/seed0 failed"):
        run_sweep(sweep(ARMS), tmp_path / "machine1", runner=runner, say=said.append, archive=archive)
    assert trained == ["sft/seed0", "grpo/seed0"]
    return archive, said


def test_each_run_is_tested_and_archived_before_the_next_one_trains(tmp_path, fake_evaluations):
    archive, said = first_machine(tmp_path, fake_evaluations)
    events = [x for x in said if x.startswith(("[sweep] run", "[sweep] test", "[sweep] sft", "[sweep] grpo"))]
    order = [x.split(" (")[0].split(":")[0] for x in events if "skipped" not in x]
    assert order == [
        "[sweep] run 1/3 sft/seed0", "[sweep] run 1/3 sft/seed0 done in 2.0 min", "[sweep] test 1/1",
        "[sweep] sft/seed0 tested and archived in " + str(archive),
        "[sweep] run 2/3 grpo/seed0", "[sweep] run 2/3 grpo/seed0 done in 3.0 min", "[sweep] test 2/2",
        "[sweep] grpo/seed0 tested and archived in " + str(archive),
        "[sweep] run 3/3 grpo-outcome/seed0",
    ]  # fmt: skip
    assert fake_evaluations == ["sft/seed0 (test)", "grpo/seed0 (test)"]  # each once, though evaluate_test ran twice
    assert (archive / "seed0" / "sft" / ARCHIVED).is_file() and (archive / "seed0" / "grpo" / ARCHIVED).is_file()
    assert not (archive / "seed0" / "grpo-outcome").exists()
    assert set(json.loads((archive / TEST_LOG).read_text())) == {"sft/seed0", "grpo/seed0"}


def test_the_next_machine_rebuilds_the_sft_weights_checks_them_and_trains_only_what_is_missing(
    tmp_path, fake_evaluations
):
    archive, _ = first_machine(tmp_path, fake_evaluations)
    fake_evaluations.clear()
    said = []
    train, trained = fake_runner(DEV_EMS)
    second = tmp_path / "machine2"
    result = run_sweep(sweep(ARMS), second, runner=train, say=said.append, archive=archive)

    assert said[0] == f"[sweep] restored from {archive}: sft/seed0, grpo/seed0 (results without weights)"
    assert trained == ["sft/seed0", "grpo-outcome/seed0"]  # the SFT run again (for its weights), the lost arm
    rebuilt = [x for x in said if "trained again" in x]
    assert len(rebuilt) == 2 and "equal the archived ones, 4 of 4" in rebuilt[1]
    sft = second / "seed0" / "sft"
    assert (sft / "sft" / "config.json").is_file() and (sft / ARCHIVED).is_file()
    assert not (second / "seed0" / ".sft-weights").exists()  # the scratch folder is gone
    assert fake_evaluations == ["grpo-outcome/seed0 (test)"]  # the archived runs are not evaluated again
    log = json.loads((archive / TEST_LOG).read_text())
    assert set(log) == {"sft/seed0", "grpo/seed0", "grpo-outcome/seed0"}
    # the paired difference of the new arm is read against the archived SFT test figures (TEST_EMS 1/4 -> 2/4)
    assert any(x.startswith("| grpo-outcome | 0 |") for x in result.report.splitlines())


def test_a_rebuilt_start_that_answers_dev_otherwise_is_refused_before_anything_starts_from_it(
    tmp_path, fake_evaluations
):
    archive, _ = first_machine(tmp_path, fake_evaluations)
    other = {**DEV_EMS, "sft": {0: [1, 1, 0, 0]}}  # the SFT run, trained again, answers task 1 otherwise
    train, trained = fake_runner(other)
    second = tmp_path / "machine2"
    with pytest.raises(ProtocolError, match=r"sft/seed0 trained again is not the archived run: .* on 1 of 4 tasks"):
        run_sweep(sweep(ARMS), second, runner=train, say=lambda _: None, archive=archive)
    assert trained == ["sft/seed0"]  # grpo-outcome never started from it
    assert not (second / "seed0" / "sft" / "sft").exists()  # no weights moved in
    assert (second / "seed0" / ".sft-weights" / "sft" / "config.json").is_file()  # kept for a look


def test_weights_are_rebuilt_only_for_runs_still_to_train_and_through_a_chain(tmp_path):
    arms = [*ARMS, {"name": "grpo-more", "start": "grpo"}]
    sft, grpo, outcome, more = plan_runs(sweep(arms), tmp_path)

    def restore(run):
        run.folder.mkdir(parents=True, exist_ok=True)
        (run.folder / ARCHIVED).write_text("{}")

    for run in (sft, grpo, outcome, more):
        restore(run)
    assert needing_weights([sft, grpo, outcome, more]) == []  # all restored: nothing trains, nothing is rebuilt
    (more.folder / ARCHIVED).unlink()  # grpo-more is still to train: grpo, and grpo's start, are needed
    assert [r.name for r in needing_weights([sft, grpo, outcome, more])] == ["sft/seed0", "grpo/seed0"]
    (grpo.folder / "final").mkdir()
    (grpo.folder / "final" / "config.json").write_text("{}")  # grpo has its weights: only they are needed
    assert needing_weights([sft, grpo, outcome, more]) == []


def stopped_while_grpo_is_tested(out, monkeypatch, archive=None):
    """Seed 0 trained up to its `grpo` arm, then Ctrl-C while grpo's test set is evaluated (evaluation restored
    afterwards); returns the runner and the runs it trained."""
    import agent_trainers.pipeline.stages as stages

    real = stages.evaluate_model

    def killed_at_grpo(config, model, tokenizer, where, *, phase, tasks=None, label=None):
        if label.startswith("grpo/"):
            raise KeyboardInterrupt
        return real(config, model, tokenizer, where, phase=phase, tasks=tasks, label=label)

    monkeypatch.setattr(stages, "evaluate_model", killed_at_grpo)
    train, trained = fake_runner(DEV_EMS)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep(ARMS), out, runner=train, say=lambda _: None, archive=archive)
    monkeypatch.setattr(stages, "evaluate_model", real)
    return train, trained


def test_a_run_finished_but_not_tested_when_the_sweep_stopped_is_tested_before_the_next_one_trains(
    tmp_path, fake_evaluations, monkeypatch
):
    out, archive = tmp_path / "machine1", tmp_path / "archive"
    train, trained = stopped_while_grpo_is_tested(out, monkeypatch, archive)
    assert trained == ["sft/seed0", "grpo/seed0"] and not (archive / "seed0" / "grpo").exists()

    said: list[str] = []
    run_sweep(sweep(ARMS), out, runner=train, say=said.append, archive=archive)
    events = [x.split(" (")[0] for x in said if x.startswith(("[sweep] run", "[sweep] test", "[sweep] grpo/"))]
    assert events[1:5] == [
        "[sweep] run 2/3 grpo/seed0: done earlier, skipped", "[sweep] test 2/2: grpo/seed0",
        f"[sweep] grpo/seed0 tested and archived in {archive}", "[sweep] run 3/3 grpo-outcome/seed0: grpo -> "
        f"{out / 'seed0' / 'grpo-outcome'}",
    ]  # fmt: skip
    assert trained == ["sft/seed0", "grpo/seed0", "grpo-outcome/seed0"]


def test_the_same_machine_going_on_says_which_finished_runs_were_archived_already(tmp_path, fake_evaluations):
    """The sweep resumed where it stopped (weights still there): runs finished and archived before are passed
    over as unchanged, and only the new one is said to be archived."""
    archive, _ = first_machine(tmp_path, fake_evaluations)
    said = []
    train, trained = fake_runner(DEV_EMS)
    run_sweep(sweep(ARMS), tmp_path / "machine1", runner=train, say=said.append, archive=archive)
    assert trained == ["grpo-outcome/seed0"]
    archived = [x for x in said if "archived in" in x or "unchanged" in x]
    assert archived[:3] == [
        f"[sweep] sft/seed0: already in {archive}, unchanged",
        f"[sweep] grpo/seed0: already in {archive}, unchanged",
        f"[sweep] grpo-outcome/seed0 tested and archived in {archive}",
    ]


def test_a_report_of_a_sweep_still_growing_shows_the_tested_runs_and_trains_nothing(tmp_path, fake_evaluations):
    """``--report`` on another machine while seed 0's third arm is still to train: the archive's two runs are
    reported (the test EMs of ``TEST_EMS``: sft 0.25, grpo 1.00, paired +0.75), the third is named as missing,
    nothing is trained or evaluated, and the growing sweep then goes on from the same archive as before."""
    archive, _ = first_machine(tmp_path, fake_evaluations)
    fake_evaluations.clear()
    train, trained = fake_runner(DEV_EMS)
    said: list[str] = []
    result = run_sweep(sweep(ARMS), tmp_path / "report", runner=train, say=said.append, archive=archive,
                       report_only=True)  # fmt: skip
    assert trained == [] and fake_evaluations == []
    assert [r.name for r in result.runs] == ["sft/seed0", "grpo/seed0"]
    text = result.report
    assert "Partial report (`--report`: nothing was trained or evaluated for it): 2 of 3 runs; not finished and " \
           "tested yet: grpo-outcome/seed0." in text  # fmt: skip
    test = text.split("## Test")[1]
    assert "| sft | 0 | — | 0.250 [0.000, 0.750] (n=4) |" in test
    assert "| grpo | 0 | 10 (0.750) | 1.000 [1.000, 1.000] (n=4) | +0.750 [+0.250, +1.000] | 3 / 0 |" in test
    assert "grpo-outcome" not in text.split("tested yet:")[1].split("\n", 1)[1]
    assert not (tmp_path / "report" / "seed0" / "grpo-outcome").exists()

    run_sweep(sweep(ARMS), tmp_path / "machine1", runner=train, say=lambda _: None, archive=archive)
    assert trained == ["grpo-outcome/seed0"] and fake_evaluations == ["grpo-outcome/seed0 (test)"]


def test_a_report_with_nothing_finished_says_so(tmp_path, fake_evaluations):
    train, trained = fake_runner(DEV_EMS)
    with pytest.raises(ProtocolError, match=r"no run of .* is finished and tested yet"):
        run_sweep(sweep(ARMS), tmp_path / "empty", runner=train, say=lambda _: None, report_only=True)
    assert trained == []


def test_a_report_leaves_out_a_run_finished_but_not_tested_and_does_not_test_it(
    tmp_path, fake_evaluations, monkeypatch
):
    out = tmp_path / "machine1"
    train, trained = stopped_while_grpo_is_tested(out, monkeypatch)
    fake_evaluations.clear()
    result = run_sweep(sweep(ARMS), out, runner=train, say=lambda _: None, report_only=True)
    assert [r.name for r in result.runs] == ["sft/seed0"] and fake_evaluations == []
    assert "1 of 3 runs; not finished and tested yet: grpo/seed0, grpo-outcome/seed0." in result.report
    dev = run_sweep(sweep(ARMS), out, runner=train, say=lambda _: None, report_only=True, dev_only=True)
    assert [r.name for r in dev.runs] == ["sft/seed0", "grpo/seed0"] and "not finished yet: grpo-outcome" in dev.report
    assert trained == ["sft/seed0", "grpo/seed0"] and fake_evaluations == []


def test_one_arm_runs_with_the_arm_it_starts_from_and_the_whole_sweep_goes_on_in_the_same_folder(
    tmp_path, fake_evaluations
):
    """``--arms grpo-outcome``: sft (its start) and grpo-outcome are trained and tested, grpo is not; the report
    names the arms left out; the test log is the whole sweep's, so running every arm later in the same folder trains
    only grpo (a sweep digest of the selection alone would refuse the folder). Test EMs of ``TEST_EMS``: sft 0.25,
    grpo-outcome 0.50, paired +0.25 (one task won, none lost)."""
    out = tmp_path / "one-arm"
    train, trained = fake_runner(DEV_EMS)
    result = run_sweep(sweep(ARMS), out, runner=train, say=lambda _: None, arms=["grpo-outcome"])
    assert trained == ["sft/seed0", "grpo-outcome/seed0"]
    assert fake_evaluations == ["sft/seed0 (test)", "grpo-outcome/seed0 (test)"]
    assert [r.name for r in result.runs] == ["sft/seed0", "grpo-outcome/seed0"]
    assert "Arms run and reported (`--arms`): sft, grpo-outcome; the sweep's other arms: grpo." in result.report
    test = result.report.split("## Test")[1]
    assert "| grpo-outcome | 0 | 20 (0.500) | 0.500 [0.000, 1.000] (n=4) | +0.250 [+0.000, +0.750] | 1 / 0 |" in test
    assert "| grpo |" not in result.report

    fake_evaluations.clear()
    everything = run_sweep(sweep(ARMS), out, runner=train, say=lambda _: None)
    assert trained == ["sft/seed0", "grpo-outcome/seed0", "grpo/seed0"] and fake_evaluations == ["grpo/seed0 (test)"]
    assert [r.name for r in everything.runs] == ["sft/seed0", "grpo/seed0", "grpo-outcome/seed0"]


def test_an_arm_the_sweep_does_not_have_is_a_clear_error(tmp_path, fake_evaluations):
    train, trained = fake_runner(DEV_EMS)
    with pytest.raises(ValueError, match="no arm grpo-outcom in this sweep; its arms: sft, grpo, grpo-outcome"):
        run_sweep(sweep(ARMS), tmp_path / "x", runner=train, say=lambda _: None, arms=["grpo-outcom"])
    assert trained == []

"""The paper's Table 3 in a sweep: transfer sets evaluated once like the test set (each in its own env), the
untrained baselines beside the arms, the table's numbers, and both kept by the archive. Evaluations are played by a
stand-in of ``evaluate_model`` that writes what it writes (the real one runs in the slow tiny sweeps)."""

from __future__ import annotations

import json

import pytest

from agent_trainers.evaluation.outputs import EvalFolder
from agent_trainers.experiments import protocol, transfer
from agent_trainers.experiments.archive import archive_baselines, archive_runs, restore_runs
from agent_trainers.experiments.plan import ARCHIVED, plan_runs
from agent_trainers.experiments.protocol import ProtocolError, frozen_test_folders, sweep_digest
from agent_trainers.experiments.spec import SweepSpec
from tests.agent_trainers.evaluation.test_report import folder as eval_folder
from tests.agent_trainers.experiments.test_protocol import DEV, TEST, finished

MUSIQUE = {"env": "AgentR1/MuSiQue-v0", "env_kwargs": {"split": "test"}, "tasks": 3}


def sweep(seeds=(0,), **more):
    return SweepSpec.model_validate({
        "recipe": "tiny", "set": {"rl.steps": 20, "eval.every": 10, "rl.save_steps": 10}, "seeds": list(seeds),
        "dev": DEV, "test": TEST, "choose": "best_dev",
        "arms": [{"name": "sft", "stage": "sft"}, {"name": "grpo", "start": "sft"}], **more,
    })  # fmt: skip


@pytest.fixture
def played(monkeypatch):
    """Stand in for the model loader and ``evaluate_model``; returns the list of evaluations made:
    ``(env id, method, model, label, first task, tasks)``."""
    from agent_trainers.pipeline import stages
    from agent_trainers.policies import loader

    made = []

    def evaluate(config, model, tokenizer, out, *, phase, tasks, label, method=None):
        spec = stages.eval_spec(config, phase=phase, tasks=tasks, label=label, method=method)
        made.append((config.env.id, spec.method.value, model, label, tasks[1], tasks[2]))
        folder = EvalFolder(out)
        folder.start(spec.to_json(), resume=False)
        (out / "episodes.jsonl").write_text(json.dumps({"task_index": 0, "model": model}) + "\n")
        em = {"mean": 0.5, "low": 0.25, "high": 0.75, "n": 3}
        folder.write_summary({"label": label, "model": str(model), "dataset": "toy", "episodes": 3,
                              "metrics": {"em": em}, "by_type": {}, "wall_s": 1.0})  # fmt: skip

    monkeypatch.setattr(stages, "evaluate_model", evaluate)
    monkeypatch.setattr(loader, "load_model", lambda path, **kw: (path, None))
    return made


def test_transfer_sets_and_baselines_choose_nothing_so_the_definition_stays():
    plain = sweep()
    more = sweep(transfer={"musique": MUSIQUE}, baselines=["closed-book"])
    assert sweep_digest(more) == sweep_digest(plain)
    assert sweep_digest(sweep(test={**TEST, "tasks": 11})) != sweep_digest(plain)  # the test set does choose


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"test": None, "transfer": {"musique": MUSIQUE}}, "name a test set"),
        ({"test": None, "baselines": ["closed-book"]}, "name a test set"),
        ({"transfer": {"test": MUSIQUE}}, "other than 'test'"),
        ({"transfer": {"a/b": MUSIQUE}}, "folder names"),
        ({"baselines": ["agent"]}, "baselines are distinct names"),
        ({"baselines": ["naive-rag", "naive-rag"]}, "baselines are distinct names"),
    ],
)
def test_a_transfer_set_or_baseline_that_cannot_be_evaluated_is_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        sweep(**changes)


@pytest.mark.parametrize("grpo_beat_sft", [True, False])
def test_each_chosen_model_is_evaluated_once_on_each_transfer_set_in_its_env(tmp_path, played, grpo_beat_sft):
    spec = sweep(transfer={"musique": MUSIQUE})
    rl = ((10, 0.735), (20, 0.61)) if grpo_beat_sft else ((10, 0.60), (20, 0.675))
    sft, grpo = runs = finished(tmp_path, spec, rl=rl)
    said: list[str] = []
    protocol.evaluate_test(spec, runs, tmp_path, say=said.append)
    sft_model, grpo_model = str(sft.folder / "sft"), str(grpo.folder / "rl" / "checkpoint-10")
    test_env = sft.config.env.id
    on_test = [(test_env, "agent", sft_model, "sft/seed0 (test)", 0, 10)]
    on_musique = [("AgentR1/MuSiQue-v0", "agent", sft_model, "sft/seed0 (musique)", 0, 3)]
    if grpo_beat_sft:
        on_test.append((test_env, "agent", grpo_model, "grpo/seed0 (test)", 0, 10))
        on_musique.append(("AgentR1/MuSiQue-v0", "agent", grpo_model, "grpo/seed0 (musique)", 0, 3))
    assert played == on_test + on_musique  # the test set first; a model evaluated once per set
    folders = frozen_test_folders(spec, runs, tmp_path, "musique")
    assert folders == {r.name: tmp_path / "transfer" / "musique" / r.name for r in runs}
    log = json.loads((tmp_path / "transfer" / "musique_log.json").read_text())
    assert log["grpo/seed0"]["step"] == (10 if grpo_beat_sft else 0)
    assert log["grpo/seed0"].get("copied_from") == (None if grpo_beat_sft else "sft/seed0")
    assert said[-1].startswith("[sweep] transfer musique 2/2: grpo/seed0")
    copy = json.loads((folders["grpo/seed0"] / "spec.json").read_text())
    assert copy["env_id"] == "AgentR1/MuSiQue-v0" and copy["label"] == "grpo/seed0 (musique)"
    protocol.evaluate_test(spec, runs, tmp_path, say=said.append)  # done: nothing again
    assert len(played) == len(on_test) + len(on_musique)
    with pytest.raises(KeyError):
        frozen_test_folders(spec, runs, tmp_path, "2wiki")


def test_a_transfer_set_named_later_needs_the_weights_an_archive_lacks(tmp_path, played):
    spec = sweep()
    runs = finished(tmp_path, spec)
    protocol.evaluate_test(spec, runs, tmp_path)
    for run in runs:  # as restore_runs leaves a run: results and a stamp, no weights
        (run.folder / ARCHIVED).write_text("{}")
    later = sweep(transfer={"musique": MUSIQUE})
    with pytest.raises(ProtocolError, match="sft/seed0 was restored from an archive, without its weights"):
        protocol.evaluate_test(later, runs, tmp_path)
    assert len(played) == 2  # the test set's two evaluations, nothing on musique


def test_baselines_are_evaluated_once_per_set_with_the_base_model(tmp_path, played):
    spec = sweep(transfer={"musique": MUSIQUE}, baselines=["closed-book", "base-tool-call"])
    runs = plan_runs(spec, tmp_path)
    said: list[str] = []
    transfer.evaluate_baselines(spec, runs, tmp_path, say=said.append)
    test_env, base = runs[0].config.env.id, runs[0].config.model.name
    assert played == [
        (test_env, "closed-book", base, "closed-book", 0, 10),
        (test_env, "base-tool-call", base, "base-tool-call", 0, 10),
        ("AgentR1/MuSiQue-v0", "closed-book", base, "closed-book", 0, 3),
        ("AgentR1/MuSiQue-v0", "base-tool-call", base, "base-tool-call", 0, 3),
    ]
    assert said[0] == "[sweep] baseline 1/4: closed-book on test"
    found = transfer.baseline_folders(spec, tmp_path)
    assert found["closed-book"] == {"test": tmp_path / "baselines/test/closed-book",
                                    "musique": tmp_path / "baselines/musique/closed-book"}  # fmt: skip
    transfer.evaluate_baselines(spec, runs, tmp_path)  # done: kept
    assert len(played) == 4
    fewer = sweep(transfer={"musique": {**MUSIQUE, "tasks": 2}}, baselines=["closed-book"])
    transfer.evaluate_baselines(fewer, plan_runs(fewer, tmp_path), tmp_path)  # another spec: evaluated again
    assert played[4:] == [("AgentR1/MuSiQue-v0", "closed-book", base, "closed-book", 0, 2)]


def test_the_table_holds_baselines_and_the_arms_mean_over_seeds_with_paired_differences(tmp_path):
    spec = sweep(seeds=(0, 1), transfer={"musique": MUSIQUE}, baselines=["closed-book"])
    runs = plan_runs(spec, tmp_path)
    ems = {  # per set, per run: EM on 4 tasks
        "test": {"sft/seed0": [1, 0, 0, 0], "grpo/seed0": [1, 1, 0, 0], "sft/seed1": [0, 0, 0, 0],
                 "grpo/seed1": [1, 0, 1, 0]},
        "musique": {"sft/seed0": [0, 0, 0, 0], "grpo/seed0": [0, 0, 0, 0], "sft/seed1": [1, 1, 0, 0],
                    "grpo/seed1": [1, 0, 0, 0]},
    }  # fmt: skip
    folders = {s: {r: eval_folder(tmp_path, f"{r}-{s}".replace("/", "_"), s, v) for r, v in e.items()}
               for s, e in ems.items()}  # fmt: skip
    baselines = {"closed-book": {"test": eval_folder(tmp_path, "cb", "test", [1, 1, 1, 0])}}  # none on musique
    table = transfer.transfer_table(runs, "em", ["test", "musique"], folders, baselines).splitlines()
    assert table[0] == "| method | test | musique |"
    assert table[2].startswith("| closed-book | 0.750 [") and table[2].endswith("| — |")
    assert table[3] == "| sft (seeds 0, 1) | 0.125 | 0.250 |"  # (0.25 + 0) / 2, (0 + 0.5) / 2
    # grpo: test (0.5 + 0.5) / 2 = 0.5, paired Δ over the 8 tasks: 3 wins / 8 = +0.375; musique 0.125, Δ -1/8
    assert table[4].startswith("| grpo (seeds 0, 1) | 0.500 (Δ +0.375 [") and "| 0.125 (Δ -0.125 [" in table[4]
    with pytest.raises(ValueError, match="no task has the metric 'substring'"):  # absent is not 0
        transfer.transfer_table(runs, "substring", ["test"], folders, {})


def test_the_archive_keeps_transfer_evaluations_and_baselines(tmp_path, played):
    spec = sweep(transfer={"musique": MUSIQUE}, baselines=["naive-rag"])
    out, archive = tmp_path / "machine1", tmp_path / "archive"
    runs = finished(out, spec)
    for run in runs:
        (run.folder / "eval").mkdir(exist_ok=True)
        (run.folder / "final").mkdir(exist_ok=True)
        (run.folder / "final" / "agent_r1.json").write_text("{}")
    protocol.evaluate_test(spec, runs, out)
    transfer.evaluate_baselines(spec, runs, out)
    archive_runs(runs, out, archive)
    assert archive_baselines(out, archive) == ["musique/naive-rag", "test/naive-rag"]
    assert archive_baselines(out, archive) == []  # unchanged: nothing rewritten
    assert (archive / "transfer" / "musique" / "grpo" / "seed0" / "summary.json").is_file()
    assert set(json.loads((archive / "transfer" / "musique_log.json").read_text())) == {"sft/seed0", "grpo/seed0"}

    second = tmp_path / "machine2"
    moved = plan_runs(spec, second)
    assert restore_runs(moved, second, archive) == ["sft/seed0", "grpo/seed0"]
    folders = frozen_test_folders(spec, moved, second, "musique")
    assert all((f / "summary.json").is_file() for f in folders.values())
    assert transfer.baseline_folders(spec, second) == {
        "naive-rag": {"test": second / "baselines/test/naive-rag", "musique": second / "baselines/musique/naive-rag"}
    }
    transfer.evaluate_baselines(spec, moved, second)  # restored: not evaluated again
    protocol.evaluate_test(spec, moved, second)
    assert len(played) == 2 + 2 + 2  # test and musique: sft, grpo (its step-10 checkpoint); the two baselines

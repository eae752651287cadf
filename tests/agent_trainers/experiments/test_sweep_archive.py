"""A sweep that grows seed by seed across machines (``--archive``): a tested seed's results, without weights, are
archived; on a fresh machine they are restored, neither trained nor tested again, and reported beside new seeds;
a changed definition is refused once the test set was looked at."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agent_trainers.experiments.archive import archive_runs
from agent_trainers.experiments.plan import ARCHIVED, plan_runs
from agent_trainers.experiments.protocol import TEST_LOG, ProtocolError, sweep_digest
from agent_trainers.experiments.runner import run_in_process
from agent_trainers.experiments.spec import SweepSpec, load_sweep
from agent_trainers.experiments.sweep import run_sweep


def tiny_sweep(**update):
    return SweepSpec.model_validate({
        "recipe": "tiny", "set": {"sft.episodes": 2, "rl.steps": 1, "eval.every": 1, "rl.save_steps": 1},
        "metric": "f1", "seeds": [0], "choose": "final",
        "dev": {"env_kwargs": {"split": "test"}, "tasks": 2}, "test": {"env_kwargs": {"split": "test"},
        "first_task": 2, "tasks": 2}, "arms": [{"name": "sft", "stage": "sft"}, {"name": "grpo", "start": "sft"}],
        **update,
    })  # fmt: skip


def finished(run, f1: float) -> None:
    """Make ``run`` look trained: a final model marker, a metrics file and one dev evaluation."""
    (run.folder / "final").mkdir(parents=True)
    (run.folder / "final" / "agent_r1.json").write_text("{}")
    (run.folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.5}) + "\n")
    (run.folder / "eval" / "final").mkdir(parents=True)
    (run.folder / "eval" / "final" / "summary.json").write_text(json.dumps({"f1": f1}))
    record = {"task": "q1", "scores": {"f1": f1}, "trajectory": [{"role": "user", "content": "q"}]}
    (run.folder / "eval" / "final" / "episodes.jsonl").write_text(json.dumps(record) + "\n")


def test_archiving_again_leaves_unchanged_runs_as_they_were(tmp_path):
    """Each ``sweep --archive`` archives every finished seed again: an unchanged run keeps its stamp (a committed
    archive shows no churn), a changed one is stamped anew, and trajectories never reach the archive."""
    out, archive = tmp_path / "sweep", tmp_path / "archive"
    sft, grpo = plan_runs(tiny_sweep(), out)
    finished(sft, 0.25)
    finished(grpo, 0.5)
    assert archive_runs([sft, grpo], out, archive) == ["grpo/seed0", "sft/seed0"]
    stamps = {r.name: archive / r.folder.relative_to(out) / ARCHIVED for r in (sft, grpo)}
    first = {name: p.read_text() for name, p in stamps.items()}
    episodes = archive / "seed0" / "grpo" / "eval" / "final" / "episodes.jsonl"
    assert json.loads(episodes.read_text()) == {"task": "q1", "scores": {"f1": 0.5}}
    for p in stamps.values():  # a stamp from a day ago: any rewrite would show
        p.write_text(p.read_text().replace('"archived_at": "', '"archived_at": "yesterday '))
    before = {name: p.read_text() for name, p in stamps.items()}

    assert archive_runs([sft, grpo], out, archive) == []  # nothing changed
    assert {name: p.read_text() for name, p in stamps.items()} == before

    (grpo.folder / "eval" / "final" / "summary.json").write_text(json.dumps({"f1": 0.75}))
    assert archive_runs([sft, grpo], out, archive) == ["grpo/seed0"]  # grpo's evaluation changed; sft's did not
    assert stamps["sft/seed0"].read_text() == before["sft/seed0"]
    assert (
        stamps["grpo/seed0"].read_text() != before["grpo/seed0"] and "yesterday" not in stamps["grpo/seed0"].read_text()
    )
    assert json.loads((archive / "seed0" / "grpo" / "eval" / "final" / "summary.json").read_text()) == {"f1": 0.75}
    assert first["sft/seed0"].startswith('{"run": "sft/seed0"')

    stamps["sft/seed0"].unlink()  # an archive cut before its stamps were written: the run is stamped again
    assert archive_runs([sft, grpo], out, archive) == ["sft/seed0"]
    assert stamps["sft/seed0"].is_file() and "yesterday" not in stamps["sft/seed0"].read_text()


@pytest.mark.slow  # ~60 s (two tiny sweeps); CI runs it after the default suite
def test_a_sweep_grows_by_a_seed_on_another_machine_from_its_archive(tmp_path, one_thread):
    archive, first, second = tmp_path / "archive", tmp_path / "machine1", tmp_path / "machine2"
    said: list[str] = []
    one = run_sweep(tiny_sweep(), first, runner=run_in_process, say=said.append, archive=archive)
    assert "[sweep] seed 0 archived in" in said[-1] and sum("[sweep] test" in x for x in said) == 2
    # the archive: results, no weights, no trajectories
    files = [p for p in archive.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix in (".safetensors", ".bin", ".pt")]
    assert sum(p.stat().st_size for p in files) < 200_000
    episodes = [json.loads(x) for p in files if p.name == "episodes.jsonl" for x in p.read_text().splitlines()]
    assert episodes and not any("trajectory" in r for r in episodes) and all("scores" in r for r in episodes)
    assert (archive / "seed0" / "grpo" / "eval" / "final" / "summary.json").is_file()
    assert set(json.loads((archive / TEST_LOG).read_text())) == {"sft/seed0", "grpo/seed0"}
    shutil.rmtree(first)  # the machine is gone

    said.clear()
    grown = run_sweep(tiny_sweep(seeds=[0, 1]), second, runner=run_in_process, say=said.append, archive=archive)
    assert said[0].startswith("[sweep] restored from") and "sft/seed0, grpo/seed0" in said[0]
    trained = [x for x in said if x.startswith("[sweep] run") and "skipped" not in x and "done in" not in x]
    assert [x.split(": ")[0].split()[-1] for x in trained] == ["sft/seed1", "grpo/seed1"]
    assert [x.split(": ")[1].split()[0] for x in said if x.startswith("[sweep] test")] == ["sft/seed1", "grpo/seed1"]
    # seed 0's rows are the first machine's, to the digit; seed 1's stand beside them
    seed0 = [x for x in one.report.splitlines() if x.startswith("| ") and " | 0 |" in x]
    assert seed0 and all(x in grown.report.splitlines() for x in seed0)
    assert any(x.startswith("| grpo | 1 |") for x in grown.report.splitlines())
    assert set(json.loads((archive / TEST_LOG).read_text())) == {
        f"{a}/seed{s}" for a in ("sft", "grpo") for s in (0, 1)
    }

    # the definition changed after its test set was looked at: refused before anything is trained
    said.clear()
    with pytest.raises(ProtocolError, match="under another definition of the sweep"):
        run_sweep(tiny_sweep(choose="best_dev", seeds=[0, 2]), tmp_path / "machine3", runner=run_in_process,
                  say=said.append, archive=archive)  # fmt: skip
    assert said[0].startswith("[sweep] restored from") and len(said) == 1  # seed 2 was not trained


ARCHIVES = Path(__file__).resolve().parents[3] / "docs" / "results" / "sweeps"


@pytest.mark.parametrize("archive", sorted(p.parent.name for p in ARCHIVES.glob("*/choices.json")))
def test_the_committed_archives_still_belong_to_their_sweeps(archive):
    """A change to how a definition is hashed, or to a packaged sweep or recipe that an archive was tested under,
    would make every later seed of that sweep refused: each committed archive's digest is its sweep's today."""
    frozen = json.loads((ARCHIVES / archive / "choices.json").read_text())
    assert sweep_digest(load_sweep(archive), {"threads": 2}) == frozen["sweep"]


@pytest.mark.slow  # ~40 s (a tiny SFT run trained twice, one RL run); CI runs it after the default suite
def test_a_machine_lost_mid_seed_keeps_the_tested_sft_run_and_the_next_one_rebuilds_it_exactly(tmp_path, one_thread):
    """The real pipeline, not a fake: the SFT run trained again on the second machine answers dev exactly as the
    archived one did (so its weights are taken), and only the lost RL arm is trained and tested."""
    archive, said = tmp_path / "archive", []

    def lost_at_grpo(run):
        if run.arm.name == "grpo":
            raise RuntimeError(f"run {run.name} failed (exit -9)")
        return run_in_process(run)

    with pytest.raises(RuntimeError, match="grpo/seed0 failed"):
        run_sweep(tiny_sweep(), tmp_path / "machine1", runner=lost_at_grpo, say=said.append, archive=archive)
    assert (archive / "seed0" / "sft" / ARCHIVED).is_file() and not (archive / "seed0" / "grpo").exists()
    shutil.rmtree(tmp_path / "machine1")

    said.clear()
    result = run_sweep(tiny_sweep(), tmp_path / "machine2", runner=run_in_process, say=said.append, archive=archive)
    rebuilt = [x for x in said if "trained again in" in x and "equal the archived ones" in x]
    assert len(rebuilt) == 1 and "2 of 2" in rebuilt[0]
    assert [x.split(": ")[1].split()[0] for x in said if x.startswith("[sweep] test")] == ["grpo/seed0"]
    assert set(json.loads((archive / TEST_LOG).read_text())) == {"sft/seed0", "grpo/seed0"}
    assert any(x.startswith("| grpo | 0 |") for x in result.report.splitlines())

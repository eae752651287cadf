"""Checkpoint completeness: an empty, partial or damaged checkpoint never blocks a resume, and is named."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from agent_trainers.algorithms.shared.checkpoints import (
    ACCELERATE_CHECKPOINT,
    ROLLOUT_STATE,
    TRAINER_CHECKPOINT,
    DiskSpaceCheck,
    DropOlderResumeState,
    checkpoint_growth,
    drop_resume_state,
    last_complete_checkpoint,
    load_rollout_state,
    missing_parts,
)
from agent_trainers.rollout.training import EnvRollouts


def complete(folder, layout=TRAINER_CHECKPOINT):
    """A checkpoint folder with every file of ``layout``, each a real file of its kind."""
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    (folder / ROLLOUT_STATE).write_text(json.dumps({"calls": 1, "seed": 0}))
    save_file({"w": torch.arange(256, dtype=torch.float32)}, folder / "model.safetensors")
    names = ("optimizer.pt", "scheduler.pt", "rng_state.pth")
    if layout is ACCELERATE_CHECKPOINT:
        names = ("optimizer.bin", "scheduler.bin", "random_states_0.pkl")
    for name in names:
        torch.save({"state": {0: {"exp_avg": torch.randn(256)}}, "name": name}, folder / name)
    return folder


def test_newest_complete_checkpoint_wins_and_leftovers_are_skipped_with_a_warning(tmp_path):
    complete(tmp_path / "checkpoint-2")
    complete(tmp_path / "checkpoint-10")
    (tmp_path / "checkpoint-12").mkdir()  # a run killed while saving left it empty
    partial = complete(tmp_path / "checkpoint-11")
    (partial / ROLLOUT_STATE).unlink()  # model saved, rollout state not yet
    (tmp_path / "checkpoint-x").mkdir()
    with pytest.warns(UserWarning) as caught:
        assert last_complete_checkpoint(tmp_path) == tmp_path / "checkpoint-10"  # numeric, not lexical, order
    messages = [str(w.message) for w in caught]
    assert any("checkpoint-12" in m and "trainer_state.json" in m and "model weights" in m for m in messages)
    assert any("checkpoint-11" in m and ROLLOUT_STATE in m for m in messages)
    assert missing_parts(tmp_path / "checkpoint-2") == []


def cut_in_half(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


DAMAGE = {
    "optimizer.pt missing": lambda f: (f / "optimizer.pt").unlink(),
    "scheduler.pt missing": lambda f: (f / "scheduler.pt").unlink(),
    "rng_state.pth or rng_state_0.pth missing": lambda f: (f / "rng_state.pth").unlink(),
    "model.safetensors unreadable: SafetensorError": lambda f: cut_in_half(f / "model.safetensors"),
    "optimizer.pt unreadable: BadZipFile": lambda f: cut_in_half(f / "optimizer.pt"),
    "trainer_state.json unreadable: JSONDecodeError: Expecting value": lambda f: (f / "trainer_state.json").write_text(
        ""
    ),
    f"{ROLLOUT_STATE} unreadable: JSONDecodeError": lambda f: cut_in_half(f / ROLLOUT_STATE),
}


@pytest.mark.parametrize("problem", list(DAMAGE))
def test_a_damaged_checkpoint_falls_back_to_the_previous_one_naming_the_file(tmp_path, problem):
    """A file the trainer reads back that is missing, cut short or empty makes the checkpoint incomplete: the
    resume takes the one before, with a warning that names the file (transformers would resume without an
    optimizer or schedule, or stop with a traceback naming no file)."""
    complete(tmp_path / "checkpoint-1")
    DAMAGE[problem](complete(tmp_path / "checkpoint-2"))
    with pytest.warns(UserWarning, match=rf"skipping incomplete checkpoint .*checkpoint-2 \({problem}"):
        assert last_complete_checkpoint(tmp_path, TRAINER_CHECKPOINT) == tmp_path / "checkpoint-1"


def test_a_record_that_fails_its_crc_check_is_named(tmp_path):
    """A flipped byte in a tensor's data (the file keeps its length) fails that record's CRC check."""
    import struct
    import zipfile

    folder = complete(tmp_path / "checkpoint-1")
    path = folder / "optimizer.pt"
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("/data/0"))
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    data[info.header_offset + 30 + name_len + extra_len + 5] ^= 0xFF
    path.write_bytes(bytes(data))
    assert missing_parts(folder, TRAINER_CHECKPOINT) == [
        f"optimizer.pt unreadable: record {info.filename} fails its CRC check"
    ]


def test_each_trainer_needs_its_own_files(tmp_path):
    ppo = complete(tmp_path / "ppo", ACCELERATE_CHECKPOINT)
    assert missing_parts(ppo, ACCELERATE_CHECKPOINT) == []
    assert "optimizer.pt missing" in missing_parts(ppo, TRAINER_CHECKPOINT)
    (ppo / "random_states_0.pkl").unlink()  # accelerate would go on without its RNG states, silently
    assert missing_parts(ppo, ACCELERATE_CHECKPOINT) == ["random_states_0.pkl missing"]


def test_no_checkpoint_at_all(tmp_path):
    assert last_complete_checkpoint(tmp_path / "missing") is None
    (tmp_path / "checkpoint-1").mkdir()
    with pytest.warns(UserWarning, match="skipping incomplete checkpoint"):
        assert last_complete_checkpoint(tmp_path) is None


def test_a_checkpoint_of_other_settings_is_refused_naming_them(tmp_path):
    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    settings = {"seed": 7, "rl": {"learning_rate": 0.01, "beta": 0.0}}
    made = EnvRollouts([], seed=7, run_settings=settings)
    made.calls = 3
    (folder / ROLLOUT_STATE).write_text(json.dumps(made.state_dict()))
    same = EnvRollouts([], seed=7, run_settings=settings)
    load_rollout_state(folder, same)
    assert same.calls == 3
    other = EnvRollouts([], seed=7, run_settings={"seed": 7, "rl": {"learning_rate": 0.001, "beta": 0.0}})
    with pytest.raises(ValueError, match=r"checkpoint-3.*other settings: rl.learning_rate: 0.01 then, 0.001 now"):
        load_rollout_state(folder, other)


def files_in(folder):
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("layout", [TRAINER_CHECKPOINT, ACCELERATE_CHECKPOINT], ids=["trl", "ppo"])
def test_older_checkpoints_keep_their_model_and_lose_what_only_resuming_reads(tmp_path, layout):
    for step in (5, 10, 15):
        complete(tmp_path / f"checkpoint-{step}", layout)
    (tmp_path / "checkpoint-10" / "config.json").write_text("{}")  # not the layout's: never touched
    resume_only = {"optimizer.pt", "scheduler.pt", "rng_state.pth"}
    if layout is ACCELERATE_CHECKPOINT:
        resume_only = {"optimizer.bin", "scheduler.bin", "random_states_0.pkl"}
    newest = tmp_path / "checkpoint-15"
    deleted = drop_resume_state(tmp_path, newest, layout)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in deleted) == sorted(
        f"checkpoint-{step}/{name}" for step in (5, 10) for name in resume_only
    )
    model = ["model.safetensors", ROLLOUT_STATE, "trainer_state.json"]
    assert files_in(tmp_path / "checkpoint-5") == model
    assert files_in(tmp_path / "checkpoint-10") == sorted(["config.json", *model])
    assert files_in(newest) == sorted([*model, *resume_only]) and missing_parts(newest, layout) == []
    assert last_complete_checkpoint(tmp_path, layout) == newest
    assert drop_resume_state(tmp_path, newest, layout) == []  # nothing left to drop


def test_nothing_is_dropped_unless_the_newest_checkpoint_is_complete(tmp_path):
    old = complete(tmp_path / "checkpoint-1")
    newest = complete(tmp_path / "checkpoint-2")
    (newest / ROLLOUT_STATE).unlink()  # killed before the rollout state, the marker, was written
    with pytest.raises(ValueError, match=r"checkpoint-2 is not a complete checkpoint \(rollout_state.json missing"):
        drop_resume_state(tmp_path, newest, TRAINER_CHECKPOINT)
    callback = DropOlderResumeState(TRAINER_CHECKPOINT)
    args, state = SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace(global_step=2, is_world_process_zero=True)
    callback.on_save(args, state, None)
    assert missing_parts(old) == [] and (old / "optimizer.pt").is_file()
    complete(tmp_path / "checkpoint-3")
    callback.on_save(args, SimpleNamespace(global_step=3, is_world_process_zero=True), None)
    assert not (old / "optimizer.pt").is_file() and not (newest / "optimizer.pt").is_file()
    callback.on_save(args, SimpleNamespace(global_step=4, is_world_process_zero=True), None)  # no such folder


def _sized(folder, sizes):
    folder.mkdir(parents=True)
    for name, size in sizes.items():
        (folder / name).write_bytes(b"x" * size)
    return folder


SIZES = {"model.safetensors": 500, "config.json": 20, "trainer_state.json": 10, ROLLOUT_STATE: 5,
         "optimizer.pt": 1000, "scheduler.pt": 3, "rng_state.pth": 7}  # fmt: skip


@pytest.mark.parametrize(
    ("steps_left", "save_steps", "older_model_only", "want"),
    [
        # 1545 bytes a checkpoint, 535 of them the model part (all but optimizer, scheduler and RNG)
        (100, 10, False, (10 * 1545 + 535, 10, 1545)),  # 10 saves, each kept whole, and final/
        (95, 10, False, (10 * 1545 + 535, 10, 1545)),  # the last step is saved too: ceil(95 / 10)
        (100, 10, True, (10 * 535 + 535, 10, 1545)),  # each save leaves the one before with its model part
        (0, 10, False, (535, 0, 1545)),  # the last save: only final/ is still to come
    ],
)
def test_checkpoint_growth_by_hand(tmp_path, steps_left, save_steps, older_model_only, want):
    newest = _sized(tmp_path / "checkpoint-10", SIZES)
    got = checkpoint_growth(
        newest, TRAINER_CHECKPOINT, steps_left=steps_left, save_steps=save_steps, older_model_only=older_model_only
    )
    assert got == want


def test_the_disk_check_warns_once_when_the_checkpoints_to_come_do_not_fit(tmp_path, monkeypatch, capsys):
    _sized(tmp_path / "checkpoint-10", SIZES)
    state = SimpleNamespace(global_step=10, is_world_process_zero=True)
    args = SimpleNamespace(output_dir=str(tmp_path))
    free = {"bytes": 10 * 1545 + 535}  # exactly what 10 more whole checkpoints and final/ need: fits
    monkeypatch.setattr("shutil.disk_usage", lambda _path: SimpleNamespace(free=free["bytes"]))
    check = DiskSpaceCheck(TRAINER_CHECKPOINT, steps=110, save_steps=10, older_model_only=False)
    check.on_save(args, state, None)
    assert capsys.readouterr().out == ""
    free["bytes"] -= 1
    check.on_save(args, state, None)
    line = capsys.readouterr().out
    assert line.startswith("  !! disk: the 10 checkpoints still to come and the final model need about 0.0 GB")
    assert "rl.older_checkpoints: model" in line
    check.on_save(args, state, None)
    assert capsys.readouterr().out == ""  # once a run
    pruned = DiskSpaceCheck(TRAINER_CHECKPOINT, steps=110, save_steps=10, older_model_only=True)
    pruned.on_save(args, state, None)  # needs 5885 bytes: fits
    assert capsys.readouterr().out == ""
    free["bytes"] = 5884
    pruned.on_save(args, state, None)
    assert "a larger rl.save_steps" in capsys.readouterr().out

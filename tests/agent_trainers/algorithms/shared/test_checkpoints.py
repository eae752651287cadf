"""Checkpoint completeness: an empty or partial leftover never blocks a resume."""

from __future__ import annotations

import json

import pytest

from agent_trainers.algorithms.shared.checkpoints import ROLLOUT_STATE, last_complete_checkpoint, missing_parts


def complete(folder):
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / ROLLOUT_STATE).write_text(json.dumps({"calls": 1, "seed": 0}))
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


def test_no_checkpoint_at_all(tmp_path):
    assert last_complete_checkpoint(tmp_path / "missing") is None
    (tmp_path / "checkpoint-1").mkdir()
    with pytest.warns(UserWarning, match="skipping incomplete checkpoint"):
        assert last_complete_checkpoint(tmp_path) is None

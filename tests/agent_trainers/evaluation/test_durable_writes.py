"""Nothing our commands write is lost to a kill: resume rewrites atomically, a cut UTF-8 last line drops only itself,
the viewer never overwrites its input (issue 25, item 7)."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from agent_gym.core.files import write_atomic
from agent_trainers.evaluation.outputs import EvalFolder, read_records
from agent_trainers.evaluation.viewer import write_viewer
from agent_trainers.rollout import load_jsonl, save_jsonl
from tests.agent_trainers.evaluation.test_records import make

SPEC = {"env": "x", "method": "agent"}


def test_write_atomic_leaves_the_old_file_when_the_write_fails(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    write_atomic(path, "old\n")

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "new\n" * 1000)
    monkeypatch.undo()
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
    assert write_atomic(tmp_path / "deep" / "er" / "f.md", b"\xc3\xa9").read_text() == "é"


def _resume_forever(path: Path, ready: int) -> None:
    """In a forked child: resume after resume, each rewriting episodes.jsonl (dropping a half line)."""
    folder = EvalFolder(path)
    folder.start(SPEC, resume=True)
    os.write(ready, b"r")
    while True:
        folder.start(SPEC, resume=True)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.slow  # ~10 s; CI runs it after the default suite
def test_sigkill_at_random_points_of_resumes_keeps_every_record(tmp_path):
    """SIGKILL during a resume left 1 of 24 records when it truncated the file, then wrote it (issue 25.7)."""
    records = [make(i, em=float(i % 2)) for i in range(2000)]
    folder = EvalFolder(tmp_path)
    folder.start(SPEC, resume=False)
    folder.rewrite(records)
    rng = random.Random(0)
    for _ in range(20):
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            try:
                _resume_forever(tmp_path, ready_w)
            finally:
                os._exit(1)
        os.close(ready_w)
        assert os.read(ready_r, 1) == b"r"  # one resume done, rewriting in a loop now
        os.close(ready_r)
        time.sleep(rng.uniform(0.0, 0.2))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        assert read_records(tmp_path / "episodes.jsonl") == records  # (a killed write may leave a .tmp beside it)


def test_a_last_line_cut_inside_a_utf8_character_is_dropped_alone(tmp_path):
    folder = EvalFolder(tmp_path)
    folder.start(SPEC, resume=False)
    done = [make(0, em=1.0), make(1)]
    folder.rewrite(done)
    with (tmp_path / "episodes.jsonl").open("ab") as f:
        f.write(b'{"task_index": 2, "question": "o' + "ù".encode()[:1])  # killed inside the 2-byte "ù"
    assert EvalFolder(tmp_path).start(SPEC, resume=True) == done  # resumed: the half record dropped, named nothing
    (tmp_path / "episodes.jsonl").write_bytes(b"\xff\xfe\n" + (tmp_path / "episodes.jsonl").read_bytes())
    with pytest.raises(ValueError, match=r"episodes.jsonl: not UTF-8 at byte 0"):
        read_records(tmp_path / "episodes.jsonl")  # bad bytes before the last line: named, not guessed


def test_the_viewer_never_writes_over_its_input(tmp_path, smollm2_tokenizer):
    from agent_trainers.policies import ScriptedPolicy
    from agent_trainers.rollout import rollout
    from tests.agent_trainers.conftest import LOOKUP_ID

    (traj,) = rollout(ScriptedPolicy(smollm2_tokenizer, ["<answer>Paris</answer>"]), LOOKUP_ID, task_indices=[0])
    path = save_jsonl([traj], tmp_path / "rollouts.jsonl")
    before = path.read_bytes()
    with pytest.raises(ValueError, match="would overwrite its input"):
        write_viewer(path, path, smollm2_tokenizer)
    assert path.read_bytes() == before and len(load_jsonl(path)) == 1
    assert write_viewer(path, tmp_path / "view.html", smollm2_tokenizer).read_text().startswith("<!")

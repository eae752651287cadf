"""An evaluation folder: resume after an interruption, refuse to mix settings, summary files."""

from __future__ import annotations

import csv
import json

import pytest

from agent_trainers.evaluation import EvalSpec, Method, SpecMismatchError, read_records, run_eval
from agent_trainers.rollout import RolloutConfig
from tests.agent_trainers.evaluation.conftest import HOTPOT, TEST_SPLIT
from tests.agent_trainers.evaluation.test_methods import agent_script

ROLLOUT = RolloutConfig(max_turns=3, max_new_tokens_per_turn=48, max_total_tokens=2048, temperature=0.0)


class Stop(Exception):
    """Stands for Ctrl-C / a killed process in the middle of an evaluation."""


def stop_after(n):
    seen = []

    def hook(record):
        seen.append(record.task_index)
        if len(seen) == n:
            raise Stop

    return hook


def spec(method, **kw):
    return EvalSpec(HOTPOT, Method(method), env_kwargs=dict(TEST_SPLIT), rollout=ROLLOUT, chunk_size=3, **kw)


def lines(folder):
    return (folder / "episodes.jsonl").read_text().splitlines()


@pytest.mark.parametrize("method", ["closed-book", "agent"])
def test_an_interrupted_evaluation_continues_where_it_stopped(scripted, tmp_path, method):
    full = run_eval(spec(method), scripted(agent_script), tmp_path / "full", progress=False)
    folder = tmp_path / "resumed"
    with pytest.raises(Stop):
        run_eval(spec(method), scripted(agent_script), folder, progress=False, on_record=stop_after(4))
    kept = lines(folder)
    assert len(kept) == 4 and not (folder / "summary.json").exists()
    second = scripted(agent_script)
    resumed = run_eval(spec(method), second, folder, progress=False)
    assert set(kept) <= set(lines(folder))  # the finished questions are kept as they were
    assert sorted(r.task_index for r in read_records(folder / "episodes.jsonl")) == list(range(8))
    assert [r.to_dict() for r in resumed.records] == [r.to_dict() for r in full.records]
    assert resumed.summary["metrics"] == full.summary["metrics"]
    done_questions = {r.question for r in full.records[:4]}
    assert not any(q in p for q in done_questions for p in second.prompts)  # the 4 done are not played again


def test_a_half_written_last_line_is_dropped(scripted, tmp_path):
    with pytest.raises(Stop):
        run_eval(spec("closed-book"), scripted(agent_script), tmp_path, progress=False, on_record=stop_after(2))
    with (tmp_path / "episodes.jsonl").open("a") as f:
        f.write('{"task_index": 2, "task_id": "agr1-hot')  # the write a kill interrupted
    run = run_eval(spec("closed-book"), scripted(agent_script), tmp_path, progress=False)
    assert [r.task_index for r in run.records] == list(range(8))
    assert all(json.loads(line) for line in lines(tmp_path))


def test_other_settings_are_refused_unless_overwriting(scripted, tmp_path):
    run_eval(spec("closed-book", limit=2), scripted(agent_script), tmp_path, progress=False)
    with pytest.raises(SpecMismatchError, match="limit differ"):
        run_eval(spec("closed-book", limit=3), scripted(agent_script), tmp_path, progress=False)
    run = run_eval(spec("closed-book", limit=3), scripted(agent_script), tmp_path, progress=False, resume=False)
    assert len(run.records) == 3 and len(lines(tmp_path)) == 3


def test_the_folder_holds_json_csv_and_markdown_summaries(scripted, tmp_path):
    run = run_eval(spec("agent"), scripted(agent_script), tmp_path, progress=False)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary == {**run.summary}
    assert (summary["label"], summary["dataset"], summary["episodes"]) == ("agent (smollm2)", "hotpotqa", 8)
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    em = next(r for r in rows if (r["scope"], r["metric"]) == ("all", "em"))
    assert float(em["mean"]) == 0.5 and int(em["n"]) == 8
    assert {r["scope"] for r in rows} == {"all", "bridge", "comparison"}
    md = (tmp_path / "summary.md").read_text()
    assert "| em | 0.500 [" in md and "| bridge | 6 |" in md
    assert json.loads((tmp_path / "spec.json").read_text())["method"] == "agent"


def test_start_evaluates_the_tasks_from_there_and_is_part_of_the_settings(scripted, tmp_path):
    run = run_eval(spec("closed-book", limit=2, start=3), scripted(agent_script), tmp_path / "a", progress=False)
    assert [r.task_index for r in run.records] == [3, 4]
    assert json.loads((tmp_path / "a" / "spec.json").read_text())["start"] == 3
    assert "start" not in spec("closed-book", limit=2).to_json()  # 0: absent, as in folders written before it
    with pytest.raises(SpecMismatchError):
        run_eval(spec("closed-book", limit=2, start=4), scripted(agent_script), tmp_path / "a", progress=False)
    with pytest.raises(ValueError, match="start 999 is past the last task"):
        run_eval(spec("closed-book", limit=2, start=999), scripted(agent_script), tmp_path / "b", progress=False)
    with pytest.raises(ValueError, match="start must be >= 0"):
        spec("closed-book", start=-1)


class _Turns:
    """Records the eval bar after each batched turn and each ended episode (wraps the real RolloutProgress)."""

    made: list = []

    def __new__(cls, *args, **kwargs):
        import io

        from agent_trainers.rollout.progress import RolloutProgress

        class Recording(RolloutProgress):
            def __init__(self, *a, **kw):
                super().__init__(*a, **{**kw, "file": io.StringIO(), "disable": False})
                self.seen: list[tuple[str, int]] = []

            def generated(self, turns, tokens):
                super().generated(turns, tokens)
                self.seen.append(("turn", self.bar.n))

            def ended(self, traj):
                super().ended(traj)
                self.seen.append(("end", self.bar.n))

        bar = Recording(*args, **kwargs)
        cls.made.append(bar)
        return bar


def test_the_agent_eval_bar_moves_every_batched_turn_and_counts_resumed_questions(scripted, tmp_path, monkeypatch):
    """8 questions x 3 turns = 24 episode-turns; chunks of 3: the bar moves after each batched turn, before the
    chunk's episodes end (the old bar over questions sat at 0 for the whole batched decode)."""
    import agent_trainers.evaluation.runner as runner

    monkeypatch.setattr(runner, "RolloutProgress", _Turns)
    _Turns.made.clear()
    with pytest.raises(Stop):
        run_eval(spec("agent"), scripted(agent_script), tmp_path, progress=True, on_record=stop_after(3))
    (first,) = _Turns.made
    assert first.bar.total == 24 and first.bar.initial == 0
    kinds = [k for k, _ in first.seen]
    assert kinds[0] == "turn" and first.seen[0][1] == 3  # one turn of the first chunk's 3 episodes
    assert "end" in kinds and kinds.index("end") > 0  # turns counted before any question ended
    ns = [n for _, n in first.seen]
    assert ns == sorted(ns) and ns[-1] <= 24
    run = run_eval(spec("agent"), scripted(agent_script), tmp_path, progress=True)  # resumes after 3 questions
    second = _Turns.made[1]
    assert second.bar.initial == 3 * 3 and second.live == 0 and second.bar.n == 24
    assert second.note == "8/8 q, em 0.500" and run.summary["metrics"]["em"]["mean"] == 0.5

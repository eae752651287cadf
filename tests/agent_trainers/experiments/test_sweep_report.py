"""One report for every sweep: per-seed rows with paired intervals, the mean over seeds with an interval paired over
tasks and seeds, and a whole tiny sweep run in this process."""

from __future__ import annotations

import json

import pytest

from agent_trainers.evaluation.compare import load_run
from agent_trainers.evaluation.outputs import EPISODES
from agent_trainers.evaluation.stats import paired_difference, paired_over_seeds
from agent_trainers.experiments import report
from agent_trainers.experiments.plan import plan_runs
from agent_trainers.experiments.runner import run_in_process
from agent_trainers.experiments.spec import SweepSpec
from agent_trainers.experiments.sweep import run_sweep
from tests.agent_trainers.evaluation.test_records import with_searches
from tests.agent_trainers.evaluation.test_report import folder


def rewrite(path, records):
    """Replace an evaluation folder's records (keeping its summary)."""
    (path / EPISODES).write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records), encoding="utf-8")


def test_one_seed_is_the_paired_difference_itself():
    a, b = {"q0": 1.0, "q1": 0.0, "q2": 1.0}, {"q0": 0.0, "q1": 0.0, "q2": 1.0}
    assert paired_over_seeds([(a, b)], "em") == paired_difference(a, b, "em")


def test_several_seeds_average_over_seeds_and_tasks_and_resample_both():
    # seed 0: RL wins q0 and q1; seed 1: RL wins q0 only (q1 tied); q2 tied everywhere; the mean of the 6 pairs
    pairs = [({"q0": 1.0, "q1": 1.0, "q2": 0.0}, {"q0": 0.0, "q1": 0.0, "q2": 0.0}),
             ({"q0": 1.0, "q1": 0.0, "q2": 1.0, "extra": 1.0}, {"q0": 0.0, "q1": 0.0, "q2": 1.0})]  # fmt: skip
    c = paired_over_seeds(pairs, "em", resamples=4000)
    assert c.difference.mean == pytest.approx(3 / 6) and c.difference.n == 6  # 'extra' is not in every pair
    assert (c.wins, c.losses, c.ties) == (3, 0, 3) and c.a_mean == pytest.approx(4 / 6)
    assert 0.0 <= c.difference.low < 0.5 < c.difference.high <= 1.0
    # resampling the seeds too: wider than resampling the questions of the pooled pairs alone
    rl = {f"{s}{k}": v for s, (a, _) in enumerate(pairs) for k, v in a.items() if k != "extra"}
    sft = {f"{s}{k}": v for s, (_, b) in enumerate(pairs) for k, v in b.items()}
    pooled = paired_difference(rl, sft, "em")
    assert pooled.difference.mean == c.difference.mean
    with pytest.raises(ValueError, match="share no question"):
        paired_over_seeds([({"a": 1.0}, {"a": 0.0}), ({"b": 1.0}, {"b": 1.0})], "em")


def test_the_dev_table_rows_and_the_mean_over_seeds(tmp_path):
    arms = [{"name": "sft", "stage": "sft"}, {"name": "grpo", "start": "sft"}]
    spec = SweepSpec.model_validate(
        {"recipe": "tiny", "seeds": [0, 1], "dev": {"env_kwargs": {}, "tasks": 4}, "arms": arms}
    )
    runs = plan_runs(spec, tmp_path)
    ems = {"sft/seed0": [1, 0, 0, 0], "grpo/seed0": [1, 1, 0, 0], "sft/seed1": [0, 0, 0, 0], "grpo/seed1": [1, 0, 1, 0]}
    for run in runs:
        target = report.dev_eval_folder(run)
        target.parent.mkdir(parents=True, exist_ok=True)
        folder(tmp_path, run.name.replace("/", "_"), "calc", ems[run.name]).rename(target)
    steps = {r.name: (0 if r.start is None else 2, 0.5) for r in runs}
    costs = {
        "grpo/seed0": {"wall_s": 90.0, "peak_rss_mb": 6205.0},
        "grpo/seed1": {"wall_s": 150.0, "peak_rss_mb": None, "invocations": 2},
    }  # killed once, resumed
    text = report.dev_table(runs, "em", costs, steps)
    lines = text.splitlines()
    assert lines[0].startswith("| run | seed | step chosen on dev (dev) | dev em [95% CI] | paired Δ vs start")
    assert lines[2].startswith("| sft | 0 | — | 0.250 [") and lines[2].endswith("| — | — | — | — | — |")
    assert lines[3].startswith("| grpo | 0 | 2 (0.500) | 0.500 [") and "| +0.250 [" in lines[3]
    assert lines[3].endswith("| 1 / 0 | — | 1.5 | 6,205 |")
    assert lines[5].startswith("| grpo | 1 |") and lines[5].endswith("| — | 2.5 (2 invocations) | — |")
    assert "| grpo | 0.500 (0.500, 0.500) | +0.375 [" in text and "| 3 / 0 |" in text  # 3 wins of 8 pairs


def _placed(tmp_path, arms, seeds, ems):
    """The planned runs of a sweep with these arms and seeds, each run's dev evaluation holding ``ems[name]``."""
    spec = SweepSpec.model_validate(
        {"recipe": "tiny", "seeds": seeds, "dev": {"env_kwargs": {}, "tasks": 4}, "arms": arms}
    )
    runs = plan_runs(spec, tmp_path)
    for run in runs:
        if run.name in ems:
            target = report.dev_eval_folder(run)
            target.parent.mkdir(parents=True, exist_ok=True)
            folder(tmp_path, run.name.replace("/", "_"), "calc", ems[run.name]).rename(target)
    return runs


def test_arms_from_one_start_are_paired_against_each_other_over_tasks_and_seeds(tmp_path):
    arms = [{"name": "sft", "stage": "sft"}, {"name": "process", "start": "sft"}, {"name": "outcome", "start": "sft"}]
    ems = {"process/seed0": [1, 1, 0, 0], "outcome/seed0": [1, 0, 0, 0],  # process wins q1
           "process/seed1": [0, 1, 0, 0], "outcome/seed1": [0, 1, 0, 0]}  # fmt: skip
    runs = _placed(tmp_path, arms, [0, 1], ems)
    text = report.arms_table(runs, "em", report.dev_eval_folder, "dev")
    row = next(line for line in text.splitlines() if line.startswith("| process − outcome"))
    # 8 (seed, question) pairs, one win: Δ 1/8; means 3/8 and 2/8
    assert row.startswith("| process − outcome | sft | 0, 1 | 0.375 − 0.250 | +0.125 [") and row.endswith("| 1 / 0 |")
    one_arm = [r for r in runs if r.arm.name != "outcome"]
    assert report.arms_table(one_arm, "em", report.dev_eval_folder, "dev") == ""


def test_the_behaviour_table_says_how_each_agent_works_and_what_changed(tmp_path):
    arms = [{"name": "sft", "stage": "sft"}, {"name": "grpo", "start": "sft"}]
    runs = _placed(tmp_path, arms, [0], {"sft/seed0": [1, 0, 0, 0], "grpo/seed0": [1, 1, 0, 0]})
    sft, grpo = (load_run(report.dev_eval_folder(r)) for r in runs)
    # SFT: 2 calls a task, answers "a"; GRPO: 1 call, answers "x y" on tasks 1 and 3, none on task 2,
    # and on task 0 a search that copies the question ("q0") and one that does not
    for r in sft.records:
        r.tool_calls = 2
    for r in grpo.records:
        r.tool_calls, r.answer = 1, ("x y" if r.task_index in (1, 3) else r.answer)
    grpo.records[2].answer, grpo.records[2].answered = None, False
    with_searches(grpo.records[0], "Q0", "elsewhere now")
    for run, ev in zip(runs, (sft, grpo), strict=True):
        rewrite(report.dev_eval_folder(run), ev.records)
    lines = report.behaviour_table(runs, report.dev_eval_folder, "dev").splitlines()
    assert lines[2] == ("| run | seed | answer rate | tool calls | evidence recall | format-error rate | query words "
                        "| queries copied | answer words | answers changed vs start |")  # fmt: skip
    assert lines[4] == "| sft | 0 | 1.000 | 2.00 | 0.500 | 0.000 | — | — | 1.00 | — |"
    # answer rate 3/4; words 1, 2, (none), 2 -> 5/3; queries 1 and 2 words, one of two copied; 3 of 4 answers differ
    assert lines[5] == "| grpo | 0 | 0.750 | 1.00 | 0.500 | 0.000 | 1.50 | 0.500 | 1.67 | 3 / 4 |"
    calc = report.behaviour_table(runs[:1], report.dev_eval_folder, "dev")  # no run searched: no query columns
    assert "query words" not in calc and "answer words" in calc


def test_steps_to_reach_the_start_plus_a_margin_read_the_dev_curve(tmp_path):
    import json

    arms = [{"name": "sft", "stage": "sft"}, {"name": "fast", "start": "sft"}, {"name": "flat", "start": "sft"}]
    runs = _placed(tmp_path, arms, [0], {"sft/seed0": [1, 0, 0, 0]})  # start: 0.25, so the bar is 0.27
    curves = {"fast": [(2, 0.26), (4, 0.30), (4, 0.30)], "flat": [(2, 0.25), (4, 0.2)]}  # step 4 twice: final
    for run in runs[1:]:
        rows = [
            {"stage": "eval", "step": k, "em": v, "em_low": v - 0.1, "em_high": v + 0.1}
            for k, v in curves[run.arm.name]
        ]
        rows.append({"stage": "rl", "step": 1, "em": 9.0})  # not an evaluation
        run.folder.mkdir(parents=True, exist_ok=True)
        (run.folder / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert report.dev_band(runs[1], "em") == [(2, 0.26, 0.26 - 0.1, 0.26 + 0.1), (4, 0.30, 0.30 - 0.1, 0.30 + 0.1)]
    lines = report.speed_table(runs, "em").splitlines()
    assert "| fast | 0 | 0.250 | 2: 0.260, 4: 0.300 | 4 |" in lines
    assert "| flat | 0 | 0.250 | 2: 0.250, 4: 0.200 | not in 4 |" in lines
    assert report.speed_table(runs[:1], "em") == ""


@pytest.mark.slow  # ~30 s (a tiny sweep); CI runs it after the default suite
def test_a_tiny_sweep_runs_chooses_tests_once_and_continues(tmp_path, one_thread):
    spec = SweepSpec.model_validate({
        "recipe": "tiny", "set": {"sft.episodes": 2, "rl.steps": 2, "eval.every": 1, "rl.save_steps": 1},
        "metric": "f1", "seeds": [0], "choose": "best_dev",
        "dev": {"env_kwargs": {"split": "test"}, "tasks": 2}, "test": {"env_kwargs": {"split": "test"},
        "first_task": 2, "tasks": 2}, "arms": [{"name": "sft", "stage": "sft"}, {"name": "grpo", "start": "sft"}],
        "transfer": {"later": {"env": "AgentR1/HotpotQA-v0", "env_kwargs": {"split": "test"}, "first_task": 4,
                               "tasks": 2}}, "baselines": ["closed-book"],
    })  # fmt: skip
    said: list[str] = []
    dev = run_sweep(spec, tmp_path, runner=run_in_process, say=said.append, dev_only=True)
    assert "Not evaluated yet (`--dev-only`)" in dev.report and not (tmp_path / "test").exists()
    assert not any("[sweep] test" in line for line in said) and not (tmp_path / "test_log.json").exists()
    said.clear()
    first = run_sweep(spec, tmp_path, runner=run_in_process, say=said.append)
    assert "## Dev (every choice is made here)" in first.report and "## Test (evaluated once" in first.report
    assert "RL steps to reach the start's dev f1 + 0.02" in first.report and "| grpo | 0 |" in first.report
    assert "How the agents work (dev; means over tasks)" in first.report
    assert "How the agents work (test; means over tasks)" in first.report
    assert (tmp_path / "test" / "grpo" / "seed0" / "summary.json").is_file()
    assert any("test 2/2: grpo/seed0" in line for line in said)
    assert any("transfer later 2/2: grpo/seed0" in line for line in said)
    assert [x for x in said if "baseline" in x] == ["[sweep] baseline 1/2: closed-book on test",
                                                     "[sweep] baseline 2/2: closed-book on later"]  # fmt: skip
    table = first.report.split("## Transfer")[1].splitlines()
    assert "| method | test | later |" in table and any(x.startswith("| closed-book | ") for x in table)
    assert any(x.startswith("| grpo (seed 0) | ") and "(Δ " in x for x in table)
    assert (tmp_path / "transfer" / "later" / "grpo" / "seed0" / "summary.json").is_file()
    assert all("skipped" in line for line in said if "[sweep] run" in line)  # trained once, by the dev-only run
    said.clear()
    again = run_sweep(spec, tmp_path, runner=run_in_process, say=said.append)  # everything is kept
    assert again.report == first.report and all("skipped" in line for line in said)


def test_the_training_table_averages_each_window_and_counts_a_replayed_step_once(tmp_path):
    arms = [{"name": "sft", "stage": "sft"}, {"name": "grpo", "start": "sft"}]
    spec = SweepSpec.model_validate({"recipe": "tiny", "seeds": [0], "dev": {"env_kwargs": {}, "tasks": 4},
                                     "arms": arms, "set": {"rl.steps": 6, "eval.every": 2}})  # fmt: skip
    sft, grpo = plan_runs(spec, tmp_path)
    rows = [
        {"stage": "rl", "step": 1, "reward": 0.5, "episode/answer_f1": 0.25, "entropy": 0.9, "step_time": 10.0},
        {"stage": "rl", "step": 2, "reward": 0.0, "episode/answer_f1": 0.75, "entropy": 0.7, "step_time": 30.0},
        {"stage": "eval", "step": 2, "f1": 0.4},
        {"stage": "rl", "step": 3, "reward": 9.0, "entropy": 0.5, "step_time": 20.0},  # lost with its machine
        {"stage": "rl", "step": 3, "reward": 1.0, "entropy": 0.5, "step_time": 20.0},  # replayed after a resume
        {"stage": "rl", "step": 4, "reward": 0.0, "entropy": 0.3, "step_time": 40.0},
        {"stage": "rl", "step": 5, "reward": 0.25, "entropy": 0.1, "step_time": 5.0},
        {"stage": "rl", "step": 5, "train_loss": 0.1},  # the trainer's totals: the step's values stay
    ]
    grpo.folder.mkdir(parents=True)
    (grpo.folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = report.training_table([sft, grpo]).splitlines()
    assert table[2] == "| arm | seed | steps | reward | answer f1 | entropy | groups played | s / step |"
    assert table[4:] == [  # windows of eval.every = 2 steps (the last one cut where the log ends); no groups played
        "| grpo | 0 | 1-2 | 0.250 | 0.500 | 0.800 | — | 20.0 |",
        "| grpo | 0 | 3-4 | 0.500 | — | 0.400 | — | 30.0 |",
        "| grpo | 0 | 5-5 | 0.250 | — | 0.100 | — | 5.0 |",
    ]
    assert report.training_table([sft]) == ""


def test_the_training_table_of_a_committed_archive_matches_its_results_page():
    """hotpotqa_rewards seed 1, `outcome`: the first and last windows as the results page of 2026-12-07 printed
    them (made then by a separate script); the last window's step 100 has a second row, the trainer's totals."""
    from pathlib import Path

    from agent_trainers.experiments.spec import load_sweep

    archive = Path(__file__).resolve().parents[3] / "docs" / "results" / "sweeps" / "hotpotqa_rewards"
    spec = load_sweep("hotpotqa_rewards").model_copy(update={"seeds": [1]})
    runs = [r for r in plan_runs(spec, archive, {"threads": 2}) if r.arm.name == "grpo-outcome"]
    rows = {x.split(" | ")[2]: x.split(" | ") for x in report.training_table(runs).splitlines()[4:]}
    # reward, answer F1, evidence recall, entropy, groups played, s / step
    assert [rows["1-20"][i] for i in (3, 5, 7, 10, 11)] + [rows["1-20"][12].rstrip(" |")] == [
        "0.161", "0.230", "0.477", "0.633", "3.600", "59.7"]  # fmt: skip
    assert [rows["81-100"][i] for i in (3, 5, 7, 10, 11)] + [rows["81-100"][12].rstrip(" |")] == [
        "0.225", "0.241", "0.508", "0.506", "4.200", "70.1"]  # fmt: skip

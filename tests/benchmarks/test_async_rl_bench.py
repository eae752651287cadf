"""benchmarks/async_rl.py: the runs it plans, and its figures and report from hand-made metrics."""

from __future__ import annotations

import json

import pytest

from tests.agent_trainers.evaluation.test_report import folder
from tests.conftest import load_script

bench = load_script("benchmarks/async_rl.py", "bench_async_rl")


def test_the_three_runs_differ_only_in_threads_and_async(tmp_path):
    runs = bench.plan_runs(bench.sweep(bench.parse_args(["--out", str(tmp_path), "--steps", "6"])), tmp_path)
    assert [r.arm.name for r in runs] == ["sft", "sync-1", "async", "sync-2"]
    sft, sync1, asyn, sync2 = (r.config for r in runs)
    assert not sft.rl.enabled and sft.eval.tasks == 1
    assert (sync1.threads, asyn.threads, sync2.threads) == (1, 1, 2) and sync1.rl.steps == 6
    assert asyn.rl.async_rollouts.enabled and not sync1.rl.async_rollouts.enabled
    assert (asyn.rl.async_rollouts.max_staleness, asyn.rl.async_rollouts.generation_threads) == (1, 1)
    same = {"threads", "rl", "output_dir"}
    for other in (asyn, sync2):  # everything else is the same recipe
        assert {k: v for k, v in other.to_dict().items() if k not in same} == {
            k: v for k, v in sync1.to_dict().items() if k not in same
        }
    assert sync1.model.name == str(runs[0].model_folder) and not sync1.sft.enabled
    quick = bench.plan_runs(bench.sweep(bench.parse_args(["--quick", "--no-sync2"])), tmp_path / "q")
    assert [r.arm.name for r in quick] == ["sync-1", "async"]
    assert quick[0].config.model.name == "tiny-random" and quick[0].config.rl.steps == 20
    assert quick[0].config.rl.beta == 0.01 and not quick[0].config.algorithm_settings.dynamic_sampling
    started = bench.plan_runs(bench.sweep(bench.parse_args(["--start", str(tmp_path / "ckpt")])), tmp_path / "s")
    assert started[1].config.model.name == str((tmp_path / "ckpt").resolve()) and len(started) == 3


def rows(times, **per_step):
    out = []
    for k, t in enumerate(times):
        out.append({"stage": "rl", "step": k + 1, "rl_seconds": t, "reward": 0.1 * k}
                   | {name: values[k] for name, values in per_step.items()})  # fmt: skip
    return out


def test_figures_by_hand():
    # sync: steps end at 30, 50, 70, 90 s; each spent 12 s generating; the training side idles 20 - 12 = 8 s
    sync = bench.figures(rows([30.0, 50.0, 70.0, 90.0], **{"time/rollout": [25.0, 12.0, 12.0, 12.0]}))
    assert sync.steps_per_hour == pytest.approx(4 / 90 * 3600)  # 160
    assert sync.steady_steps_per_hour == pytest.approx(3 / 60 * 3600)  # 180
    assert (sync.trainer_idle_s, sync.generator_idle_s) == (pytest.approx(12.0), pytest.approx(8.0))
    # async: steps end at 30, 42, 54, 66 s; the trainer waited 1, 2, 3 s on steps 2-4, the worker 4 s each
    asyn = bench.figures(rows([30.0, 42.0, 54.0, 66.0], **{"async/trainer_wait": [25.0, 1.0, 2.0, 3.0],
                                                         "async/worker_idle": [0.0, 4.0, 4.0, 4.0]}))  # fmt: skip
    assert asyn.steady_steps_per_hour == pytest.approx(3 / 36 * 3600)  # 300
    assert (asyn.trainer_idle_s, asyn.generator_idle_s) == (pytest.approx(2.0), pytest.approx(4.0))
    assert bench.ratio(asyn.steady_steps_per_hour, sync.steady_steps_per_hour) == "1.67x"
    assert bench.ratio(None, 1.0) == "—"
    with pytest.raises(ValueError, match="no RL step rows"):
        bench.figures([])


def test_the_report_gives_the_ratio_the_idle_times_and_the_paired_held_aside_metric(tmp_path):
    args = bench.parse_args(["--out", str(tmp_path), "--no-sync2"])
    runs = [bench.Measured(name, tmp_path / name) for name in ("sync-1", "async")]
    sync_rows = rows([30.0, 50.0, 70.0, 90.0], **{"time/rollout": [25.0, 12.0, 12.0, 12.0]})
    async_rows = rows([30.0, 42.0, 54.0, 66.0], **{"async/trainer_wait": [25.0, 1.0, 2.0, 3.0],
                                                   "async/worker_idle": [0.0, 4.0, 4.0, 4.0]})  # fmt: skip
    for r, records, ems in ((runs[0], sync_rows, [1, 0, 0, 0] * 5), (runs[1], async_rows, [1, 1, 0, 0] * 5)):
        r.folder.mkdir(parents=True)
        (r.folder / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in records))
        (r.folder / "eval").mkdir()
        folder(tmp_path, r.name, "calc", ems).rename(r.folder / "eval" / "final")
        r.records, r.peak_rss_mb = bench.rl_records(r.folder), 1234.0
    text = bench.report(args, runs)
    assert "| sync-1 | 160.0 | 180.0 | 12.0 | 8.0 | 1.5 | 1,234 | 0.250 [" in text
    assert "| async | 218.2 | 300.0 | 2.0 | 4.0 | 1.1 | 1,234 | 0.500 [" in text and "| +0.250 [" in text
    assert "async vs sync-1, RL steps per hour: 1.36x (steady state 1.67x)" in text
    assert "| 4 | 0.300 | 0.300 |" in text
    bench.draw(runs, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0

"""benchmarks/kl_reference.py: both runs on the tiny random model; the trainer's routine keeps a signal-free policy
at its reference, TRL's pass does not."""

from __future__ import annotations

import pytest

from tests.conftest import load_script

bench = load_script("benchmarks/kl_reference.py", "bench_kl_reference")


@pytest.mark.slow  # ~10-20 s (two tiny runs); CI runs it after the default suite
def test_the_quick_runs_report_both_references(tmp_path, capsys):
    bench.main(["--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 3 and "steps with the same reward: 3 of 3" in out
    trl, own = bench.rl_steps(tmp_path / "trl-pass"), bench.rl_steps(tmp_path / "own-routine")
    # the random model never answers right: every group ties, so the loss is the KL term alone
    assert all(r["kl"] == 0.0 for r in own) and trl[-1]["kl"] > 1e-6


def test_a_model_or_quick_is_required(tmp_path):
    with pytest.raises(SystemExit, match="--model CHECKPOINT"):
        bench.overrides(bench.parse_args([]), tmp_path)

"""benchmarks/idle_micro_batches.py: both runs on the tiny random model, same episodes and bit-identical weights."""

from __future__ import annotations

import pytest

from tests.conftest import load_script

bench = load_script("benchmarks/idle_micro_batches.py", "bench_idle_micro_batches")


@pytest.mark.slow  # ~15-27 s (four tiny runs); CI runs it after the default suite
def test_the_quick_runs_play_the_same_episodes_and_end_with_the_same_weights(tmp_path, capsys):
    bench.main(["--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    # the random model never answers right: nothing is kept, both micro-batches of every step are idle
    rows = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 3 and all("| 2 |" in row for row in rows)
    assert "same rewards every step: True; final weights bit-identical: True" in out
    assert bench.steps_of(tmp_path / "every")[0]["update/idle_micro_batches"] == 0.0


def test_a_model_or_quick_is_required(tmp_path):
    with pytest.raises(SystemExit, match="--model CHECKPOINT"):
        bench.overrides(bench.parse_args([]), tmp_path)

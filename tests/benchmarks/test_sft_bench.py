"""benchmarks/sft.py: the three variants on the tiny random model train the same model (same losses, updates equal up
to rounding), and a variant the benchmark does not know is refused."""

from __future__ import annotations

import pytest

from tests.conftest import load_script

bench = load_script("benchmarks/sft.py", "bench_sft")


@pytest.mark.slow  # three subprocesses of ~15 s each; CI runs it after the default suite
def test_the_quick_variants_train_the_same_model(tmp_path, capsys):
    bench.main(["--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in out.splitlines() if line.startswith("| ")]
    body = [row for row in rows[1:] if not row[0].startswith("---")]
    assert [row[0] for row in body] == ["trl (TRL, on)", "taught (taught, on)", "taught-no-ckpt (taught, off)"]
    assert body[0][3] == "1.00x" and body[0][6] == "0"  # the reference against itself
    assert len({row[5] for row in body}) == 1  # the same losses, to 4 decimals, at each of the 3 steps
    assert all(float(row[6]) < 1e-3 for row in body[1:])  # the same update up to rounding


def test_an_unknown_variant_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="choose from trl, taught, taught-no-ckpt"):
        bench.main(["--quick", "--variants", "trl,fast", "--out", str(tmp_path)])

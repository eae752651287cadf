"""Learning that CI guards: every algorithm raises the bandit toy's held-aside reward within a small budget.

``benchmarks/algorithms.py``'s protocol at its defaults (format warm-up of the 2-layer random model on
uniformly random arms, then RL at lr 1e-3, T = 0.7, held-aside tasks sampled at T = 0.7), with fewer steps. A
model that answers uniformly earns about 0.25; one that learned the paying arm about 1. Before these
settings the benchmark's one proof of learning (lr 5e-3, warm-up at 3e-2) held on 1 seed in 5 here.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import load_script

pytestmark = pytest.mark.slow  # about 4 minutes on 2 cores; .ci/run runs it after the default suite

bench = load_script("benchmarks/algorithms.py", "bench_algorithms_smoke")
STEPS = 20
MARGIN = 0.25
"""Each algorithm must raise the held-aside reward by at least this (from about 0.25)."""


class _Bar:
    def update(self, n: int) -> None:
        pass

    def set_postfix(self, **kw: object) -> None:
        pass


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    args = bench.Args(out=str(tmp_path_factory.mktemp("toy")), steps=STEPS, eval_before_all=True)
    bench.warm_up(args, _Bar())
    return args


@pytest.mark.parametrize("algorithm", bench.ALGORITHMS)
def test_each_algorithm_learns_the_toy(warm, algorithm):
    result = bench.run_algorithm(dataclasses.replace(warm), algorithm)
    bench.check_warmup(result["eval_before"])  # the warm-up answers in the format (reward >= 0)
    assert 0.0 <= result["eval_before"] < 0.6  # ... without knowing the arm
    assert result["eval_after"] >= result["eval_before"] + MARGIN, result

"""Learning that CI guards: every algorithm raises the bandit toy's held-aside reward within a small budget.

``benchmarks/algorithms.py``'s protocol at its defaults (format warm-up of the 2-layer random model on
uniformly random arms, then RL at lr 1e-3, T = 0.7, held-aside tasks sampled at T = 0.7), with fewer steps. A
model that answers uniformly earns about 0.25; one that learned the paying arm about 1. Before these
settings the benchmark's one proof of learning (lr 5e-3, warm-up at 3e-2) held on 1 seed in 5 here.

The toy is chaotic: the rounding of another CPU or thread count sends a run down another path, and on one seed
in five an algorithm can lose the answer format for good (an AVX-512 Xeon took every algorithm's seed 0 there,
at one thread; docs/results/2026-12-03-algorithms.md). So each algorithm gets a second seed, run only when the
first did not learn: the test fails when neither learns, as a planted sign flip of the advantages made GRPO and
RLOO do on both seeds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import load_script, torch_threads

pytestmark = pytest.mark.slow  # about 4 minutes on 2 cores; .ci/run runs it after the default suite

bench = load_script("benchmarks/algorithms.py", "bench_algorithms_smoke")
STEPS = 20
MARGIN = 0.25
"""Each algorithm must raise the held-aside reward by at least this (from about 0.25)."""
SEEDS = (0, 1)
"""The first seed, and the one tried when it did not learn."""


class _Bar:
    def update(self, n: int) -> None:
        pass

    def set_postfix(self, **kw: object) -> None:
        pass


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> Callable[[int], Any]:
    """The benchmark's settings for a seed, its warm-up made on first use (once per seed and test process), at
    the benchmark's thread count (its ``main`` sets it) as under one pytest process as under xdist: the thread
    count changes the rounding, and so the checkpoint RL starts from."""
    from agent_trainers.policies.threads import apply_threads

    made: dict[int, Any] = {}

    def settings(seed: int) -> Any:
        if seed not in made:
            args = bench.Args(out=str(tmp_path_factory.mktemp(f"toy-seed{seed}")), steps=STEPS, seed=seed,
                              eval_before_all=True)  # fmt: skip
            with torch_threads():
                apply_threads(args.threads)
                bench.warm_up(args, _Bar())
            made[seed] = args
        return made[seed]

    return settings


@pytest.mark.parametrize("algorithm", bench.ALGORITHMS)
def test_each_algorithm_learns_the_toy(warm, algorithm):
    tried = []
    for seed in SEEDS:
        result = bench.run_algorithm(dataclasses.replace(warm(seed)), algorithm)
        bench.check_warmup(result["eval_before"])  # the warm-up answers in the format (reward >= 0)
        assert 0.0 <= result["eval_before"] < 0.6  # ... without knowing the arm
        if result["eval_after"] >= result["eval_before"] + MARGIN:
            return
        tried.append({"seed": seed, "before": result["eval_before"], "after": result["eval_after"],
                      "rewards": [round(r, 2) for r in result["rewards"]]})  # fmt: skip
    pytest.fail(f"{algorithm} raised the held-aside reward by less than {MARGIN} on every seed tried: {tried}")

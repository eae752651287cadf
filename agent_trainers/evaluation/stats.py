"""Means with bootstrap 95% intervals, per-type breakdowns and paired comparisons of two methods.

* :func:`bootstrap_mean` - the mean of per-question values with a percentile
  bootstrap interval (questions resampled with replacement; numpy, seeded).
* :func:`summarize_records` - every metric of the table
  (:data:`~agent_trainers.evaluation.metrics.METRICS`) over a method's
  questions, aggregated as the table says; a metric no question has (e.g.
  evidence recall on question-only data) is left out, never reported as 0.0.
* :func:`paired_difference` - method A minus method B on the *same* questions:
  the mean per-question difference and its bootstrap interval (resampling
  questions keeps the pairs together, so it is much tighter than comparing
  two independent intervals).
* :func:`paired_over_seeds` - the same over several seeds' pairs (e.g. RL and SFT of each seed on the same
  questions): the mean difference over seeds and questions, with an interval that resamples both.
* :func:`bootstrap_average` - the mean of several datasets' means (the
  paper's "Avg." column) with each dataset resampled independently.

Example:
    >>> iv = bootstrap_mean([1.0, 0.0, 0.0, 1.0], resamples=1000, seed=0)
    >>> iv.mean, iv.n
    (0.5, 4)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from agent_trainers.evaluation.metrics import METRICS, Aggregation, metric_spec
from agent_trainers.evaluation.records import EpisodeRecord

__all__ = [
    "CONFIDENCE",
    "RESAMPLES",
    "Interval",
    "PairedComparison",
    "bootstrap_average",
    "bootstrap_mean",
    "metric_names",
    "paired_difference",
    "paired_over_seeds",
    "summarize_by_type",
    "summarize_records",
]

RESAMPLES = 2000
"""Bootstrap resamples (seeded)."""
CONFIDENCE = 0.95
"""Interval coverage."""
_OTHER_METRICS = tuple(m.name for m in METRICS if not m.answer)
"""The table's metrics besides the env's answer scores, in table order."""


@dataclass(frozen=True)
class Interval:
    """A mean and its bootstrap confidence interval.

    Attributes:
        mean: The mean over the ``n`` values.
        low: Lower end of the interval.
        high: Upper end.
        n: How many values (questions) it is over.
    """

    mean: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, float | int]:
        """``{"mean", "low", "high", "n"}``."""
        return asdict(self)

    def format(self, digits: int = 3, signed: bool = False) -> str:
        """``"0.120 [0.060, 0.190]"`` (``signed``: ``"+0.120 [-0.010, +0.250]"``)."""
        spec = f"+.{digits}f" if signed else f".{digits}f"
        return f"{self.mean:{spec}} [{self.low:{spec}}, {self.high:{spec}}]"


def _percentiles(stats: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(stats, [tail, 100 - tail])
    return float(low), float(high)


def bootstrap_mean(
    values: Sequence[float], *, resamples: int = RESAMPLES, seed: int = 0, confidence: float = CONFIDENCE
) -> Interval:
    """The mean of ``values`` with a percentile bootstrap interval.

    Raises:
        ValueError: ``values`` is empty (a mean of nothing is absent, not 0).
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("bootstrap_mean needs at least one value")
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    low, high = _percentiles(means, confidence)
    return Interval(float(data.mean()), low, high, int(data.size))


def bootstrap_average(
    groups: Sequence[Sequence[float]], *, resamples: int = RESAMPLES, seed: int = 0, confidence: float = CONFIDENCE
) -> Interval:
    """The average of the groups' means, each group resampled on its own (``n`` = all values).

    Raises:
        ValueError: No groups, or an empty group.
    """
    arrays = [np.asarray(g, dtype=float) for g in groups]
    if not arrays or any(a.size == 0 for a in arrays):
        raise ValueError("bootstrap_average needs at least one group, each with at least one value")
    rng = np.random.default_rng(seed)
    boot = np.zeros(resamples)
    for a in arrays:
        boot += a[rng.integers(0, a.size, size=(resamples, a.size))].mean(axis=1)
    boot /= len(arrays)
    low, high = _percentiles(boot, confidence)
    mean = float(np.mean([a.mean() for a in arrays]))
    return Interval(mean, low, high, int(sum(a.size for a in arrays)))


def metric_names(records: Sequence[EpisodeRecord]) -> list[str]:
    """The answer scores of the records (in the env's order), then the table's other metrics."""
    names: list[str] = []
    for r in records:
        names += [n for n in r.scores if n not in names]
    return names + list(_OTHER_METRICS)


def summarize_records(
    records: Sequence[EpisodeRecord], *, resamples: int = RESAMPLES, seed: int = 0
) -> dict[str, Interval]:
    """Each metric's mean and interval over the questions that have it; metrics none has are left out.

    Raises:
        ValueError: No records.
    """
    if not records:
        raise ValueError("summarize_records needs at least one record")
    out: dict[str, Interval] = {}
    for name in metric_names(records):
        values = [v for r in records if (v := r.metric(name)) is not None]
        if not values:
            continue  # absent, not 0
        if metric_spec(name).aggregation is Aggregation.MEAN and len(values) < len(records):
            raise ValueError(
                f"{name} is a mean over every question, but {len(records) - len(values)} of {len(records)} have none"
            )
        out[name] = bootstrap_mean(values, resamples=resamples, seed=seed)
    return out


def summarize_by_type(
    records: Sequence[EpisodeRecord], *, resamples: int = RESAMPLES, seed: int = 0
) -> dict[str, dict[str, Interval]]:
    """Answer scores per question type (records without a type are left out; empty if none has one)."""
    types = sorted({r.question_type for r in records if r.question_type is not None})
    out: dict[str, dict[str, Interval]] = {}
    for t in types:
        group = [r for r in records if r.question_type == t]
        names = [n for n in metric_names(group) if metric_spec(n).answer] + ["answer_rate"]
        out[t] = {n: bootstrap_mean([r.metric(n) for r in group], resamples=resamples, seed=seed) for n in names}  # type: ignore[misc]
    return out


@dataclass(frozen=True)
class PairedComparison:
    """Method A minus method B on the questions both answered.

    Attributes:
        metric: The metric compared.
        difference: Mean of per-question ``a - b`` with its bootstrap interval.
        a_mean: A's mean on the shared questions.
        b_mean: B's mean on the shared questions.
        wins: Questions where A scored higher.
        losses: Questions where B scored higher.
        ties: Questions scored equally.
    """

    metric: str
    difference: Interval
    a_mean: float
    b_mean: float
    wins: int
    losses: int
    ties: int

    @property
    def significant(self) -> bool:
        """The interval excludes 0."""
        return self.difference.low > 0 or self.difference.high < 0


def paired_difference(
    a: Mapping[str, float], b: Mapping[str, float], metric: str, *, resamples: int = RESAMPLES, seed: int = 0
) -> PairedComparison:
    """Compare two methods question by question (keys identify questions, e.g. task ids).

    Raises:
        ValueError: The two share no question.
    """
    keys = [k for k in a if k in b]
    if not keys:
        raise ValueError(f"paired comparison of {metric!r}: the two evaluations share no question")
    xa = np.array([a[k] for k in keys], dtype=float)
    xb = np.array([b[k] for k in keys], dtype=float)
    diff = xa - xb
    return PairedComparison(
        metric=metric,
        difference=bootstrap_mean(diff, resamples=resamples, seed=seed),
        a_mean=float(xa.mean()),
        b_mean=float(xb.mean()),
        wins=int((diff > 0).sum()),
        losses=int((diff < 0).sum()),
        ties=int((diff == 0).sum()),
    )


def paired_over_seeds(
    pairs: Sequence[tuple[Mapping[str, float], Mapping[str, float]]],
    metric: str,
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> PairedComparison:
    """A minus B over several seeds, each seed's pair on the same questions (keys identify questions).

    The difference is the mean over seeds and over the questions every pair shares. Its interval is a two-level
    bootstrap: each resample draws the seeds with replacement and, independently, the questions, so it holds
    both the spread between seeds (training runs) and between questions. One seed is
    :func:`paired_difference` itself. Wins, losses and ties count (seed, question) pairs.

    Raises:
        ValueError: No pair, or the pairs share no question.
    """
    if not pairs:
        raise ValueError(f"paired comparison of {metric!r}: no seed to compare")
    if len(pairs) == 1:
        return paired_difference(pairs[0][0], pairs[0][1], metric, resamples=resamples, seed=seed)
    keys = [k for k in pairs[0][0] if all(k in a and k in b for a, b in pairs)]
    if not keys:
        raise ValueError(f"paired comparison of {metric!r}: the seeds' evaluations share no question")
    xa = np.array([[a[k] for k in keys] for a, _ in pairs], dtype=float)
    xb = np.array([[b[k] for k in keys] for _, b in pairs], dtype=float)
    diff = xa - xb
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, diff.shape[0], size=(resamples, diff.shape[0]))
    questions = rng.integers(0, diff.shape[1], size=(resamples, diff.shape[1]))
    boot = np.array([diff[np.ix_(s, q)].mean() for s, q in zip(seeds, questions, strict=True)])
    low, high = _percentiles(boot, CONFIDENCE)
    return PairedComparison(
        metric=metric,
        difference=Interval(float(diff.mean()), low, high, int(diff.size)),
        a_mean=float(xa.mean()),
        b_mean=float(xb.mean()),
        wins=int((diff > 0).sum()),
        losses=int((diff < 0).sum()),
        ties=int((diff == 0).sum()),
    )

"""Evaluation like the paper's Table 3 (beside ``algorithms``: it needs rollouts and policies only).

* :data:`METRICS` - the one table of metrics (name, direction, aggregation, may be absent, where shown)
  that everything below reads (:mod:`.metrics`);
* :class:`EvalSummary` - the one summary (every metric with its interval), :func:`evaluate` in memory
  (:mod:`.summary`);
* :class:`Method` - ``closed-book``, ``naive-rag``, ``base-tool-call``, ``agent`` (:mod:`.methods`);
* :class:`EvalSpec`, :func:`run_eval` - one resumable evaluation into a folder (:mod:`.runner`);
* :class:`EpisodeRecord` - one evaluated question (:mod:`.records`);
* :func:`bootstrap_mean`, :func:`paired_difference`, :func:`summarize_records` - metrics with
  bootstrap 95% intervals and paired comparisons (:mod:`.stats`);
* :func:`build_report` - the Table 3 layout from several evaluation folders (:mod:`.report`);
* :func:`write_viewer` - a self-contained HTML trajectory viewer (:mod:`.viewer`).
"""

from agent_trainers.evaluation.methods import Method, MethodSettings, baseline_answer, play
from agent_trainers.evaluation.metrics import METRICS, Aggregation, Direction, Metric, View, metric_spec
from agent_trainers.evaluation.outputs import EvalFolder, SpecMismatchError, read_records
from agent_trainers.evaluation.records import (
    EpisodeRecord,
    MissingMetricError,
    TaskInfo,
    describe_tasks,
    record_from_trajectory,
)
from agent_trainers.evaluation.runner import EvalRun, EvalSpec, run_eval
from agent_trainers.evaluation.stats import (
    Interval,
    PairedComparison,
    bootstrap_average,
    bootstrap_mean,
    paired_difference,
    summarize_by_type,
    summarize_records,
)
from agent_trainers.evaluation.summary import EvalSummary, evaluate

__all__ = [
    "METRICS",
    "Aggregation",
    "Direction",
    "EpisodeRecord",
    "EvalFolder",
    "EvalRun",
    "EvalSpec",
    "EvalSummary",
    "Interval",
    "Method",
    "MethodSettings",
    "Metric",
    "MissingMetricError",
    "PairedComparison",
    "SpecMismatchError",
    "TaskInfo",
    "View",
    "baseline_answer",
    "bootstrap_average",
    "bootstrap_mean",
    "describe_tasks",
    "evaluate",
    "metric_spec",
    "paired_difference",
    "play",
    "read_records",
    "record_from_trajectory",
    "run_eval",
    "summarize_by_type",
    "summarize_records",
]

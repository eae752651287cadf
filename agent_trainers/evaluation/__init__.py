"""Evaluation like the paper's Table 3 (the layer between ``algorithms`` and ``pipeline``).

* :class:`Method` - ``closed-book``, ``naive-rag``, ``base-tool-call``, ``agent`` (:mod:`.methods`);
* :class:`EvalSpec`, :func:`run_eval` - one resumable evaluation into a folder (:mod:`.runner`);
* :class:`EpisodeRecord` - one evaluated question (:mod:`.records`);
* :func:`bootstrap_mean`, :func:`paired_difference`, :func:`summarize_records` - metrics with
  bootstrap 95% intervals and paired comparisons (:mod:`.stats`);
* :func:`build_report` - the Table 3 layout from several evaluation folders (:mod:`.report`);
* :func:`write_viewer` - a self-contained HTML trajectory viewer (:mod:`.viewer`).
"""

from agent_trainers.evaluation.methods import Method, MethodSettings, baseline_answer, play
from agent_trainers.evaluation.outputs import EvalFolder, SpecMismatchError, read_records
from agent_trainers.evaluation.records import EpisodeRecord, TaskInfo, describe_tasks, record_from_trajectory
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

__all__ = [
    "EpisodeRecord",
    "EvalFolder",
    "EvalRun",
    "EvalSpec",
    "Interval",
    "Method",
    "MethodSettings",
    "PairedComparison",
    "SpecMismatchError",
    "TaskInfo",
    "baseline_answer",
    "bootstrap_average",
    "bootstrap_mean",
    "describe_tasks",
    "paired_difference",
    "play",
    "read_records",
    "record_from_trajectory",
    "run_eval",
    "summarize_by_type",
    "summarize_records",
]

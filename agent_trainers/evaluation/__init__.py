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

The names are imported on first use, so that importing one module of the package (``agent-r1 view`` reads
:mod:`.viewer` only) does not import the others, which bring transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported on first use
    from agent_trainers.evaluation.methods import Method as Method
    from agent_trainers.evaluation.methods import MethodSettings as MethodSettings
    from agent_trainers.evaluation.methods import baseline_answer as baseline_answer
    from agent_trainers.evaluation.methods import play as play
    from agent_trainers.evaluation.metrics import METRICS as METRICS
    from agent_trainers.evaluation.metrics import Aggregation as Aggregation
    from agent_trainers.evaluation.metrics import Direction as Direction
    from agent_trainers.evaluation.metrics import Metric as Metric
    from agent_trainers.evaluation.metrics import View as View
    from agent_trainers.evaluation.metrics import metric_spec as metric_spec
    from agent_trainers.evaluation.outputs import EvalFolder as EvalFolder
    from agent_trainers.evaluation.outputs import SpecMismatchError as SpecMismatchError
    from agent_trainers.evaluation.outputs import read_records as read_records
    from agent_trainers.evaluation.records import EpisodeRecord as EpisodeRecord
    from agent_trainers.evaluation.records import MissingMetricError as MissingMetricError
    from agent_trainers.evaluation.records import TaskInfo as TaskInfo
    from agent_trainers.evaluation.records import describe_tasks as describe_tasks
    from agent_trainers.evaluation.records import record_from_trajectory as record_from_trajectory
    from agent_trainers.evaluation.runner import EvalRun as EvalRun
    from agent_trainers.evaluation.runner import EvalSpec as EvalSpec
    from agent_trainers.evaluation.runner import run_eval as run_eval
    from agent_trainers.evaluation.stats import Interval as Interval
    from agent_trainers.evaluation.stats import PairedComparison as PairedComparison
    from agent_trainers.evaluation.stats import bootstrap_average as bootstrap_average
    from agent_trainers.evaluation.stats import bootstrap_mean as bootstrap_mean
    from agent_trainers.evaluation.stats import paired_difference as paired_difference
    from agent_trainers.evaluation.stats import summarize_by_type as summarize_by_type
    from agent_trainers.evaluation.stats import summarize_records as summarize_records
    from agent_trainers.evaluation.summary import EvalSummary as EvalSummary
    from agent_trainers.evaluation.summary import evaluate as evaluate

_LAZY = {
    "Aggregation": "metrics",
    "Direction": "metrics",
    "EpisodeRecord": "records",
    "EvalFolder": "outputs",
    "EvalRun": "runner",
    "EvalSpec": "runner",
    "EvalSummary": "summary",
    "Interval": "stats",
    "METRICS": "metrics",
    "Method": "methods",
    "MethodSettings": "methods",
    "Metric": "metrics",
    "MissingMetricError": "records",
    "PairedComparison": "stats",
    "SpecMismatchError": "outputs",
    "TaskInfo": "records",
    "View": "metrics",
    "baseline_answer": "methods",
    "bootstrap_average": "stats",
    "bootstrap_mean": "stats",
    "describe_tasks": "records",
    "evaluate": "summary",
    "metric_spec": "metrics",
    "paired_difference": "stats",
    "play": "methods",
    "read_records": "outputs",
    "record_from_trajectory": "records",
    "run_eval": "runner",
    "summarize_by_type": "stats",
    "summarize_records": "stats",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

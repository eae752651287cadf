"""The paper's Table 3 in a sweep: the untrained baselines and every arm on the test set and the transfer sets.

A sweep may name transfer sets (:attr:`~.spec.SweepSpec.transfer`: test sets of other data, e.g. 2Wiki and MuSiQue
for a HotpotQA agent) and baselines (:attr:`~.spec.SweepSpec.baselines`: closed-book, naive RAG, the base model
with tools). The protocol evaluates each run's chosen model on every transfer set once, like the test set
(:func:`~.protocol.evaluate_test`); :func:`evaluate_baselines` evaluates each baseline once on the test set and
every transfer set with the recipe's base model, rollout limits and env settings; :func:`transfer_table` puts
them side by side - a row per baseline, a row per arm (the mean over seeds, and for an arm that starts from
another the difference paired over tasks and seeds), a column per set.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_trainers.evaluation.compare import load_run
from agent_trainers.evaluation.stats import bootstrap_mean, paired_over_seeds
from agent_trainers.experiments.plan import Run
from agent_trainers.experiments.protocol import HeldOut, held_out_sets
from agent_trainers.experiments.report import task_values
from agent_trainers.experiments.spec import SweepSpec

__all__ = ["BASELINE_FOLDER", "baseline_folders", "evaluate_baselines", "transfer_table"]

BASELINE_FOLDER = "baselines"
"""The baselines' evaluations, in the sweep's folder: ``baselines/<set>/<method>``."""


def _baseline_target(held: HeldOut, out: Path, method: str) -> Path:
    return out / BASELINE_FOLDER / held.name / method


def evaluate_baselines(spec: SweepSpec, runs: Sequence[Run], out: str | Path, say: Any = print) -> None:
    """Evaluate each of ``spec.baselines`` on the test set and every transfer set, once: with the base model of
    the first run's recipe, its rollout limits and evaluation settings (greedy by default). An evaluation whose
    folder holds a finished one under the same spec is kept.
    """
    if not spec.baselines or not runs:
        return
    from agent_trainers.evaluation import Method
    from agent_trainers.pipeline.stages import eval_spec, evaluate_model
    from agent_trainers.policies.loader import load_model

    folder, first = Path(out), runs[0]
    todo = []
    for held in held_out_sets(spec, folder):
        for name in spec.baselines:
            method, target = Method(name), _baseline_target(held, folder, name)
            wanted = eval_spec(held.config(first), phase="before", tasks=held.task_range, label=name, method=method)
            done = target / "spec.json"
            finished = (target / "summary.json").is_file() and done.is_file()
            if finished and json.loads(done.read_text(encoding="utf-8")) == wanted.to_json():
                continue
            todo.append((held, method, target))
    if not todo:
        return
    c = first.config
    model, tokenizer = load_model(c.model.name, device=c.device, seed=c.seed)
    for k, (held, method, target) in enumerate(todo, 1):
        say(f"[sweep] baseline {k}/{len(todo)}: {method.value} on {held.name}")
        evaluate_model(held.config(first), model, tokenizer, target, phase="before", tasks=held.task_range,
                       label=method.value, method=method)  # fmt: skip


def baseline_folders(spec: SweepSpec, out: str | Path) -> dict[str, dict[str, Path]]:
    """``{method: {set: folder}}`` of the finished baseline evaluations of ``spec`` under ``out``."""
    folder = Path(out)
    found: dict[str, dict[str, Path]] = {}
    for held in held_out_sets(spec, folder):
        for name in spec.baselines:
            target = _baseline_target(held, folder, name)
            if (target / "summary.json").is_file():
                found.setdefault(name, {})[held.name] = target
    return found


def _values(folder: Path, metric: str) -> dict[str, float]:
    """Per task of the evaluation in ``folder``, its ``metric``.

    Raises:
        ValueError: No task has it (a renamed or absent metric is not a 0).
    """
    found = task_values(load_run(folder), metric)
    if not found:
        raise ValueError(f"{folder}: no task has the metric {metric!r}")
    return found


def transfer_table(
    runs: Sequence[Run],
    metric: str,
    sets: Sequence[str],
    folders: Mapping[str, Mapping[str, Path]],
    baselines: Mapping[str, Mapping[str, Path]],
) -> str:
    """The table: a column per set in ``sets`` (``folders[set][run]``: each run's evaluation there), a row per
    baseline (``baselines[method][set]``: its evaluation; ``—`` where it has none) with its mean and 95% interval,
    then a row per arm: the mean of its seeds' means and, for an arm that starts from another, the difference to
    its start paired over tasks and seeds (both resampled)."""
    head = f"| method | {' | '.join(sets)} |"
    lines = [head, "|---" * (len(sets) + 1) + "|"]
    for method, where in baselines.items():
        cells = []
        for name in sets:
            cells.append(
                bootstrap_mean(list(_values(where[name], metric).values())).format(3) if name in where else "—"
            )
        lines.append(f"| {method} | {' | '.join(cells)} |")
    arms = list(dict.fromkeys(r.arm.name for r in runs))
    for arm in arms:
        mine = [r for r in runs if r.arm.name == arm]
        cells = []
        for name in sets:
            means = [statistics.mean(_values(folders[name][r.name], metric).values()) for r in mine]
            cell = f"{statistics.mean(means):.3f}"
            if all(r.start is not None for r in mine):
                pairs = [(_values(folders[name][r.name], metric), _values(folders[name][r.start.name], metric))
                         for r in mine if r.start is not None]  # fmt: skip
                comparison = paired_over_seeds(pairs, metric)
                cell += f" (Δ {comparison.difference.format(3, signed=True)})"
            cells.append(cell)
        seeds = ("seeds " if len(mine) > 1 else "seed ") + ", ".join(str(r.seed) for r in mine)
        lines.append(f"| {arm} ({seeds}) | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"

"""The protocol of a claim that training made an agent better, in code: choose on dev, freeze, test once.

1. **Dev curves** (:func:`dev_curve`): every run is evaluated on the dev set while it trains (its ``eval/``
   phases); step 0 is the model it started from.
2. **Choices** (:func:`make_choices`): each run's checkpoint, chosen on its dev curve by the sweep's rule
   (``final`` or ``best_dev``), with the dev value it was chosen at. They are written to ``choices.json``
   (:func:`freeze_choices`) before anything touches the test set.
3. **Test, once** (:func:`evaluate_test`): the chosen checkpoint of each run and the model each run started
   from are evaluated on the test set, each evaluation recorded in ``test_log.json`` with the choices it was
   made under. A test set evaluated under other choices is refused - a test set that was looked at while
   choosing is a dev set from then on - and a test figure is reported only from an evaluation that log holds
   (:func:`frozen_test_folders`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent_gym.core.files import write_atomic
from agent_trainers.experiments.plan import Run
from agent_trainers.experiments.spec import Choose, Stage, SweepSpec, TaskSet

__all__ = [
    "CHOICES",
    "TEST_LOG",
    "Choice",
    "ProtocolError",
    "dev_curve",
    "evaluate_test",
    "freeze_choices",
    "frozen_test_folders",
    "make_choices",
]

CHOICES = "choices.json"
"""The frozen choices, in the sweep's folder."""
TEST_LOG = "test_log.json"
"""Every test evaluation made, with the choices it was made under."""


class ProtocolError(ValueError):
    """A step of the protocol out of order: a test figure without frozen choices, choices changed after the test."""


@dataclass(frozen=True)
class Choice:
    """The checkpoint of one run chosen on dev.

    Attributes:
        run: The run's name (``<arm>/seed<k>``).
        step: The RL step chosen (0: the model the run started from).
        dev: Its dev value of the metric.
        model: The model folder of that checkpoint.
    """

    run: str
    step: int
    dev: float
    model: str


def _rows(folder: Path) -> list[dict[str, Any]]:
    path = folder / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text(encoding="utf-8").split("\n") if x.strip()]


def dev_curve(run: Run, metric: str) -> list[tuple[int, float]]:
    """``(step, dev mean)`` of ``run`` from step 0 (the model it started from) to its last evaluation.

    Raises:
        ProtocolError: The run has no dev evaluation of ``metric``.
    """
    own = [(int(r["step"]), float(r[metric])) for r in _rows(run.folder) if r.get("stage") == "eval" and metric in r]
    start: list[tuple[int, float]] = []
    if run.start is not None:
        start = [(0, v) for s, v in dev_curve(run.start, metric)[-1:]]  # the start model's last evaluation
    elif run.config.sft.enabled:  # its own SFT, evaluated after it (phase after_sft, step 0)
        start = [(s, v) for s, v in own if s == 0][:1]
    curve = dict(start)
    curve.update({s: v for s, v in own if s > 0 or run.arm.stage is Stage.SFT})
    if not curve:
        raise ProtocolError(f"{run.name} has no dev evaluation of {metric!r} (is it finished?)")
    return sorted(curve.items())


def _model_at(run: Run, step: int, last: int) -> Path:
    if step == last:
        return run.model_folder
    if step == 0:
        if run.start is None:
            return run.folder / "sft"
        return run.start.model_folder
    folder = run.folder / "rl" / f"checkpoint-{step}"
    if not (folder / "config.json").is_file():
        raise ProtocolError(f"{folder}: no model saved at step {step} (make rl.save_steps divide eval.every)")
    return folder


def make_choices(spec: SweepSpec, runs: Sequence[Run]) -> list[Choice]:
    """Each run's checkpoint chosen on its dev curve by ``spec.choose`` (an SFT run: its model)."""
    out = []
    for run in runs:
        curve = dev_curve(run, spec.metric)
        last = curve[-1][0]
        if spec.choose is Choose.BEST_DEV and run.arm.stage is Stage.RL:
            best = max(v for _, v in curve)
            step = min(s for s, v in curve if v == best)  # the earliest: the fewest updates away from the start
        else:
            step = last
        out.append(Choice(run.name, step, dict(curve)[step], str(_model_at(run, step, last))))
    return out


def _digest(spec: SweepSpec, choices: Sequence[Choice]) -> str:
    test = spec.test.key() if spec.test is not None else None
    blob = json.dumps({"test": test, "metric": spec.metric, "choices": [asdict(c) for c in choices]}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def freeze_choices(spec: SweepSpec, runs: Sequence[Run], out: str | Path) -> dict[str, Any]:
    """Write ``choices.json`` (the choices and their digest); returns it.

    Raises:
        ProtocolError: The test set was already evaluated under other choices.
    """
    choices = make_choices(spec, runs)
    digest = _digest(spec, choices)
    folder = Path(out)
    tested = _read(folder / TEST_LOG)
    other = sorted({e["choices"] for e in tested.values()} - {digest})
    if other:
        when = min(e["evaluated_at"] for e in tested.values() if e["choices"] in other)
        raise ProtocolError(
            f"the test set of {folder} was evaluated on {when} under other choices (choices {other[0]}); a test set "
            "that was looked at while choosing is a dev set from then on: name a new test set in the sweep, or use "
            "another output folder"
        )
    frozen = {"choices": digest, "metric": spec.metric, "rule": spec.choose.value, "runs": [asdict(c) for c in choices]}
    previous = _read(folder / CHOICES)
    if previous.get("choices") != digest:
        frozen["frozen_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
        write_atomic(folder / CHOICES, json.dumps(frozen, indent=1) + "\n")
        return frozen
    return previous


def _test_targets(runs: Sequence[Run], frozen: dict[str, Any]) -> list[tuple[str, str, Run]]:
    """``(label, model folder, run)`` to evaluate on test: every run's chosen model (SFT runs: their model)."""
    chosen = {c["run"]: c for c in frozen["runs"]}
    return [(run.name, chosen[run.name]["model"], run) for run in runs]


def evaluate_test(spec: SweepSpec, runs: Sequence[Run], out: str | Path, say: Any = print) -> None:
    """Evaluate each run's chosen model on the test set once (under the frozen choices); done ones are kept.

    Raises:
        ProtocolError: No test set, no frozen choices, or the choices changed since they were frozen.
    """
    from agent_trainers.pipeline.stages import evaluate_model
    from agent_trainers.policies.loader import load_model

    if spec.test is None:
        raise ProtocolError("the sweep names no test set")
    folder = Path(out)
    frozen = freeze_choices(spec, runs, folder)  # refuses choices other than the test set's
    log = _read(folder / TEST_LOG)
    test: TaskSet = spec.test
    for k, (name, model, run) in enumerate(_test_targets(runs, frozen), 1):
        target = folder / "test" / name
        entry = log.get(name)
        if entry is not None and entry["model"] == model and (target / "summary.json").is_file():
            continue
        say(f"[sweep] test {k}/{len(runs)}: {name} ({model})")
        policy_model, tokenizer = load_model(model, device=run.config.device, seed=run.config.seed)
        evaluate_model(
            run.config, policy_model, tokenizer, target, phase="test",
            tasks=(dict(test.env_kwargs), test.first_task, test.tasks), label=f"{name} (test)",
        )  # fmt: skip
        del policy_model
        log[name] = {"model": model, "choices": frozen["choices"], "evaluated_at": time.strftime("%Y-%m-%d %H:%M:%S")}
        write_atomic(folder / TEST_LOG, json.dumps(log, indent=1) + "\n")


def frozen_test_folders(spec: SweepSpec, runs: Sequence[Run], out: str | Path) -> dict[str, Path]:
    """The test evaluation folder of each run, only as the protocol made it (under the frozen choices).

    Raises:
        ProtocolError: A run's test figure was not made under the frozen choices, or is missing.
    """
    folder = Path(out)
    frozen, log = _read(folder / CHOICES), _read(folder / TEST_LOG)
    if not frozen:
        raise ProtocolError(f"{folder} has no {CHOICES}: no test figure is reported before the choices are frozen")
    chosen = {c["run"]: c["model"] for c in frozen["runs"]}
    out_folders = {}
    for run in runs:
        entry = log.get(run.name)
        if entry is None or entry["choices"] != frozen["choices"] or entry["model"] != chosen.get(run.name):
            raise ProtocolError(f"{run.name}: no test evaluation under the frozen choices ({frozen['choices']})")
        out_folders[run.name] = folder / "test" / run.name
    return out_folders

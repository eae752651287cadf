"""An arm borrowed from another sweep (:attr:`~.spec.Arm.borrow`): its runs come from that sweep's archive.

Two sweeps often share an arm: the reward ablation's ``gated`` arm is learn_hotpotqa's ``grpo`` arm (the same
recipe, seeds and start model). Training it again costs hours for a run that exists. A borrowed arm takes each
seed's run from the other sweep's archive (:mod:`.archive`), the *lender*, once it is checked to be the run this
sweep would train:

1. **the same config**: the lender's typed config (read by today's code: settings added since take their
   defaults) equals this run's, less its folder, the path of its start model and how it was carried out
   (:data:`~.protocol.NOT_A_CHOICE`); the same for the start run's config;
2. **the same start model**: this sweep's start run answered the dev set exactly as the lender's did (every
   episode record equal; greedy decoding at a fixed seed, so equal records mean the same answers from the same
   model as far as the dev set can tell);
3. **the same protocol**: the lender chose on the same metric by the same rule (its choice is this sweep's choice
   on the copied dev curve), and each held-out evaluation was made under the settings this sweep's would be.

:func:`borrow_runs` then copies the run into this sweep's folder (results without weights, as archived) with a
stamp naming the lender; :func:`borrow_held_out` copies its test (and transfer) evaluations with a log entry
under this sweep's definition and choice and the lender's entry beside it (``borrowed_from``). A borrowed run is
never trained or evaluated here, and no arm may start from it (its weights stayed with the lender).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from agent_gym.core.files import write_atomic
from agent_trainers.experiments.archive import episode_records
from agent_trainers.experiments.plan import ARCHIVED, Run, read_json
from agent_trainers.experiments.protocol import CHOICES, NOT_A_CHOICE, ProtocolError, freeze_choices, held_out_sets
from agent_trainers.experiments.runner import COSTS, RUN_CONFIG
from agent_trainers.experiments.spec import SweepSpec

__all__ = ["borrow_held_out", "borrow_runs", "differing_configs", "lender_folder", "lender_start"]

BORROWED_FROM = "borrowed_from"
"""The key naming the lender, in a borrowed run's stamp and in its held-out log entries."""


def lender_folder(run: Run) -> Path:
    """Where the lender's archive keeps ``run`` (``<archive>/seed<k>/<arm>``)."""
    assert run.arm.borrow is not None
    return Path(run.arm.borrow.archive) / f"seed{run.seed}" / run.arm.borrow.arm


def _lender_name(run: Run) -> str:
    assert run.arm.borrow is not None
    return f"{run.arm.borrow.arm}/seed{run.seed}"


def config_differences(mine: Run, theirs: Path) -> list[str]:
    """The settings in which the archived run folder ``theirs`` differs from ``mine`` (see the module docstring)."""
    from agent_trainers.pipeline.config import config_from_dict, dotted_settings

    data = yaml.safe_load((theirs / RUN_CONFIG).read_text(encoding="utf-8"))
    a, b = dotted_settings(mine.config.to_dict()), dotted_settings(config_from_dict(data).to_dict())
    ignored = {"model.name"} if mine.start is not None else set()

    def kept(key: str) -> bool:
        return key not in ignored and key.split(".")[0] not in NOT_A_CHOICE

    absent = "(absent)"
    return [f"{k}: {b.get(k, absent)!r} there, {a.get(k, absent)!r} here"
            for k in sorted(set(a) | set(b)) if kept(k) and a.get(k, absent) != b.get(k, absent)]  # fmt: skip


def lender_start(run: Run, lender: Path) -> Path:
    """The lender's start run, in its archive: the run folder its config's model came from."""
    stamp = read_json(lender / ARCHIVED)
    config = yaml.safe_load((lender / RUN_CONFIG).read_text(encoding="utf-8"))
    where, model = Path(stamp.get("from", "")), Path(str(config.get("model", {}).get("name", "")))
    try:
        relative = model.relative_to(where.parents[1])  # <out>/seed<k>/<arm>: the lender's sweep folder is <out>
    except (ValueError, IndexError):
        raise ProtocolError(
            f"{lender}: its start model {model} is not a run of its sweep ({where}); only an arm that started from "
            "another arm of its sweep can be borrowed"
        ) from None
    return lender.parents[1] / relative.parent


def differing_configs(run: Run, lender: Path, start: Path) -> Iterator[tuple[Run, Path, list[str]]]:
    """Each of ``run`` and its start run whose config differs from its counterpart's in the lender's archive
    (``lender``, and the lender's start run ``start``), with the differences; nothing when both are the same."""
    assert run.start is not None
    for mine, theirs in ((run, lender), (run.start, start)):
        if differences := config_differences(mine, theirs):
            yield mine, theirs, differences


def _check(run: Run, lender: Path, metric: str, rule: str) -> None:
    """Refuse ``run``'s lender unless it is the run this sweep would train (the module docstring's 1-3)."""
    assert run.start is not None
    name = _lender_name(run)
    if not (lender / ARCHIVED).is_file() or not (lender / RUN_CONFIG).is_file():
        raise ProtocolError(
            f"{run.name} is borrowed from {name}, which {lender.parents[1]} does not hold (an archive holds the seeds "
            "its sweep tested; check the path, and run from the folder it is relative to)"
        )
    start = lender_start(run, lender)
    for mine, theirs, differences in differing_configs(run, lender, start):
        shown = "; ".join(differences[:4]) + (f"; and {len(differences) - 4} more" if len(differences) > 4 else "")
        raise ProtocolError(f"{run.name} cannot be borrowed from {name}: {mine.name}'s config differs from "
                            f"{theirs}'s ({shown})")  # fmt: skip
    from agent_trainers.experiments.report import dev_eval_folder

    own_dev = dev_eval_folder(run.start)
    theirs_dev = start / own_dev.relative_to(run.start.folder)
    a, b = episode_records(own_dev), episode_records(theirs_dev)
    if a != b:
        differ = [r.get("task_id", k) for k, (r, s) in enumerate(zip(a, b, strict=False)) if r != s]
        count, tasks = len(differ) + abs(len(a) - len(b)), max(len(a), len(b))
        raise ProtocolError(
            f"{run.name} cannot be borrowed from {name}: its start model is not the lender's ({run.start.name} "
            f"answered the dev set differently on {count} of {tasks} tasks, first "
            f"{(differ or ['(a missing task)'])[0]}); train the arm here instead"
        )
    lent = read_json(lender.parents[1] / CHOICES)
    if (lent.get("metric"), lent.get("rule")) != (metric, rule):
        raise ProtocolError(f"{run.name} cannot be borrowed from {name}: its sweep chose on {lent.get('metric')!r} by "
                            f"{lent.get('rule')!r}, this one on {metric!r} by {rule!r}")  # fmt: skip


def borrow_runs(spec: SweepSpec, runs: Sequence[Run], out: str | Path, say: Callable[[str], None] = print) -> list[str]:
    """Copy each borrowed run of ``runs`` that ``out`` lacks from its lender's archive, once checked (its start
    must be finished); returns their names. Each lands as an archived run (its results without weights), stamped
    with the lender, with the lender's cost.

    Raises:
        ProtocolError: A lender is missing or is not the run this sweep would train (the message says how).
    """
    folder, done = Path(out), []
    for run in runs:
        if run.arm.borrow is None or run.done:
            continue
        assert run.start is not None
        if not run.start.done:
            raise ProtocolError(f"{run.name} is borrowed once its start {run.start.name} is finished")
        lender = lender_folder(run)
        _check(run, lender, spec.metric, spec.choose.value)
        shutil.copytree(lender, run.folder, dirs_exist_ok=True)
        stamp = {"run": run.name, "borrowed_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                 BORROWED_FROM: {"archive": str(run.arm.borrow.archive), "run": _lender_name(run),
                                 "from": read_json(lender / ARCHIVED).get("from")}}  # fmt: skip
        write_atomic(run.folder / ARCHIVED, json.dumps(stamp) + "\n")
        cost = read_json(lender.parents[1] / COSTS).get(_lender_name(run))
        if cost is not None:
            costs = read_json(folder / COSTS)
            write_atomic(folder / COSTS, json.dumps({**costs, run.name: cost}, indent=1) + "\n")
        say(f"[sweep] {run.name}: borrowed from {lender} (checked: same config, same start model's dev answers)")
        done.append(run.name)
    return done


def _settings(spec_json: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation's spec less what names it (model, label), JSON-normalised."""
    return json.loads(json.dumps({k: v for k, v in spec_json.items() if k not in ("model", "label")}, default=str))


def borrow_held_out(spec: SweepSpec, runs: Sequence[Run], out: str | Path, sweep: str) -> list[str]:
    """Copy the test (and transfer) evaluations of each borrowed run of ``runs`` from its lender, each logged under
    this sweep's definition ``sweep`` and the run's frozen choice, with the lender's entry as ``borrowed_from``;
    returns ``<run> (<set>)`` for each one copied. Runs logged already are left as they are.

    Raises:
        ProtocolError: The lender chose another checkpoint, evaluated a set under other settings, or lacks a set.
    """
    from agent_trainers.pipeline.stages import eval_spec

    borrowed = [r for r in runs if r.arm.borrow is not None]
    if not borrowed:
        return []
    folder = Path(out)
    chosen = {c["run"]: c for c in freeze_choices(spec, runs, folder, sweep)["runs"]}
    copied = []
    for run in borrowed:
        assert run.arm.borrow is not None
        archive = Path(run.arm.borrow.archive)
        lent = {c["run"]: c for c in read_json(archive / CHOICES).get("runs", [])}.get(_lender_name(run), {})
        for held in held_out_sets(spec, folder):
            log = read_json(held.log)
            if run.name in log and log[run.name]["choice"] == chosen[run.name]["digest"]:
                continue
            theirs_log = read_json(archive / held.log.relative_to(folder)).get(_lender_name(run))
            theirs = archive / held.folder.relative_to(folder) / _lender_name(run)
            if theirs_log is None or not (theirs / "summary.json").is_file():
                raise ProtocolError(
                    f"{run.name}: its lender {_lender_name(run)} has no {held.name} evaluation in {archive} "
                    "(a borrowed arm brings the sets its sweep evaluated)"
                )
            if lent.get("step") != chosen[run.name]["step"] or theirs_log.get("step") != chosen[run.name]["step"]:
                raise ProtocolError(f"{run.name}: this sweep chooses step {chosen[run.name]['step']} on the dev curve, "
                                    f"its lender chose {lent.get('step')}: not the same choice")  # fmt: skip
            mine = eval_spec(held.config(run), phase="test", tasks=held.task_range).to_json()
            if _settings(mine) != _settings(read_json(theirs / "spec.json")):
                raise ProtocolError(f"{run.name}: its lender's {held.name} evaluation was made under other settings "
                                    f"than this sweep's ({theirs / 'spec.json'})")  # fmt: skip
            shutil.copytree(theirs, held.folder / run.name, dirs_exist_ok=True)
            lent_entry = {"archive": str(archive), "run": _lender_name(run), **theirs_log}
            entry = {"model": theirs_log["model"], "step": chosen[run.name]["step"],
                     "choice": chosen[run.name]["digest"], "sweep": sweep, "evaluated_at": theirs_log["evaluated_at"],
                     BORROWED_FROM: lent_entry}  # fmt: skip
            write_atomic(held.log, json.dumps({**log, run.name: entry}, indent=1) + "\n")
            copied.append(f"{run.name} ({held.name})")
    return copied

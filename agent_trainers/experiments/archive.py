"""A sweep that outlives its machine: each finished seed's results, without the weights, in a folder small enough
to commit (``agent-r1 sweep NAME --archive DIR``).

A sweep of several seeds can take longer than the machine it runs on lives (a lent GPU box, a CI runner, a
sandbox that is wiped between sessions), and its checkpoints are too large to keep. What the report reads is
small: each run's config and ``metrics.jsonl`` (the dev curve, seconds per step), its evaluations' summaries and
per-task records, its test (and transfer sets') evaluations, its choice, its log entries and its cost, and the
sweep's baseline evaluations. So a sweep grows seed by seed:

1. a seed's runs are trained, their checkpoints chosen on dev and their test set evaluated on one machine
   (:func:`~agent_trainers.experiments.protocol.evaluate_test`: every choice is a run's own);
2. :func:`archive_runs` copies those results into the archive: the files above, each ``episodes.jsonl`` without
   its trajectories (the numbers stay; the viewer's tokens do not), and merges the sweep's ``choices.json``,
   ``test_log.json``, transfer logs and ``costs.json`` entries (:func:`archive_baselines`: the baselines);
3. on the next machine :func:`restore_runs` copies the archived runs into the new sweep folder, where they count as
   finished (:attr:`~agent_trainers.experiments.plan.Run.archived`) and keep their test figures; the sweep trains
   the seeds that are missing and reports over all of them.

The protocol holds across machines: a test evaluation records the sweep's definition
(:func:`~agent_trainers.experiments.protocol.sweep_digest`), so a seed added under a changed recipe is refused.
A sweep that tests is archived run by run: each run is tested and archived as soon as it is finished, before the
next one trains, so a machine that goes mid-seed takes only the run it was training. A run restored without its
weights that a run still to train starts from (a seed's SFT run, restored while its RL arms are not) is trained
again (:func:`rebuild_weights`) and checked to be the archived run: its dev answers must equal the archived ones.
A transfer set named after a run was archived needs that run's weights, so it is evaluated on the machine that
trained it.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agent_gym.core.files import write_atomic
from agent_trainers.experiments.plan import ARCHIVED, Run, read_json, with_settings
from agent_trainers.experiments.protocol import CHOICES, TEST_LOG, TRANSFER, ProtocolError
from agent_trainers.experiments.runner import COSTS, RUN_CONFIG

__all__ = ["archive_baselines", "archive_runs", "episode_records", "needing_weights", "rebuild_weights", "restore_runs"]

BASELINES = "baselines"
"""The sweep's baseline evaluations (:data:`~.transfer.BASELINE_FOLDER`)."""

RUN_FILES = (RUN_CONFIG, "config.yaml", "metrics.jsonl")
"""What a run folder keeps in the archive, besides its evaluations."""
EVAL_FILES = ("spec.json", "summary.json")
"""What an evaluation folder keeps, besides ``episodes.jsonl`` without trajectories (its Markdown and CSV tables
are made from these)."""


def _put(data: bytes, dst: Path) -> bool:
    """Write ``data`` to ``dst`` unless it already holds exactly that; whether it wrote."""
    if dst.is_file() and dst.read_bytes() == data:
        return False
    write_atomic(dst, data)
    return True


def _copy_evaluation(src: Path, dst: Path) -> bool:
    """Copy one evaluation's results (episodes without trajectories); whether anything in ``dst`` changed."""
    changed = False
    for name in EVAL_FILES:
        if (src / name).is_file():
            changed |= _put((src / name).read_bytes(), dst / name)
    episodes = src / "episodes.jsonl"
    if episodes.is_file():
        lines = []
        for line in episodes.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                record.pop("trajectory", None)
                lines.append(json.dumps(record))
        changed |= _put("".join(x + "\n" for x in lines).encode("utf-8"), dst / "episodes.jsonl")
    return changed


def _merge(src: Path, dst: Path, names: set[str]) -> None:
    """Copy the entries of ``names`` from the sweep file ``src`` into ``dst`` (both ``{run: entry}`` files, or
    ``choices.json``, whose runs are a list under one sweep digest)."""
    given, kept = read_json(src), read_json(dst)
    if src.name == CHOICES:
        if kept and given and kept.get("sweep") != given.get("sweep"):
            raise ProtocolError(
                f"{dst} holds runs of another definition of the sweep (sweep {kept.get('sweep')}, these "
                f"{given.get('sweep')}): its recipe, arms, dev or test set or rule changed; archive elsewhere"
            )
        runs = {e["run"]: e for e in kept.get("runs", [])}
        runs.update({e["run"]: e for e in given.get("runs", []) if e["run"] in names})
        merged = {**given, **kept, "runs": list(runs.values())}
    else:
        merged = {**kept, **{k: v for k, v in given.items() if k in names}}
    write_atomic(dst, json.dumps(merged, indent=1) + "\n")


def archive_runs(runs: Sequence[Run], out: str | Path, archive: str | Path) -> list[str]:
    """Copy the results of ``runs`` (finished, in the sweep folder ``out``) into ``archive``; returns the names of
    those whose archived results changed (new runs included).

    A run archived earlier whose results are unchanged keeps its files and its stamp as they were, so archiving a
    sweep again (each ``agent-r1 sweep --archive`` archives every seed it finishes or finds finished) changes
    nothing in a committed archive but the new seeds.

    Raises:
        ProtocolError: The archive holds runs of another definition of the sweep.
        ValueError: A run is not finished, or its folder is not under ``out``.
    """
    out, archive = Path(out), Path(archive)
    names = {r.name for r in runs}
    changed: set[str] = set()
    for run in runs:
        if not run.done:
            raise ValueError(f"{run.name} is not finished: only finished runs are archived")
        dst = archive / run.folder.relative_to(out)
        dst.mkdir(parents=True, exist_ok=True)
        for name in RUN_FILES:
            if (run.folder / name).is_file() and _put((run.folder / name).read_bytes(), dst / name):
                changed.add(run.name)
        for phase in sorted(p for p in (run.folder / "eval").glob("*") if p.is_dir()):
            if _copy_evaluation(phase, dst / "eval" / phase.name):
                changed.add(run.name)
        for held in _held_out_folders(out):  # test/, transfer/<set>/
            src = out / held / run.name
            if src.is_dir() and _copy_evaluation(src, archive / held / run.name):
                changed.add(run.name)
        if not (dst / ARCHIVED).is_file():
            changed.add(run.name)
    for log in _logs(out):
        _merge(out / log, archive / log, names)
    for run in (r for r in runs if r.name in changed):  # last: a run is archived once everything it needs is there
        stamp = {"run": run.name, "archived_at": time.strftime("%Y-%m-%d %H:%M:%S"), "from": str(run.folder)}
        lender = read_json(run.folder / ARCHIVED).get("borrowed_from")  # a borrowed run (.borrow) names its lender
        stamp |= {"borrowed_from": lender} if lender is not None else {}
        write_atomic(archive / run.folder.relative_to(out) / ARCHIVED, json.dumps(stamp) + "\n")
    return sorted(changed)


def restore_runs(runs: Sequence[Run], out: str | Path, archive: str | Path) -> list[str]:
    """Copy the archived ones of ``runs`` that ``out`` lacks from ``archive`` into ``out``; returns their names.

    Raises:
        ProtocolError: ``out`` holds runs of another definition of the sweep than the archive.
    """
    out, archive = Path(out), Path(archive)
    restored = []
    for run in runs:
        src = archive / run.folder.relative_to(out)
        if run.done or not (src / ARCHIVED).is_file():
            continue
        shutil.copytree(src, run.folder, dirs_exist_ok=True)
        for held in _held_out_folders(archive):
            if (archive / held / run.name).is_dir():
                shutil.copytree(archive / held / run.name, out / held / run.name, dirs_exist_ok=True)
        restored.append(run.name)
    for log in _logs(archive) if restored else []:
        _merge(archive / log, out / log, set(restored))
    if (archive / BASELINES).is_dir() and not (out / BASELINES).is_dir():
        shutil.copytree(archive / BASELINES, out / BASELINES)
    return restored


def _has_weights(run: Run) -> bool:
    return (run.model_folder / "config.json").is_file()


def needing_weights(runs: Sequence[Run]) -> list[Run]:
    """The runs of ``runs`` restored without their weights that a run still to train starts from, directly or
    through another such run; in plan order (a start before the runs that start from it). Borrowed runs are
    never trained here, so their starts are not needed."""
    needed: set[str] = set()
    for run in reversed(runs):  # a run after its start: walk back so a needed run makes its start needed
        if run.arm.borrow is not None:
            continue
        if not run.done or run.name in needed:
            start = run.start
            if start is not None and start.archived and not _has_weights(start):
                needed.add(start.name)
    return [r for r in runs if r.name in needed]


def rebuild_weights(run: Run, train: Callable[[Run], object], say: Callable[[str], None] = print) -> None:
    """Train the restored run ``run`` again, in a scratch folder beside it, and move its model into ``run``'s folder
    once it is shown to be the archived run: its dev evaluation's episode records (without trajectories) equal the
    archived ones, every task (greedy decoding at a fixed seed). The archived results stay as they were; the scratch
    folder is removed.

    Raises:
        ProtocolError: The model trained again answered the dev set differently (then the runs that would start
            from it would not start from the run whose test figures the archive holds); the scratch folder is kept
            for a look.
    """
    from agent_trainers.experiments.report import dev_eval_folder

    scratch = run.folder.parent / f".{run.arm.name}-weights"
    shutil.rmtree(scratch, ignore_errors=True)
    again = Run(run.arm, run.seed, with_settings(run.config, {"output_dir": str(scratch)}), run.start, run.left_behind)
    say(f"[sweep] {run.name}: restored without its weights, which a run still to train starts from: trained again "
        f"in {scratch}")  # fmt: skip
    started = time.perf_counter()
    train(again)
    archived, rebuilt = dev_eval_folder(run), dev_eval_folder(again)
    a, b = episode_records(archived), episode_records(rebuilt)
    if a != b:
        differ = sum(x != y for x, y in zip(a, b, strict=False)) + abs(len(a) - len(b))
        raise ProtocolError(
            f"{run.name} trained again is not the archived run: it answered the dev set differently on {differ} of "
            f"{max(len(a), len(b))} tasks ({rebuilt} against {archived}); the runs that start from it cannot be "
            f"trained here against its archived test figures (the scratch run is kept in {scratch})"
        )
    shutil.rmtree(run.model_folder, ignore_errors=True)
    shutil.move(str(again.model_folder), str(run.model_folder))
    shutil.rmtree(scratch)
    say(f"[sweep] {run.name}: trained again in {(time.perf_counter() - started) / 60:.1f} min; its dev answers equal "
        f"the archived ones, {len(a)} of {len(a)}: its model is in {run.model_folder}")  # fmt: skip


def episode_records(folder: Path) -> list[dict[str, Any]]:
    """An evaluation folder's episode records without their trajectories (as an archive keeps them): what two
    evaluations of one model under the same settings share, to the digit.

    Raises:
        ProtocolError: The folder has no ``episodes.jsonl``.
    """
    path = folder / "episodes.jsonl"
    if not path.is_file():
        raise ProtocolError(f"{folder} has no episodes.jsonl")
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    for row in rows:
        row.pop("trajectory", None)
    return rows


def archive_baselines(out: str | Path, archive: str | Path) -> list[str]:
    """Copy the sweep's finished baseline evaluations (``baselines/<set>/<method>``) into ``archive``, without
    trajectories; returns the ``<set>/<method>`` names of those that changed there."""
    out, archive = Path(out), Path(archive)
    changed = []
    for summary in sorted((out / BASELINES).glob("*/*/summary.json")):
        name = summary.parent.relative_to(out / BASELINES)
        if _copy_evaluation(summary.parent, archive / BASELINES / name):
            changed.append(str(name))
    return changed


def _held_out_folders(root: Path) -> list[str]:
    """The held-out sets' evaluation folders under a sweep folder or an archive: ``test`` and ``transfer/<set>``."""
    return ["test", *(f"{TRANSFER}/{p.name}" for p in sorted((root / TRANSFER).glob("*")) if p.is_dir())]


def _logs(root: Path) -> list[str]:
    """The sweep-level ``{run: entry}`` files under ``root``: choices, test and transfer logs, costs."""
    logs = [
        *(CHOICES, TEST_LOG, COSTS),
        *(f"{TRANSFER}/{p.name}" for p in sorted((root / TRANSFER).glob("*_log.json"))),
    ]
    return [x for x in logs if (root / x).is_file()]

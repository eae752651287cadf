"""The protocol of a claim that training made an agent better, in code: choose on dev, freeze, test once.

1. **Dev curves** (:func:`dev_curve`): every run is evaluated on the dev set while it trains (its ``eval/``
   phases); step 0 is the model it started from.
2. **Choices** (:func:`make_choices`): each run's checkpoint, chosen on its dev curve by the sweep's rule
   (``final`` or ``best_dev``), with the dev value it was chosen at. They are written to ``choices.json``
   (:func:`freeze_choices`) before anything touches the test set.
3. **Test, once** (:func:`evaluate_test`): the chosen checkpoint of each run and the model each run started
   from are evaluated on the test set, each evaluation recorded in ``test_log.json`` with the choice it was
   made under. A test set evaluated under other choices is refused - a test set that was looked at while
   choosing is a dev set from then on - and a test figure is reported only from an evaluation that log holds
   (:func:`frozen_test_folders`).
4. **Transfer sets** (:attr:`~.spec.SweepSpec.transfer`, :class:`HeldOut`): test sets of other data, evaluated the
   same way right after the test set, each with its own log.

Every choice is a run's own (its checkpoint, on its own dev curve); the rest - the recipe, the arms, the dev and
test sets, the rule - is the sweep's definition, fixed before anything runs. So each run can be tested as soon as
it is finished (the sweep does so, run by run) and the sweep can grow by runs and seeds afterwards (on another
machine: :mod:`.archive`), as long as the definition stays what the first test evaluation was made under
(:func:`sweep_digest`: a changed definition is refused).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent_gym.core.files import write_atomic
from agent_trainers.experiments.plan import Run, read_json
from agent_trainers.experiments.spec import Choose, Stage, SweepSpec, TaskSet

__all__ = [
    "CHOICES",
    "TEST_LOG",
    "TRANSFER",
    "Choice",
    "HeldOut",
    "ProtocolError",
    "check_definition",
    "dev_curve",
    "evaluate_test",
    "freeze_choices",
    "frozen_test_folders",
    "held_out_sets",
    "make_choices",
    "metrics_rows",
    "sweep_digest",
]

CHOICES = "choices.json"
"""The frozen choices, in the sweep's folder."""
TEST_LOG = "test_log.json"
"""Every test evaluation made, with the choices it was made under."""
TRANSFER = "transfer"
"""The transfer sets' evaluations and logs, in the sweep's folder."""


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


def metrics_rows(folder: Path) -> list[dict[str, Any]]:
    """The rows of a run folder's ``metrics.jsonl`` (none when it has none)."""
    path = folder / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text(encoding="utf-8").split("\n") if x.strip()]


def dev_curve(run: Run, metric: str) -> list[tuple[int, float]]:
    """``(step, dev mean)`` of ``run`` from step 0 (the model it started from) to its last evaluation.

    Raises:
        ProtocolError: The run has no dev evaluation of ``metric``.
    """
    rows = metrics_rows(run.folder)
    own = [(int(r["step"]), float(r[metric])) for r in rows if r.get("stage") == "eval" and metric in r]
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
    if step == last or run.archived:  # an archived run keeps no weights: its test figures were made already
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


OUTSIDE_DEFINITION = {"seeds", "description", "transfer", "baselines"}
"""The spec's fields left out of :func:`sweep_digest`: more seeds, and sets evaluated after every choice."""
NOT_A_CHOICE = ("threads", "verbose", "report_to", "output_dir")
"""Overrides that change how a run is carried out, not what it computes: left out of :func:`sweep_digest`."""


def sweep_digest(spec: SweepSpec, overrides: Mapping[str, Any] | None = None) -> str:
    """The digest of a sweep's definition: the spec less its seeds, description, transfer sets and baselines (they
    choose nothing) and a borrowed arm's archive path, the recipe file's text and the caller's overrides (less
    :data:`NOT_A_CHOICE`). Test evaluations record it; one made under another is refused."""
    from agent_trainers.pipeline.config_files import find_config

    kept = {k: v for k, v in (overrides or {}).items() if k.split(".")[0] not in NOT_A_CHOICE}
    recipe = hashlib.sha256(find_config(spec.recipe).read_bytes()).hexdigest()
    definition = spec.model_dump(mode="json", exclude=OUTSIDE_DEFINITION)
    for arm in definition["arms"]:  # a borrowed arm is defined by its lender's arm; where its archive lies is not
        lender = arm.pop("borrow")  # (and an arm that borrows nothing hashes as it did before arms could)
        if lender is not None:
            arm["borrow"] = {"arm": lender["arm"]}
    blob = {"spec": definition, "recipe": recipe, "set": kept}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _choice_digest(spec: SweepSpec, choice: Choice, sweep: str) -> str:
    """One run's choice, under the sweep's definition and test set (the model's path is left out: it moves with
    the sweep's folder)."""
    test = spec.test.key() if spec.test is not None else None
    mine = {"run": choice.run, "step": choice.step, "dev": choice.dev}
    blob = json.dumps({"test": test, "metric": spec.metric, "sweep": sweep, "choice": mine}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def check_definition(out: str | Path, sweep: str) -> None:
    """Refuse a sweep folder whose test set was evaluated under another definition (digest) than ``sweep``.

    Raises:
        ProtocolError: It was; the message says when and what to do.
    """
    folder = Path(out)
    tested = read_json(folder / TEST_LOG)
    other = sorted({e["sweep"] for e in tested.values()} - {sweep})
    if other:
        when = min(e["evaluated_at"] for e in tested.values() if e["sweep"] in other)
        raise ProtocolError(
            f"the test set of {folder} was evaluated on {when} under another definition of the sweep (sweep "
            f"{other[0]}, now {sweep}: its recipe, arms, dev or test set or rule changed); a test set that was looked "
            "at while choosing is a dev set from then on: name a new test set in the sweep, or use another folder"
        )


def freeze_choices(spec: SweepSpec, runs: Sequence[Run], out: str | Path, sweep: str | None = None) -> dict[str, Any]:
    """Write the choices of ``runs`` into ``choices.json`` (other runs' entries are kept); returns its content.

    ``sweep``: the definition's digest (:func:`sweep_digest`; default: the spec's, without overrides).

    Raises:
        ProtocolError: The test set was evaluated under another definition of the sweep, or a run's test set
            under another choice of that run.
    """
    sweep = sweep or sweep_digest(spec)
    folder = Path(out)
    check_definition(folder, sweep)
    tested = read_json(folder / TEST_LOG)
    previous = read_json(folder / CHOICES)
    entries = {e["run"]: e for e in previous.get("runs", [])} if previous.get("sweep") == sweep else {}
    for choice in make_choices(spec, runs):
        digest = _choice_digest(spec, choice, sweep)
        done = tested.get(choice.run)
        if done is not None and done["choice"] != digest:
            raise ProtocolError(
                f"the test set of {folder} was evaluated for {choice.run} on {done['evaluated_at']} under another "
                f"choice (choice {done['choice']}, now {digest}: its dev curve changed); a test set that was looked at "
                "while choosing is a dev set from then on: name a new test set in the sweep, or use another folder"
            )
        same = entries.get(choice.run, {}).get("digest") == digest  # then it keeps the time it was first frozen
        when = entries[choice.run]["frozen_at"] if same else time.strftime("%Y-%m-%d %H:%M:%S")
        entries[choice.run] = {**asdict(choice), "digest": digest, "frozen_at": when}  # the model where it is now
    frozen = {"sweep": sweep, "metric": spec.metric, "rule": spec.choose.value, "runs": list(entries.values())}
    if previous != frozen:
        write_atomic(folder / CHOICES, json.dumps(frozen, indent=1) + "\n")
    return frozen


@dataclass(frozen=True)
class HeldOut:
    """A set evaluated once, after the choices are frozen: the test set, or a transfer set (:attr:`SweepSpec.transfer`).

    Attributes:
        name: ``test``, or the transfer set's name.
        tasks: Its tasks.
        env: Its env id (None: each run's recipe env).
        folder: Its evaluations, one folder per run (``<folder>/<arm>/seed<k>``).
        log: Its log: per run, the choice and the sweep definition its evaluation was made under.
    """

    name: str
    tasks: TaskSet
    env: str | None
    folder: Path
    log: Path

    def config(self, run: Run) -> Any:
        """``run``'s config, evaluating on this set's env."""
        c = run.config
        return c if self.env is None else c.model_copy(update={"env": c.env.model_copy(update={"id": self.env})})

    @property
    def task_range(self) -> tuple[dict[str, Any], int, int]:
        """``(env kwargs, first task, count)``, as :func:`~agent_trainers.pipeline.stages.evaluate_model` takes it."""
        return (dict(self.tasks.env_kwargs), self.tasks.first_task, self.tasks.tasks)


def held_out_sets(spec: SweepSpec, out: str | Path) -> list[HeldOut]:
    """The test set (evaluations in ``test/``, log :data:`TEST_LOG`) and each transfer set (``transfer/<name>/``,
    log ``transfer/<name>_log.json``) of ``spec``, in that order."""
    folder = Path(out)
    sets = [] if spec.test is None else [HeldOut("test", spec.test, None, folder / "test", folder / TEST_LOG)]
    for name, ts in spec.transfer.items():
        sets.append(HeldOut(name, ts, ts.env, folder / TRANSFER / name, folder / TRANSFER / f"{name}_log.json"))
    return sets


def evaluate_test(
    spec: SweepSpec, runs: Sequence[Run], out: str | Path, say: Any = print, sweep: str | None = None
) -> None:
    """Evaluate each run's chosen model on the test set once (under its frozen choice), then on each transfer set;
    done ones are kept.

    A run whose chosen model another run's evaluation already evaluated, under the same settings (an arm that
    chose the model it started from: its start's), gets a copy of that evaluation, named as its own and marked
    ``copied_from`` in ``summary.json`` and the log: greedy decoding at a fixed env seed makes it the same
    evaluation, and a copy costs nothing. A sampled evaluation (``eval.temperature`` above 0) is never copied.

    Raises:
        ProtocolError: No test set, or the sweep's definition or a run's choice changed since its test evaluation.
    """
    if spec.test is None:
        raise ProtocolError("the sweep names no test set")
    sweep = sweep or sweep_digest(spec)
    frozen = freeze_choices(spec, runs, out, sweep)  # refuses choices other than the test set's
    chosen = {c["run"]: c for c in frozen["runs"]}
    for held in held_out_sets(spec, out):
        _evaluate_once(held, runs, chosen, sweep, say)


def _evaluate_once(
    held: HeldOut, runs: Sequence[Run], chosen: Mapping[str, Mapping[str, Any]], sweep: str, say: Any
) -> None:
    """Evaluate each run's chosen model on ``held`` unless its log holds an evaluation under the same choice."""
    from agent_trainers.pipeline.stages import evaluate_model, evaluation_settings
    from agent_trainers.policies.loader import load_model

    log = read_json(held.log)
    tasks = held.task_range
    where = "test" if held.name == "test" else f"transfer {held.name}"

    def same(run: Run) -> str | None:  # what makes two greedy evaluations one: the model and the settings
        settings = evaluation_settings(held.config(run), phase="test", tasks=tasks)
        if settings["spec"]["rollout"]["temperature"] != 0:
            return None  # sampled: two evaluations are two draws
        return json.dumps({"model": chosen[run.name]["model"], **settings}, sort_keys=True)

    made: dict[str, Run] = {}  # the runs with a greedy evaluation, by what it evaluated
    for k, run in enumerate(runs, 1):
        target, choice, key = held.folder / run.name, chosen[run.name], same(run)
        done = log.get(run.name)
        if done is None or done["choice"] != choice["digest"] or not (target / "summary.json").is_file():
            if run.archived:
                raise ProtocolError(
                    f"{run.name} was restored from an archive, without its weights: it has no {where} evaluation and "
                    f"none can be made here; evaluate {held.name} on the machine that holds its checkpoints"
                )
            entry = {"model": choice["model"], "step": choice["step"], "choice": choice["digest"], "sweep": sweep}
            twin = None if key is None else made.get(key)
            label = f"{run.name} ({held.name})"
            if twin is not None:
                say(
                    f"[sweep] {where} {k}/{len(runs)}: {run.name} ({choice['model']}): {twin.name}'s evaluation, copied"
                )
                _copy_evaluation_as(held.folder / twin.name, target, held.config(run), tasks, label)
                entry["copied_from"] = twin.name
            else:
                say(f"[sweep] {where} {k}/{len(runs)}: {run.name} ({choice['model']})")
                policy_model, tokenizer = load_model(choice["model"], device=run.config.device, seed=run.config.seed)
                evaluate_model(held.config(run), policy_model, tokenizer, target, phase="test", tasks=tasks,
                               label=label)  # fmt: skip
                del policy_model
            log[run.name] = {**entry, "evaluated_at": time.strftime("%Y-%m-%d %H:%M:%S")}
            write_atomic(held.log, json.dumps(log, indent=1) + "\n")
        if key is not None:
            made.setdefault(key, run)  # the first run with this evaluation is the one copied from


def _copy_evaluation_as(
    source: Path, target: Path, config: Any, tasks: tuple[dict[str, Any], int, int], label: str
) -> None:
    """Write ``source``'s evaluation into ``target`` as the evaluation of the run of ``config``: the same episodes
    and figures, the spec and summary named as its own (``label``), ``copied_from`` the source folder."""
    from agent_trainers.evaluation.outputs import EPISODES, SUMMARY, EvalFolder
    from agent_trainers.pipeline.stages import eval_spec

    spec = eval_spec(config, phase="test", tasks=tasks, label=label).to_json()
    copy = EvalFolder(target)
    copy.start(spec, resume=False)
    write_atomic(target / EPISODES, (source / EPISODES).read_text(encoding="utf-8"))
    summary = read_json(source / SUMMARY)
    summary.update(label=spec["label"], model=spec["model"], wall_s=0.0, cpu_s=0.0, copied_from=str(source))
    copy.write_summary(summary)


def frozen_test_folders(spec: SweepSpec, runs: Sequence[Run], out: str | Path, where: str = "test") -> dict[str, Path]:
    """The evaluation folder of each run on the test set (or the transfer set ``where``), only as the protocol made
    it (under its frozen choice).

    Raises:
        ProtocolError: A run's figure was not made under its frozen choice, or is missing.
        KeyError: No such set.
    """
    folder = Path(out)
    held = {h.name: h for h in held_out_sets(spec, folder)}[where]
    frozen, log = read_json(folder / CHOICES), read_json(held.log)
    if not frozen:
        raise ProtocolError(f"{folder} has no {CHOICES}: no test figure is reported before the choices are frozen")
    chosen = {c["run"]: c["digest"] for c in frozen["runs"]}
    out_folders = {}
    for run in runs:
        entry, digest = log.get(run.name), chosen.get(run.name)
        if entry is None or digest is None or entry["choice"] != digest or entry["sweep"] != frozen["sweep"]:
            raise ProtocolError(f"{run.name}: no {where} evaluation under its frozen choice ({digest})")
        out_folders[run.name] = held.folder / run.name
    return out_folders

"""A sweep's runs: one typed copy of the recipe per (seed, arm) (:func:`plan_runs`), never ``--set`` strings.

Each run's config is the recipe (with the sweep's ``set``, then the caller's overrides) under the dev set's
evaluation, with the run's seed and folder, and:

* ``stage: sft`` - the SFT stage alone (``rl.enabled: false``, no evaluation before it);
* ``stage: rl`` with ``start`` - the RL stage alone from the start arm's model of the same seed
  (``sft.enabled: false``, ``model.name``: that arm's SFT model or final model);
* ``algorithm`` - the recipe's algorithm section handed over to that algorithm
  (:meth:`~agent_trainers.pipeline.config.TrainConfig.with_algorithm`: what both read carries over);
* the arm's own ``set``, last.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_trainers.experiments.spec import Arm, Stage, SweepSpec
from agent_trainers.pipeline.config import TrainConfig, config_from_dict, load_config, set_dotted

__all__ = ["ARCHIVED", "Run", "describe", "plan_runs", "select_arms", "with_settings"]

ARCHIVED = "archived.json"
"""In a run folder: the run was restored from an archive (:mod:`.archive`); its weights stayed behind."""


@dataclass(frozen=True)
class Run:
    """One run of a sweep: an arm on a seed.

    Attributes:
        arm: Its arm.
        seed: Its seed.
        config: The typed config it trains with (its ``output_dir`` is :attr:`folder`).
        start: The run whose model it starts from, if any.
        left_behind: Settings of the recipe's algorithm section this arm's algorithm does not read.
    """

    arm: Arm
    seed: int
    config: TrainConfig
    start: Run | None = None
    left_behind: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """``<arm>/seed<seed>``."""
        return f"{self.arm.name}/seed{self.seed}"

    @property
    def folder(self) -> Path:
        """Its run folder."""
        return Path(self.config.output_dir)

    @property
    def model_folder(self) -> Path:
        """Where its trained model is: the SFT model of an SFT run, else the final model."""
        return self.folder / ("sft" if self.arm.stage is Stage.SFT else "final")

    @property
    def done(self) -> bool:
        """Finished: its final model and evaluations exist, or it was restored from an archive."""
        trained = (self.folder / "final" / "agent_r1.json").is_file() and (self.folder / "eval").is_dir()
        return trained or self.archived

    @property
    def archived(self) -> bool:
        """Restored from a sweep's archive (:mod:`.archive`): its results without its weights."""
        return (self.folder / ARCHIVED).is_file()


def read_json(path: str | Path) -> dict[str, Any]:
    """A sweep folder's JSON file (``choices.json``, ``test_log.json``, ``costs.json``); ``{}`` when none was
    written yet."""
    path = Path(path)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def with_settings(config: TrainConfig, settings: Mapping[str, Any]) -> TrainConfig:
    """``config`` with dotted keys set (validated again: a bad key or value is the config's own one-line error)."""
    if not settings:
        return config
    data = config.to_dict()
    for dotted, value in settings.items():
        set_dotted(data, dotted, value)
    return config_from_dict(data)


def plan_runs(spec: SweepSpec, out: str | Path, overrides: Mapping[str, Any] | None = None) -> list[Run]:
    """The runs of ``spec`` under ``out``, seed by seed, each arm after the arm it starts from.

    Raises:
        ValueError: A recipe, an arm's change or an override that does not validate.
        FileNotFoundError: No such recipe.
    """
    recipe = load_config(spec.recipe, {**spec.set, **dict(overrides or {})})
    dev = {"env.eval_kwargs": spec.dev.env_kwargs, "eval.first_task": spec.dev.first_task, "eval.tasks": spec.dev.tasks}
    recipe = with_settings(recipe, dev)
    runs: list[Run] = []
    for seed in spec.seeds:
        by_arm: dict[str, Run] = {}
        for arm in spec.arms:
            run = _run(recipe, arm, seed, Path(out) / f"seed{seed}" / arm.name, by_arm)
            by_arm[arm.name] = run
            runs.append(run)
    return runs


def select_arms(runs: Sequence[Run], names: Sequence[str]) -> list[Run]:
    """The runs of the arms ``names`` and of every arm they start from (a run needs its start's model), in plan
    order.

    Raises:
        ValueError: A name that is no arm of the runs (the message lists the arms).
    """
    arms = list(dict.fromkeys(r.arm.name for r in runs))
    unknown = [n for n in names if n not in arms]
    if unknown:
        raise ValueError(f"no arm {', '.join(unknown)} in this sweep; its arms: {', '.join(arms)}")
    keep: set[str] = set()
    for run in runs:
        chain: Run | None = run if run.arm.name in names else None
        while chain is not None:
            keep.add(chain.name)
            chain = chain.start
    return [r for r in runs if r.name in keep]


def _run(recipe: TrainConfig, arm: Arm, seed: int, folder: Path, before: Mapping[str, Run]) -> Run:
    config = recipe
    left: list[str] = []
    if arm.algorithm is not None and arm.algorithm != recipe.algorithm:
        config, left = config.with_algorithm(arm.algorithm)
    stage: dict[str, Any] = {"seed": seed, "output_dir": str(folder), "eval.before": False}
    start = before[arm.start] if arm.start is not None else None
    if arm.stage is Stage.SFT:
        stage["rl.enabled"] = False
    elif start is not None:
        stage |= {"sft.enabled": False, "model.name": str(start.model_folder)}
    config = with_settings(config, stage | arm.set)
    return Run(arm, seed, config, start, tuple(left))


def describe(runs: Sequence[Run]) -> list[str]:
    """One line per run: what it is and how its config differs from the recipe's (for ``--plan``)."""
    lines = []
    for run in runs:
        c = run.config
        what = "SFT" if run.arm.stage is Stage.SFT else f"{c.algorithm} RL, {c.rl.steps} steps"
        own_sft = c.sft.enabled and run.arm.stage is Stage.RL
        start = f" from {run.start.name}" if run.start else (" after its own SFT" if own_sft else "")
        left = f"; {run.arm.algorithm} does not read {', '.join(run.left_behind)}" if run.left_behind else ""
        if run.arm.borrow is not None:
            lent = f"{run.arm.borrow.archive}/seed{run.seed}/{run.arm.borrow.arm}"
            left += f"; borrowed, not trained here: {lent} once checked to be this run"
        lines.append(f"{run.name:28s} {what}{start} -> {run.folder}{left}")
    return lines

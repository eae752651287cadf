"""A sweep as data: :class:`SweepSpec` (a recipe, arms, seeds, a dev set and a test set), read from YAML.

Example (``agent_trainers/sweeps/learn_main.yaml``, abridged)::

    description: SFT from partly flawed demos, then GRPO; does RL beat SFT on held-aside tasks?
    recipe: learn_main            # a packaged config or a path: every run is a typed copy of it
    metric: em
    seeds: [0]                    # each seed re-draws the SFT data, the SFT run and the RL run
    dev: {env_kwargs: {task_seed: 3, action_format: tags, reward: outcome}, tasks: 100}
    test: {env_kwargs: {task_seed: 17, action_format: tags, reward: outcome}, tasks: 100}
    arms:
      - {name: sft, stage: sft}
      - {name: grpo, start: sft}
      - {name: rloo, start: sft, algorithm: rloo}

The protocol is part of the data: the dev set is where every run is evaluated while it trains and where the
checkpoint of each run is chosen (``choose``); the test set is evaluated once, after every choice is frozen
(:mod:`.protocol`), and a sweep without one reports dev figures only.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_trainers.algorithms.shared.names import Algorithm
from agent_trainers.pipeline.config_files import load_yaml

__all__ = [
    "BASELINES",
    "PACKAGED_SWEEPS",
    "Arm",
    "Borrow",
    "Choose",
    "Stage",
    "SweepSpec",
    "TaskSet",
    "TransferSet",
    "find_sweep",
    "load_sweep",
]

PACKAGED_SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"
"""The sweeps shipped in the package (``agent-r1 sweep NAME``)."""


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True, allow_inf_nan=False)


class TaskSet(_Data):
    """A fixed set of evaluation tasks: the env's kwargs and a range of task indices."""

    env_kwargs: dict[str, Any]
    """``gymnasium.make`` kwargs of the evaluation env (e.g. another task family, another data file)."""
    first_task: int = Field(default=0, ge=0)
    """Index of the first task."""
    tasks: int = Field(ge=1)
    """How many tasks, from ``first_task`` on."""

    def key(self) -> tuple[str, int, int]:
        """What tells two task sets apart (a dev set equal to the test set is refused)."""
        import json

        return (json.dumps(self.env_kwargs, sort_keys=True), self.first_task, self.tasks)


class TransferSet(TaskSet):
    """A test set of another task family or data set (out of domain), evaluated like the test set."""

    env: str | None = None
    """Its registered env id (e.g. ``AgentR1/MuSiQue-v0``); None: the recipe's env."""


BASELINES = ("closed-book", "naive-rag", "base-tool-call")
"""The untrained methods a sweep can evaluate beside its arms (:class:`~agent_trainers.evaluation.Method`)."""


class Stage(StrEnum):
    """What an arm runs."""

    SFT = "sft"
    """The recipe's cold-start SFT stage alone (its model starts the arms that name it)."""
    RL = "rl"
    """The recipe's RL stage from another arm's model (``start``), or SFT then RL when ``start`` is empty."""


class Choose(StrEnum):
    """How each run's checkpoint is chosen on the dev set."""

    FINAL = "final"
    """The final model (no choice: the dev curve is only reported)."""
    BEST_DEV = "best_dev"
    """The evaluated step with the best dev mean of the metric, the earliest on a tie (step 0 is the start
    model: a run that never beat it chooses it)."""


class Borrow(_Data):
    """Where a borrowed arm's runs are (:mod:`.borrow`): another sweep's archive and its arm of the same config."""

    archive: str
    """That sweep's archive folder (``agent-r1 sweep --archive``), e.g. ``docs/results/sweeps/learn_hotpotqa``."""
    arm: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    """The arm's name there."""


class Arm(_Data):
    """One arm of a sweep: a run per seed, a typed copy of the recipe with its own changes."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    """Its name (a folder name; the row of the tables)."""
    stage: Stage = Stage.RL
    """What it runs."""
    start: str | None = None
    """The arm whose final model this one starts from (same seed), e.g. ``sft``."""
    algorithm: Algorithm | None = None
    """The RL algorithm (None: the recipe's); the recipe's algorithm section carries over what both read."""
    set: dict[str, Any] = Field(default_factory=dict)
    """Dotted config keys set for this arm (after ``algorithm``), e.g. ``{rl.learning_rate: 1.0e-6}``."""
    borrow: Borrow | None = None
    """Not trained here: each seed's run is another sweep's run of the same config from the same start model,
    taken from that sweep's archive with its dev curve, choice and test figures (:mod:`.borrow`). So one arm
    (e.g. a reward preset another sweep trained) stands in two sweeps' tables without training it twice."""


class SweepSpec(_Data):
    """A sweep: arms run on several seeds from one recipe, evaluated under a dev/test protocol."""

    description: str = ""
    """What the sweep asks."""
    recipe: str
    """The ``agent-r1 train`` config every run copies: a packaged config's name or a path."""
    set: dict[str, Any] = Field(default_factory=dict)
    """Dotted keys set on the recipe for every arm."""
    metric: str = "em"
    """The primary metric (a metric of the evaluation table): the one checkpoints are chosen on."""
    seeds: list[int] = Field(min_length=1)
    """The seed axis: each seed re-draws the SFT data, the SFT run and the RL runs."""
    dev: TaskSet
    """Where every run is evaluated while it trains and every choice is made (it replaces the recipe's
    ``env.eval_kwargs`` and ``eval.first_task`` / ``eval.tasks``)."""
    test: TaskSet | None = None
    """Evaluated once, for each run's chosen checkpoint and the arms they start from, after every choice is frozen."""
    choose: Choose = Choose.FINAL
    """How each RL run's checkpoint is chosen on dev."""
    arms: list[Arm] = Field(min_length=1)
    """The arms, in the order they run (an arm comes after the arm it starts from)."""
    transfer: dict[str, TransferSet] = Field(default_factory=dict)
    """Out-of-domain test sets by name (the paper's Table 3: 2Wiki and MuSiQue for a HotpotQA agent): evaluated
    once, like the test set, for every run's chosen model after the choices are frozen. They choose nothing, so
    naming one after a seed was tested leaves the sweep's definition (:func:`~.protocol.sweep_digest`) as it was."""
    baselines: list[str] = Field(default_factory=list)
    """Untrained methods (:data:`BASELINES`) evaluated once with the recipe's base model and rollout limits on the
    test set and every transfer set, as rows beside the arms; like :attr:`transfer`, outside the definition."""

    @model_validator(mode="after")
    def _arms_are_consistent(self) -> SweepSpec:
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arm names must be distinct (got {names})")
        for k, arm in enumerate(self.arms):
            if arm.start is not None and arm.start not in names[:k]:
                raise ValueError(f"arm {arm.name} starts from {arm.start!r}, which is not an arm before it")
            if arm.stage is Stage.SFT and (arm.start is not None or arm.algorithm is not None):
                raise ValueError(f"arm {arm.name} runs SFT alone: it takes no start model and no algorithm")
            if arm.borrow is not None and (arm.stage is not Stage.RL or arm.start is None):
                raise ValueError(
                    f"arm {arm.name} is borrowed: it must be an RL arm with a start arm (the model both "
                    "sweeps' runs started from is how its runs are checked to be the same)"
                )
            lender = next((a for a in self.arms[:k] if a.name == arm.start and a.borrow is not None), None)
            if lender is not None:
                raise ValueError(
                    f"arm {arm.name} starts from the borrowed arm {lender.name}, whose weights stayed with the sweep "
                    "that trained it"
                )
        if self.test is not None and self.test.key() == self.dev.key():
            raise ValueError("the test set must differ from the dev set (choices are made on dev)")
        if (self.transfer or self.baselines) and self.test is None:
            raise ValueError("transfer sets and baselines are evaluated beside the test set: name a test set")
        bad = [n for n in self.transfer if not n.replace("_", "").replace("-", "").isalnum() or n == "test"]
        if bad:
            raise ValueError(f"transfer set names must be folder names other than 'test' (got {bad})")
        unknown = sorted(set(self.baselines) - set(BASELINES))
        if unknown or len(set(self.baselines)) != len(self.baselines):
            raise ValueError(f"baselines are distinct names among {list(BASELINES)} (got {self.baselines})")
        return self


def find_sweep(name: str | Path) -> Path:
    """A sweep file: ``name`` when that file exists, else the packaged sweep of that name.

    Raises:
        FileNotFoundError: Neither exists; the message lists the packaged names.
    """
    given = Path(name)
    if given.is_file():
        return given
    packaged = PACKAGED_SWEEPS / f"{given.stem}.yaml"
    if given.parent == Path(".") and given.suffix in ("", ".yaml") and packaged.is_file():
        return packaged
    names = ", ".join(sorted(p.stem for p in PACKAGED_SWEEPS.glob("*.yaml")))
    raise FileNotFoundError(f"no sweep file {str(name)!r} (and no packaged sweep of that name: {names})")


def load_sweep(name: str | Path) -> SweepSpec:
    """Read a sweep (a YAML file, or a packaged sweep by name).

    Raises:
        FileNotFoundError: No such sweep.
        ValueError: Not a valid sweep (one line naming what is wrong, via the caller's ``one_line``).
    """
    path = find_sweep(name)
    data = load_yaml(path.read_text(encoding="utf-8"), str(path))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a sweep must be a mapping (got {type(data).__name__})")
    return SweepSpec.model_validate(data)

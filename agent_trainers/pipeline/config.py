"""The ``agent-r1 train`` configuration: typed sections read from YAML or TOML (pydantic).

Example (``configs/tiny.yaml``, abridged)::

    algorithm: grpo            # grpo | rloo | reinforce_pp | reinforce_pp_baseline | gigpo | ppo | rft
    device: auto               # auto (a GPU when present) | cpu | cuda
    report_to: none            # none | tensorboard | wandb
    model: {name: tiny-random} # smollm2 | tiny-random | a checkpoint folder | a Hugging Face id
    env: {id: AgentR1/HotpotQA-v0, train_kwargs: {split: train}, eval_kwargs: {split: test}}
    rollout: {max_turns: 2, max_new_tokens_per_turn: 8, max_total_tokens: 1536}
    sft: {enabled: true, episodes: 4}
    rl: {steps: 2, num_generations: 2, prompts_per_step: 1}   # what every RL trainer reads
    grpo: {advantage: turn}    # what the chosen algorithm alone reads (ppo: {critic: value_head, lam: 1.0})
    eval: {tasks: 1, every: 0}

Every field is typed and documented; unknown keys, wrong types and broken
cross-field rules are errors with one-line messages (see
:func:`agent_trainers.errors.one_line`), never silent defaults. ``rollout`` is
:class:`agent_trainers.rollout.RolloutConfig` itself, ``rl`` is
:class:`agent_trainers.algorithms.RLConfig` and the algorithm's section is its
settings class (:data:`ALGORITHM_SECTIONS`): the settings types of the layers
below, which the trainers take as they are. A setting the chosen algorithm does not
read has no place to go: ``grpo.scale_rewards`` under ``algorithm: rloo`` is a
section of another algorithm, ``rloo.scale_rewards`` an unknown key. A config
whose ``--set algorithm=...`` changes the algorithm carries the settings the two
share over to the new section (:meth:`TrainConfig.with_algorithm`).
"""

from __future__ import annotations

import copy
import difflib
import os
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agent_trainers.algorithms.ppo.config import PPOConfig, check_ppo_settings
from agent_trainers.algorithms.shared.names import Algorithm, VLLMMode
from agent_trainers.algorithms.shared.sections import (
    ESTIMATOR_SECTIONS,
    GiGPOSettings,
    GRPOSettings,
    ReinforcePPBaselineSettings,
    ReinforcePPSettings,
    RFTSettings,
    RLOOSettings,
    TRLSettings,
    carried_over,
)
from agent_trainers.algorithms.shared.settings import MOVED_RL_KEYS, ReportTo, RLConfig, check_logger, moved_key_error
from agent_trainers.errors import describe_error
from agent_trainers.pipeline.config_files import find_config, parse_config_text, read_config_text
from agent_trainers.pipeline.env_settings import (
    TaskSplit,
    check_demonstrators,
    check_env_settings,
    default_kwargs,
    split_tasks,
)
from agent_trainers.pipeline.processes import is_main_process
from agent_trainers.policies.device import Device, bf16_enabled, check_device
from agent_trainers.policies.threads import Threads
from agent_trainers.rollout.config import MAX_TOKENS, RolloutConfig

__all__ = [
    "ALGORITHM_SECTIONS",
    "RESUME_MAY_CHANGE",
    "EnvConfig",
    "EvalConfig",
    "ModelConfig",
    "SFTStageConfig",
    "TrainConfig",
    "config_from_dict",
    "dotted_settings",
    "load_config",
    "run_settings_of",
    "set_dotted",
    "task_split",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True, allow_inf_nan=False)


ALGORITHM_SECTIONS: dict[Algorithm, type[BaseModel]] = {**ESTIMATOR_SECTIONS, Algorithm.PPO: PPOConfig}
"""Each algorithm's own section (its key in a config is the algorithm's name): the estimators' from
:mod:`~agent_trainers.algorithms.shared.sections`, PPO's from its room."""


class ModelConfig(_Section):
    """The policy model."""

    name: str = "smollm2"
    """``smollm2``, ``tiny-random``, a checkpoint folder or a Hugging Face id in the local cache."""


class EnvConfig(_Section):
    """The environment and its task splits."""

    id: str = "AgentR1/HotpotQA-v0"
    """A registered environment id (see ``agent-r1 envs``), or ``module:Namespace/Name-vN`` for your own: the
    module (importable, or in the working directory) registers it (see ``docs/custom_env.md``)."""
    train_kwargs: dict[str, Any] = Field(default_factory=dict)
    """``gymnasium.make`` kwargs of the training env; left out: ``{split: train}`` if the env takes ``split``
    (the QA envs), else ``{}``."""
    eval_kwargs: dict[str, Any] = Field(default_factory=dict)
    """``gymnasium.make`` kwargs of the held-aside evaluation env; left out: ``{split: test}`` if the env takes
    ``split``, else ``{}``."""
    train_tasks: int | None = Field(default=None, ge=1)
    """Use the first N training tasks (None: all). When ``train_kwargs == eval_kwargs`` (one task list, e.g. an env
    without splits), the evaluation's tasks are not training tasks: training takes the first N of the others."""

    @model_validator(mode="before")
    @classmethod
    def _split_defaults(cls, data: Any) -> Any:
        """Fill a left-out ``train_kwargs`` / ``eval_kwargs`` with the split the env takes, if it takes one."""
        if not isinstance(data, dict) or ("train_kwargs" in data and "eval_kwargs" in data):
            return data
        env_id = data.get("id", cls.model_fields["id"].default)
        if not isinstance(env_id, str):
            return data  # the field's own validation names it
        missing = {k: default_kwargs(env_id, k) for k in ("train_kwargs", "eval_kwargs") if k not in data}
        return {**data, **missing}


class SFTStageConfig(_Section):
    """Cold-start SFT on oracle trajectories."""

    enabled: bool = True
    """Run this stage."""
    episodes: int = Field(default=64, ge=1, le=1_000_000)
    """Oracle episodes to generate (from the first training tasks; at most 1,000,000)."""
    flawed_share: float = Field(default=0.0, ge=0, le=1)
    """Share of those episodes played by the env's flawed demonstrator (``flawed_oracle_action()``, e.g.
    Calculator-v0's hasty one, which answers one calculation early): demonstrations with a systematic flaw,
    as from a weaker model, which cloning copies and RL on the outcome can correct."""
    epochs: float = Field(default=2.0, gt=0, le=1000)
    """Passes over the episodes (at most 1,000)."""
    learning_rate: float = Field(default=5e-5, gt=0)
    """AdamW learning rate."""
    batch_size: int = Field(default=4, ge=1, le=4096)
    """Episodes per optimizer step (at most 4,096)."""
    max_length: int = Field(default=2048, ge=1, le=MAX_TOKENS)
    """Longer episodes are truncated (tokens; at most 1,048,576)."""
    gradient_checkpointing: bool = True
    """Recompute activations in the backward pass (TRL's SFT default): less memory, one more forward of compute, the
    same trained weights. On a CPU it cost no measurable time for SmolLM2-135M and saved a quarter of the peak
    memory (``benchmarks/sft.py``); ``false`` where memory is plentiful and the forward is dear (a GPU). The RL stage
    sets its own (``<algorithm>.gradient_checkpointing``)."""


class EvalConfig(_Section):
    """Evaluation on a fixed held-aside sample of the eval split."""

    tasks: int = Field(default=16, ge=1, le=1_000_000)
    """Number of eval tasks (the first N of the eval split, from ``first_task`` on; at most 1,000,000). When the
    evaluation env is the training env (``env.eval_kwargs == env.train_kwargs``: one task list), training leaves
    these tasks out."""
    first_task: int = Field(default=0, ge=0)
    """Index of the first eval task (with one task list for both, the held-aside tasks start here)."""
    temperature: float = Field(default=0.0, ge=0)
    """Sampling temperature of evaluation rollouts (0: greedy)."""
    every: int = Field(default=4, ge=0)
    """Evaluate every N RL steps (0: only before and after)."""
    batch_size: int = Field(default=32, ge=1, le=4096)
    """Questions played and generated together (one ``generate`` call per turn for up to this many; at most 4,096).
    A CPU decodes 32 sequences a step in about the time of 8, so the 30 questions of the main job go at once."""
    before: bool = True
    """Evaluate the loaded model first; ``false`` skips it when it is already known (e.g. every RL run of a
    comparison starts from one SFT checkpoint, evaluated once)."""


class TrainConfig(_Section):
    """Everything ``agent-r1 train`` needs."""

    seed: int = 0
    """Seeds Python, NumPy, torch, the envs and the samplers."""
    threads: Threads = 1
    """torch CPU threads (0: torch's default; ``auto``: the cores idle at start, i.e. cores minus the
    1-minute load average, at least 1; at most 1,024). 1 by default: on a shared 2-core machine torch's default of 2
    threads oversubscribes the cores and made SmolLM2 decoding ~100x slower; on an idle 2-core machine
    2 threads run SmolLM2 1.8x faster (30-sequence decoding and a 2 x 600-token forward/backward)."""
    output_dir: str = "runs/agent-r1"
    """Metrics (JSONL), plots, checkpoints and the final model go here."""
    algorithm: Algorithm = Algorithm.GRPO
    """The RL algorithm: ``grpo``, ``rloo``, ``reinforce_pp``, ``reinforce_pp_baseline``, ``gigpo``, ``ppo``, or
    ``rft`` (rejection-sampling fine-tuning, the non-RL baseline); what it alone reads goes in the section of that
    name (e.g. ``grpo:``)."""
    device: Device = Device.AUTO
    """``auto`` (a CUDA GPU when present, else the CPU), ``cpu`` or ``cuda``."""
    bf16: bool | None = None
    """bf16 autocast in training; ``null`` turns it on where the device supports it (CUDA with bf16)."""
    report_to: ReportTo = ReportTo.NONE
    """Where training curves go besides ``metrics.jsonl``: ``none``, ``tensorboard`` or ``wandb``."""
    verbose: bool = False
    """Also print what a run hides by default: the trainers' dict of every logged value at each SFT and RL step
    (``metrics.jsonl`` and the one-line step summary hold the figures either way) and the messages known to be
    harmless (:data:`~agent_trainers.algorithms.shared.console.HARMLESS`). ``agent-r1 train -v`` sets it."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy model."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    """Environment and splits."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """How episodes are played, in training and evaluation (evaluation overrides the temperature)."""
    sft: SFTStageConfig = Field(default_factory=SFTStageConfig)
    """Cold-start SFT stage."""
    rl: RLConfig = Field(default_factory=RLConfig)
    """RL stage: what every RL trainer reads."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """Evaluation."""
    grpo: GRPOSettings | None = None
    """``grpo``'s own settings (present exactly when ``algorithm: grpo``)."""
    rloo: RLOOSettings | None = None
    """``rloo``'s own settings."""
    reinforce_pp: ReinforcePPSettings | None = None
    """``reinforce_pp``'s own settings."""
    reinforce_pp_baseline: ReinforcePPBaselineSettings | None = None
    """``reinforce_pp_baseline``'s own settings."""
    gigpo: GiGPOSettings | None = None
    """``gigpo``'s own settings."""
    rft: RFTSettings | None = None
    """``rft``'s own settings (rejection-sampling fine-tuning, the non-RL baseline)."""
    ppo: PPOConfig | None = None
    """``ppo``'s own settings (its hyperparameters)."""

    @model_validator(mode="before")
    @classmethod
    def _one_algorithm_section(cls, data: Any) -> Any:
        """Name a moved ``rl:`` key's new place, refuse another algorithm's section, fill the chosen one's."""
        if not isinstance(data, dict):
            return data
        algorithm = data.get("algorithm", cls.model_fields["algorithm"].default)
        name = str(algorithm.value if isinstance(algorithm, Algorithm) else algorithm)
        rl = data.get("rl")
        for key in rl if isinstance(rl, dict) else ():
            if key in MOVED_RL_KEYS:
                raise ValueError(moved_key_error(key, name))
        for other in ALGORITHM_SECTIONS:
            if other.value != name and data.get(other.value) is not None:
                raise ValueError(
                    f"{other.value}: the section of algorithm {other.value}, but the algorithm is {name} (set "
                    f"algorithm: {other.value}, or name the section {name}:)"
                )
        if name in {a.value for a in ALGORITHM_SECTIONS} and data.get(name) is None:
            data = {**data, name: {}}
        return data

    @model_validator(mode="after")
    def _cross_checks(self) -> TrainConfig:
        rl = self.rl
        need = getattr(type(self.algorithm_settings), "min_group_size", 1)
        if rl.enabled and rl.num_generations < need:
            raise ValueError(f"rl.num_generations must be >= {need} for {self.algorithm} (got {rl.num_generations})")
        if self.eval.every and rl.enabled and rl.steps % self.eval.every:
            raise ValueError(f"rl.steps must be divisible by eval.every (got {rl.steps} and {self.eval.every})")
        if self.sft.enabled and self.sft.episodes < self.sft.batch_size:
            raise ValueError(
                f"sft.episodes must be >= sft.batch_size (got {self.sft.episodes} and {self.sft.batch_size})"
            )
        if not (self.sft.enabled or rl.enabled):
            raise ValueError("enable at least one stage (sft.enabled or rl.enabled)")
        if self.bf16:
            bf16_enabled(self.device, True)  # refused on a CPU without native bf16
        if rl.enabled:
            self._rl_checks()
        return self

    def _rl_checks(self) -> None:
        """The rules across ``rl:``, the algorithm's section and the rollout settings."""
        rl, section = self.rl, self.algorithm_settings
        if isinstance(section, PPOConfig):
            check_ppo_settings(rl, section, self.rollout)
            if self.report_to is ReportTo.WANDB:
                raise ValueError("report_to: ppo writes its curves to metrics.jsonl and TensorBoard, not wandb")
            return
        assert isinstance(section, TRLSettings)
        algorithm = self.algorithm.value
        if rl.episodes_per_step % section.micro_batch:
            raise ValueError(
                f"{algorithm}.micro_batch must divide rl.num_generations * rl.prompts_per_step (got "
                f"{section.micro_batch} and {rl.episodes_per_step})"
            )
        if rl.async_rollouts.enabled and section.vllm is not VLLMMode.NONE:
            raise ValueError(
                f"rl.async_rollouts generates with transformers in a worker process; with {algorithm}.vllm the "
                "generation is vLLM's and overlapping it with training is not implemented here (set one of them off)"
            )

    @property
    def algorithm_settings(self) -> BaseModel:
        """The chosen algorithm's own section (:data:`ALGORITHM_SECTIONS`)."""
        section = getattr(self, self.algorithm.value)
        assert section is not None  # filled by the validator
        return section

    def with_algorithm(self, algorithm: Algorithm | str) -> tuple[TrainConfig, list[str]]:
        """This config under another algorithm: the settings the two sections share (both inherit them from one
        settings class) carry over, the rest of the new section takes its defaults.

        Returns:
            The new config and, as ``"<section>.<key>"``, the old section's settings set away from their defaults
            that the new algorithm does not read (left behind).
        """
        new = Algorithm(algorithm)
        data = self.to_dict()
        old_section = data.pop(self.algorithm.value)
        old_cls, new_cls = ALGORITHM_SECTIONS[self.algorithm], ALGORITHM_SECTIONS[new]
        kept = carried_over(old_cls, new_cls)
        defaults = old_cls().model_dump(mode="json")
        dropped = [
            f"{self.algorithm.value}.{k}" for k, v in old_section.items() if k not in kept and v != defaults.get(k)
        ]
        data |= {"algorithm": new.value, new.value: {k: v for k, v in old_section.items() if k in kept}}
        return config_from_dict(data), dropped

    def to_dict(self) -> dict[str, Any]:
        """A plain JSON/YAML-ready dict (enums as strings), e.g. to save next to a run; only the chosen algorithm's
        section is in it."""
        unset = {a.value for a in ALGORITHM_SECTIONS if getattr(self, a.value) is None}
        return self.model_dump(mode="json", exclude=unset)

    def run_settings(self) -> dict[str, Any]:
        """:meth:`to_dict` less :data:`RESUME_MAY_CHANGE`: the settings a run's checkpoints belong to (a resume
        with other ones is refused, naming them)."""
        return run_settings_of(self.to_dict())


def run_settings_of(data: dict[str, Any]) -> dict[str, Any]:
    """A config dict (:meth:`TrainConfig.to_dict`, or a run's ``config.yaml``) less :data:`RESUME_MAY_CHANGE`."""
    out = copy.deepcopy(data)
    for dotted in RESUME_MAY_CHANGE:
        *parents, leaf = dotted.split(".")
        node: Any = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return out


RESUME_MAY_CHANGE = (
    "output_dir",
    "threads",
    "verbose",
    "report_to",
    "eval",
    "rl.steps",
    "rl.save_steps",
    "rl.older_checkpoints",
    "rl.max_env_errors",
    "rl.async_rollouts.generation_threads",
    "rl.async_rollouts.generation_timeout",
    "rollout.tool_workers",
    "rollout.env_actors",
)
"""Settings that a resumed run may change: where and how fast it runs, what it logs and evaluates, and how many
steps it takes (``rl.steps``: a finished run continues for more). Every other setting must be the checkpoint's."""


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """Build and validate a :class:`TrainConfig` from a nested dict.

    Raises:
        pydantic.ValidationError: (a ``ValueError``) naming every bad field.
        UnknownSettingError: (a ``ValueError``) a key that is no setting, with the closest setting's name when
            there is one (``rl.stepz: not a setting; did you mean rl.steps?``), and the other errors after it.
    """
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        unknown = [err["loc"] for err in exc.errors(include_url=False) if err.get("type") in _UNKNOWN_KEY]
        if not unknown:
            raise
        hints = [_unknown_setting(tuple(str(part) for part in loc)) for loc in unknown]
        raise UnknownSettingError("; ".join([*hints, *_other_errors(exc)])) from None


_UNKNOWN_KEY = frozenset({"extra_forbidden", "unexpected_keyword_argument"})
"""pydantic's error types for a key no field takes (models say the first, pydantic dataclasses the second)."""


class UnknownSettingError(ValueError):
    """A config key that is no setting, named with the closest setting."""


def _section_fields(path: tuple[str, ...]) -> list[str]:
    """The setting names of the config section at ``path`` (``()``: the top level); ``[]`` if it is not one."""
    node: Any = TrainConfig
    for part in path:
        fields = getattr(node, "model_fields", None) or getattr(node, "__pydantic_fields__", {})
        if part not in fields:
            return []
        node = _settings_type(fields[part].annotation)
    fields = getattr(node, "model_fields", None) or getattr(node, "__pydantic_fields__", {})
    return list(fields)


def _settings_type(annotation: Any) -> Any:
    """The settings class of a field's annotation (``X | None`` -> ``X``)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return next((a for a in typing.get_args(annotation) if a is not type(None)), annotation)
    return annotation


def _unknown_setting(loc: tuple[str, ...]) -> str:
    *section, key = loc
    names = _section_fields(tuple(section))
    dotted = ".".join(loc)
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    prefix = ".".join(section) + "." if section else ""
    if close:
        return f"{dotted}: not a setting; did you mean {prefix}{close[0]}?"
    where = f"{'.'.join(section)} settings" if section else "top-level settings"
    return f"{dotted}: not a setting (the {where}: {', '.join(names)})"


def _other_errors(exc: ValidationError) -> list[str]:
    return [describe_error(err) for err in exc.errors(include_url=False) if err.get("type") not in _UNKNOWN_KEY]


def preflight(config: TrainConfig) -> None:
    """What a run checks before it writes a file or loads a model, without importing transformers or TRL.

    The ``env:`` sections (each env built and closed once), the SFT stage's demonstrator (``oracle_action()``),
    the training and evaluation tasks (:func:`task_split`; a shared task list is said in one line), the device
    (torch is imported for ``device: cuda`` only, to ask whether a GPU is visible) and the logger (its package is
    looked up, not imported).

    Raises:
        ValueError: One line naming what is wrong.
    """
    env = config.env
    check_env_settings(env.id, {"train_kwargs": env.train_kwargs, "eval_kwargs": env.eval_kwargs})
    if config.sft.enabled:
        check_demonstrators(env.id, env.train_kwargs, flawed=config.sft.flawed_share > 0)
    split = task_split(config)
    check_device(config.device)
    check_logger(config.report_to)
    if config.rl.enabled and config.rl.async_rollouts.enabled:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError(
                "rl.async_rollouts runs one generation worker for one training process (not under "
                "accelerate launch with several processes)"
            )
    if split.shared and is_main_process():  # said once every check has passed
        print(f"[train] {split.describe()}", flush=True)


def task_split(config: TrainConfig) -> TaskSplit:
    """The run's training and evaluation tasks (:func:`~agent_trainers.pipeline.env_settings.split_tasks`): with
    one task list for both (``env.train_kwargs == env.eval_kwargs``), training leaves the evaluation's tasks out.

    Raises:
        ValueError: The evaluation's tasks leave none to train on.
    """
    env, evaluation = config.env, config.eval
    return split_tasks(
        env.id,
        env.train_kwargs,
        env.eval_kwargs,
        train_tasks=env.train_tasks,
        eval_first=evaluation.first_task,
        eval_tasks=evaluation.tasks,
    )


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``data[a][b]... = value`` for the dotted key ``"a.b..."`` (an ``--set`` override), making sections."""
    node = data
    *parents, leaf = dotted.split(".")
    for p in parents:
        child = node.setdefault(p, {})
        if not isinstance(child, dict):
            raise ValueError(f"--set {dotted}: {p} is not a section")
        node = child
    node[leaf] = value


def dotted_settings(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The inverse of :func:`set_dotted`: every setting of the nested ``data`` under its dotted key
    (``{"rl": {"steps": 4}}`` -> ``{"rl.steps": 4}``); an empty section stays one value."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out |= dotted_settings(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Read a YAML (``.yaml``/``.yml``) or TOML (``.toml``) config file.

    Args:
        path: The file, or the name of a packaged config (``tiny``: see
            :func:`~agent_trainers.pipeline.config_files.find_config`).
        overrides: Dotted keys to set after reading, e.g. ``{"rl.steps": 2}``.

    Returns:
        The validated config.

    Raises:
        ValueError: On an unknown suffix, unknown keys, wrong types or a violated cross-field rule.
        FileNotFoundError: The file does not exist and no packaged config has that name.
    """
    path = find_config(path)
    data = parse_config_text(path, read_config_text(path))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the config must be a mapping (got {type(data).__name__})")
    before = str(data.get("algorithm", TrainConfig.model_fields["algorithm"].default))
    for dotted, value in (overrides or {}).items():
        set_dotted(data, dotted, value)
    if "algorithm" in (overrides or {}):
        _carry_section(data, before, str(data["algorithm"]))
    return config_from_dict(data)


def _carry_section(data: dict[str, Any], old: str, new: str) -> None:
    """``--set algorithm=NEW`` on a config written for ``old``: its section's settings that ``new`` reads carry
    over to ``new``'s section (under the ones set there explicitly); the rest are left behind, and those set away
    from their defaults are named in one line (:meth:`TrainConfig.with_algorithm` does the same on a validated
    config)."""
    known = {a.value for a in ALGORITHM_SECTIONS}
    if old == new or old not in known or new not in known or not isinstance(data.get(old), dict):
        return
    section = data.pop(old)
    old_type = ALGORITHM_SECTIONS[Algorithm(old)]
    kept = carried_over(old_type, ALGORITHM_SECTIONS[Algorithm(new)])
    given = data.get(new)
    explicit: dict[str, Any] = given if isinstance(given, dict) else {}
    data[new] = {**{k: v for k, v in section.items() if k in kept}, **explicit}
    defaults = old_type().model_dump(mode="json")
    left = [f"{old}.{k}" for k, v in section.items() if k not in kept and v != defaults.get(k)]
    if left:
        print(f"[config] algorithm {new} does not read {', '.join(left)}: left behind", file=sys.stderr, flush=True)

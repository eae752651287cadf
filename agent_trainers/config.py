"""The ``agent-r1 train`` configuration: nested dataclasses read from YAML or TOML.

Example ``configs/demo.yaml``::

    seed: 0
    output_dir: runs/demo
    model: {name: smollm2}
    env: {id: AgentR1/HotpotQA-v0, train_kwargs: {split: train}, eval_kwargs: {split: test}}
    sft: {enabled: true, episodes: 64, epochs: 2}
    grpo: {enabled: true, steps: 8, num_generations: 4, prompts_per_step: 2, advantage: turn}
    eval: {tasks: 16}

Unknown keys are errors (with the known ones listed), so a typo never
silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from agent_trainers.advantages import AdvantageMode

__all__ = [
    "EnvConfig",
    "EvalConfig",
    "GRPOStageConfig",
    "LossType",
    "ModelConfig",
    "ModelName",
    "SFTStageConfig",
    "TrainConfig",
    "load_config",
]


class ModelName(StrEnum):
    """Which policy model to load."""

    SMOLLM2 = "smollm2"
    """SmolLM2-135M-Instruct from the offline GGUF file."""
    TINY_RANDOM = "tiny-random"
    """A 2-layer random Llama (tests, smoke runs)."""


class LossType(StrEnum):
    """TRL GRPO loss aggregations we expose."""

    GRPO = "grpo"
    DAPO = "dapo"
    DR_GRPO = "dr_grpo"
    BNPO = "bnpo"


@dataclass
class ModelConfig:
    """The policy model."""

    name: ModelName = ModelName.SMOLLM2
    """``smollm2`` or ``tiny-random``."""
    path: str | None = None
    """A local Hugging Face checkpoint directory to load instead (overrides ``name``)."""


@dataclass
class EnvConfig:
    """The environment and its task splits."""

    id: str = "AgentR1/HotpotQA-v0"
    """A registered environment id (see ``agent-r1 envs``)."""
    train_kwargs: dict[str, Any] = field(default_factory=lambda: {"split": "train"})
    """``gymnasium.make`` kwargs of the training env."""
    eval_kwargs: dict[str, Any] = field(default_factory=lambda: {"split": "test"})
    """``gymnasium.make`` kwargs of the held-aside evaluation env."""
    train_tasks: int | None = None
    """Use the first N training tasks (None: all)."""


@dataclass
class SFTStageConfig:
    """Cold-start SFT on oracle trajectories."""

    enabled: bool = True
    """Run this stage."""
    episodes: int = 64
    """Oracle episodes to generate (from the first training tasks)."""
    epochs: float = 2.0
    """Passes over the episodes."""
    learning_rate: float = 5e-5
    """AdamW learning rate."""
    batch_size: int = 4
    """Episodes per optimizer step."""
    max_length: int = 2048
    """Longer episodes are truncated (tokens)."""


@dataclass
class GRPOStageConfig:
    """GRPO through TRL, rollouts by our engine."""

    enabled: bool = True
    """Run this stage."""
    steps: int = 8
    """Optimizer steps (one generation batch each)."""
    num_generations: int = 4
    """G: rollouts per task (the group)."""
    prompts_per_step: int = 2
    """Tasks per step; a step plays ``prompts_per_step * num_generations`` episodes."""
    learning_rate: float = 1e-5
    """AdamW learning rate."""
    beta: float = 0.0
    """KL coefficient to the reference model (0: no reference model, as in DAPO/Dr. GRPO)."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts."""
    loss_type: LossType = LossType.DAPO
    """TRL's loss aggregation."""
    advantage: AdvantageMode = AdvantageMode.TURN
    """``outcome`` (TRL's GRPO) or ``turn`` (per-turn returns-to-go from process rewards)."""
    gamma: float = 1.0
    """Discount of per-turn returns-to-go (``advantage: turn``)."""
    max_turns: int | None = None
    """Turn limit per episode (None: the env's)."""
    max_new_tokens_per_turn: int = 96
    """Tokens the model may write per turn."""
    max_total_tokens: int = 1536
    """Token budget per episode (prompt + completion)."""
    save_steps: int = 4
    """Checkpoint every N steps (and at the end)."""


@dataclass
class EvalConfig:
    """Evaluation on a fixed held-aside sample of the eval split."""

    tasks: int = 16
    """Number of eval tasks (the first N of the eval split)."""
    temperature: float = 0.0
    """0: greedy decoding."""
    every: int = 4
    """Evaluate every N GRPO steps (0: only before and after)."""


@dataclass
class TrainConfig:
    """Everything ``agent-r1 train`` needs."""

    seed: int = 0
    """Seeds Python, NumPy, torch, the envs and the samplers."""
    threads: int = 1
    """torch CPU threads (0: torch's default). 1 by default: on a shared 2-core machine torch's
    default of 2 threads oversubscribes the cores and made SmolLM2 decoding ~100x slower."""
    output_dir: str = "runs/agent-r1"
    """Metrics (JSONL), plots, checkpoints and the final model go here."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy model."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """Environment and splits."""
    sft: SFTStageConfig = field(default_factory=SFTStageConfig)
    """Cold-start SFT stage."""
    grpo: GRPOStageConfig = field(default_factory=GRPOStageConfig)
    """GRPO stage."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation."""

    def __post_init__(self) -> None:
        g = self.grpo
        if g.enabled and g.num_generations < 2:
            raise ValueError(
                f"grpo.num_generations must be >= 2 for group-relative advantages (got {g.num_generations})"
            )
        for name, value in [("grpo.steps", g.steps), ("grpo.prompts_per_step", g.prompts_per_step)]:
            if value < 1:
                raise ValueError(f"{name} must be >= 1 (got {value})")
        if g.max_new_tokens_per_turn >= g.max_total_tokens:
            raise ValueError(
                f"grpo.max_total_tokens must exceed grpo.max_new_tokens_per_turn "
                f"(got {g.max_total_tokens} and {g.max_new_tokens_per_turn})"
            )
        if not 0.0 < g.gamma <= 1.0:
            raise ValueError(f"grpo.gamma must be in (0, 1] (got {g.gamma})")
        if self.sft.enabled and self.sft.episodes < self.sft.batch_size:
            raise ValueError(
                f"sft.episodes must be >= sft.batch_size (got {self.sft.episodes} and {self.sft.batch_size})"
            )
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0 (got {self.threads})")
        if self.eval.tasks < 1:
            raise ValueError(f"eval.tasks must be >= 1 (got {self.eval.tasks})")
        if self.eval.every and self.grpo.enabled and self.grpo.steps % self.eval.every:
            raise ValueError(
                f"grpo.steps must be divisible by eval.every (got {self.grpo.steps} and {self.eval.every})"
            )
        if not (self.sft.enabled or self.grpo.enabled):
            raise ValueError("enable at least one stage (sft.enabled or grpo.enabled)")

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (enums as strings), e.g. to save next to a run."""
        return _plain(dataclasses.asdict(self))


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x.value if isinstance(x, StrEnum) else x


def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{where or 'config'} must be a mapping (got {type(data).__name__})")
    hints = get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in {where or 'config'}; known: {sorted(known)}")
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        hint = hints[key]
        path = f"{where}.{key}" if where else key
        if dataclasses.is_dataclass(hint):
            kwargs[key] = _build(hint, value, path)
        elif isinstance(hint, type) and issubclass(hint, StrEnum):
            try:
                kwargs[key] = hint(value)
            except ValueError:
                raise ValueError(f"{path} must be one of {[m.value for m in hint]} (got {value!r})") from None
        else:
            kwargs[key] = value
    return cls(**kwargs)


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """Build and validate a :class:`TrainConfig` from a nested dict."""
    return _build(TrainConfig, data, "")


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Read a YAML (``.yaml``/``.yml``) or TOML (``.toml``) config file.

    Args:
        path: The file.
        overrides: Dotted keys to set after reading, e.g. ``{"grpo.steps": 2}``.

    Returns:
        The validated config.

    Raises:
        ValueError: On an unknown suffix, unknown keys, bad enum values or a
            violated cross-field rule.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        data = yaml.safe_load(text) or {}
    elif path.suffix == ".toml":
        data = tomllib.loads(text)
    else:
        raise ValueError(f"config file must end in .yaml, .yml or .toml (got {path.name!r})")
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return config_from_dict(data)

"""The ``agent-r1 train`` configuration: typed sections read from YAML or TOML (pydantic).

Example (``configs/tiny.yaml``, abridged)::

    algorithm: grpo            # grpo | rloo | reinforce_pp | reinforce_pp_baseline | ppo
    device: auto               # auto (a GPU when present) | cpu | cuda
    report_to: none            # none | tensorboard | wandb
    model: {name: tiny-random} # smollm2 | tiny-random | a checkpoint folder | a Hugging Face id
    env: {id: AgentR1/HotpotQA-v0, train_kwargs: {split: train}, eval_kwargs: {split: test}}
    rollout: {max_turns: 2, max_new_tokens_per_turn: 8, max_total_tokens: 1536}
    sft: {enabled: true, episodes: 4}
    rl: {steps: 2, num_generations: 2, prompts_per_step: 1, advantage: turn}
    eval: {tasks: 1, every: 0}
    ppo: {critic: value_head, gamma: 1.0, lam: 1.0}   # read only when algorithm: ppo

Every field is typed and documented; unknown keys, wrong types and broken
cross-field rules are errors with one-line messages (see
:func:`agent_trainers.errors.one_line`), never silent defaults. ``rollout`` is
:class:`agent_trainers.rollout.RolloutConfig` itself: the one rollout settings
type of the library.
"""

from __future__ import annotations

import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_trainers.algorithms.ppo.config import PPOConfig
from agent_trainers.algorithms.shared.advantages import ESTIMATORS, AdvantageMode, Algorithm
from agent_trainers.algorithms.trl_adapter.trl_args import ReportTo
from agent_trainers.policies.loader import Device
from agent_trainers.rollout.config import RolloutConfig

__all__ = [
    "EnvConfig",
    "EvalConfig",
    "LossType",
    "ModelConfig",
    "RLConfig",
    "SFTStageConfig",
    "ScaleRewards",
    "TrainConfig",
    "VLLMMode",
    "config_from_dict",
    "load_config",
    "set_dotted",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True)


class LossType(StrEnum):
    """TRL's loss aggregations we expose."""

    GRPO = "grpo"
    DAPO = "dapo"
    DR_GRPO = "dr_grpo"
    BNPO = "bnpo"


class ScaleRewards(StrEnum):
    """How ``grpo`` scales centred rewards (TRL's ``scale_rewards``)."""

    GROUP = "group"
    BATCH = "batch"
    NONE = "none"


class VLLMMode(StrEnum):
    """Where RL rollouts are generated (TRL's ``use_vllm`` / ``vllm_mode``; vLLM is experimental here)."""

    NONE = "none"
    """With the trained model itself (transformers ``generate``)."""
    COLOCATE = "colocate"
    """With a vLLM engine inside each training process (extra ``vllm``, GPUs)."""
    SERVER = "server"
    """With a ``trl vllm-serve`` server at ``rl.vllm_server_url`` (its own GPUs)."""


class ModelConfig(_Section):
    """The policy model."""

    name: str = "smollm2"
    """``smollm2``, ``tiny-random``, a checkpoint folder or a Hugging Face id in the local cache."""


class EnvConfig(_Section):
    """The environment and its task splits."""

    id: str = "AgentR1/HotpotQA-v0"
    """A registered environment id (see ``agent-r1 envs``)."""
    train_kwargs: dict[str, Any] = Field(default_factory=lambda: {"split": "train"})
    """``gymnasium.make`` kwargs of the training env."""
    eval_kwargs: dict[str, Any] = Field(default_factory=lambda: {"split": "test"})
    """``gymnasium.make`` kwargs of the held-aside evaluation env."""
    train_tasks: int | None = Field(default=None, ge=1)
    """Use the first N training tasks (None: all)."""


class SFTStageConfig(_Section):
    """Cold-start SFT on oracle trajectories."""

    enabled: bool = True
    """Run this stage."""
    episodes: int = Field(default=64, ge=1)
    """Oracle episodes to generate (from the first training tasks)."""
    epochs: float = Field(default=2.0, gt=0)
    """Passes over the episodes."""
    learning_rate: float = Field(default=5e-5, gt=0)
    """AdamW learning rate."""
    batch_size: int = Field(default=4, ge=1)
    """Episodes per optimizer step."""
    max_length: int = Field(default=2048, ge=1)
    """Longer episodes are truncated (tokens)."""


class RLConfig(_Section):
    """The RL stage; ``algorithm`` (top level) chooses how advantages are made."""

    enabled: bool = True
    """Run this stage."""
    steps: int = Field(default=8, ge=1)
    """Optimizer steps (one generation batch each)."""
    num_generations: int = Field(default=4, ge=2)
    """G: rollouts per task (the group; TRL's GRPOTrainer needs at least 2)."""
    prompts_per_step: int = Field(default=2, ge=1)
    """Tasks per step; a step plays ``prompts_per_step * num_generations`` episodes."""
    micro_batch: int = Field(default=1, ge=1)
    """Rollouts per forward/backward pass (gradients accumulate over a step's passes); must divide
    ``prompts_per_step * num_generations``. ``num_generations`` puts a whole group in one pass, so the
    task's prompt is run once for all its rollouts (more memory, less compute). ``ppo`` has ``ppo.micro_batch_size``."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: each layer keeps only its input (less memory, one
    more forward of compute). The shared prompt of ``micro_batch`` stays shared. Set for the RL stage
    whatever the SFT stage left (TRL's SFT turns it on)."""
    learning_rate: float = Field(default=1e-5, gt=0)
    """AdamW learning rate."""
    beta: float = Field(default=0.0, ge=0)
    """KL coefficient: for ``grpo`` TRL's KL term in the loss; for ``rloo``/``reinforce_pp``/
    ``reinforce_pp_baseline`` a token-level KL penalty in the reward (0: no reference model)."""
    loss_type: LossType = LossType.DAPO
    """TRL's loss aggregation."""
    advantage: AdvantageMode = AdvantageMode.TURN
    """``outcome`` (one value per rollout) or ``turn`` (per-turn returns-to-go from process rewards)."""
    gamma: float = Field(default=1.0, gt=0, le=1)
    """Per-turn discount of returns."""
    scale_rewards: ScaleRewards = ScaleRewards.GROUP
    """``grpo`` only: divide by the group's std (``group``), the batch's (``batch``) or not (``none``)."""
    loss_mask: bool = True
    """Keep env tokens out of the policy loss; ``false`` puts them in (the paper's ablation)."""
    advantage_mask: bool = True
    """``ppo`` only: GAE over agent tokens, bootstrapping across env tokens; ``false`` runs it over every
    token (the paper's ablation). The other algorithms have no per-token value to bootstrap."""
    save_steps: int = Field(default=4, ge=1)
    """Checkpoint every N steps (and at the end)."""
    vllm: VLLMMode = VLLMMode.NONE
    """Generate RL rollouts with TRL's vLLM engine: ``none``, ``colocate`` or ``server`` (experimental, GPU)."""
    vllm_server_url: str = "http://127.0.0.1:8000"
    """The ``trl vllm-serve`` server (``vllm: server``)."""


class EvalConfig(_Section):
    """Evaluation on a fixed held-aside sample of the eval split."""

    tasks: int = Field(default=16, ge=1)
    """Number of eval tasks (the first N of the eval split)."""
    temperature: float = Field(default=0.0, ge=0)
    """Sampling temperature of evaluation rollouts (0: greedy)."""
    every: int = Field(default=4, ge=0)
    """Evaluate every N RL steps (0: only before and after)."""
    batch_size: int = Field(default=32, ge=1)
    """Questions played and generated together (one ``generate`` call per turn for up to this many). A CPU
    decodes 32 sequences a step in about the time of 8, so the 30 questions of the main job go at once."""
    before: bool = True
    """Evaluate the loaded model first; ``false`` skips it when it is already known (e.g. every RL run of a
    comparison starts from one SFT checkpoint, evaluated once)."""


class TrainConfig(_Section):
    """Everything ``agent-r1 train`` needs."""

    seed: int = 0
    """Seeds Python, NumPy, torch, the envs and the samplers."""
    threads: Annotated[int, Field(ge=0)] | Literal["auto"] = 1
    """torch CPU threads (0: torch's default; ``auto``: the cores idle at start, i.e. cores minus the
    1-minute load average, at least 1). 1 by default: on a shared 2-core machine torch's default of 2
    threads oversubscribes the cores and made SmolLM2 decoding ~100x slower; on an idle 2-core machine
    2 threads run SmolLM2 1.8x faster (30-sequence decoding and a 2 x 600-token forward/backward)."""
    output_dir: str = "runs/agent-r1"
    """Metrics (JSONL), plots, checkpoints and the final model go here."""
    algorithm: Algorithm = Algorithm.GRPO
    """The RL algorithm: ``grpo``, ``rloo``, ``reinforce_pp``, ``reinforce_pp_baseline`` or ``ppo``."""
    device: Device = Device.AUTO
    """``auto`` (a CUDA GPU when present, else the CPU), ``cpu`` or ``cuda``."""
    bf16: bool | None = None
    """bf16 autocast in training; ``null`` turns it on where the device supports it (CUDA with bf16)."""
    report_to: ReportTo = ReportTo.NONE
    """Where training curves go besides ``metrics.jsonl``: ``none``, ``tensorboard`` or ``wandb``."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy model."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    """Environment and splits."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """How episodes are played, in training and evaluation (evaluation overrides the temperature)."""
    sft: SFTStageConfig = Field(default_factory=SFTStageConfig)
    """Cold-start SFT stage."""
    rl: RLConfig = Field(default_factory=RLConfig)
    """RL stage."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """Evaluation."""
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    """PPO's hyperparameters (read when ``algorithm: ppo``)."""

    @model_validator(mode="before")
    @classmethod
    def _renamed_sections(cls, data: Any) -> Any:
        if isinstance(data, dict) and "grpo" in data:
            raise ValueError(
                "the `grpo:` section is now `rl:` (the top-level `algorithm:` chooses grpo, rloo, ...); "
                "its temperature and token limits moved to `rollout:`"
            )
        return data

    @model_validator(mode="after")
    def _cross_checks(self) -> TrainConfig:
        rl = self.rl
        estimator = ESTIMATORS.get(str(self.algorithm))  # an algorithm with its own trainer may have none
        need = estimator.min_group_size if estimator else 1
        if rl.enabled and rl.num_generations < need:
            raise ValueError(f"rl.num_generations must be >= {need} for {self.algorithm} (got {rl.num_generations})")
        episodes = rl.num_generations * rl.prompts_per_step
        if rl.enabled and episodes % rl.micro_batch:
            raise ValueError(
                f"rl.micro_batch must divide rl.num_generations * rl.prompts_per_step (got {rl.micro_batch} "
                f"and {episodes})"
            )
        if self.eval.every and rl.enabled and rl.steps % self.eval.every:
            raise ValueError(f"rl.steps must be divisible by eval.every (got {rl.steps} and {self.eval.every})")
        if self.sft.enabled and self.sft.episodes < self.sft.batch_size:
            raise ValueError(
                f"sft.episodes must be >= sft.batch_size (got {self.sft.episodes} and {self.sft.batch_size})"
            )
        if not (self.sft.enabled or rl.enabled):
            raise ValueError("enable at least one stage (sft.enabled or rl.enabled)")
        if rl.enabled:
            self._ppo_checks()
        return self

    def _ppo_checks(self) -> None:
        rl, ppo = self.rl, self.algorithm is Algorithm.PPO
        if not rl.advantage_mask and not ppo:
            raise ValueError(f"rl.advantage_mask applies to ppo only (GAE); {self.algorithm} has no per-token values")
        if not ppo:
            return
        if rl.gamma != 1.0:
            raise ValueError(f"ppo discounts per agent token with ppo.gamma; leave rl.gamma at 1 (got {rl.gamma})")
        if not self.rollout.temperature > 0:
            raise ValueError("ppo scores log-probs at the sampling temperature: rollout.temperature must be > 0")
        episodes = rl.num_generations * rl.prompts_per_step
        if self.ppo.num_minibatches > episodes:
            raise ValueError(
                f"ppo.num_minibatches must be <= rl.num_generations * rl.prompts_per_step "
                f"(got {self.ppo.num_minibatches} and {episodes})"
            )

    def to_dict(self) -> dict[str, Any]:
        """A plain JSON/YAML-ready dict (enums as strings), e.g. to save next to a run."""
        return self.model_dump(mode="json")


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """Build and validate a :class:`TrainConfig` from a nested dict.

    Raises:
        pydantic.ValidationError: (a ``ValueError``) naming every bad field.
    """
    return TrainConfig.model_validate(data)


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


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Read a YAML (``.yaml``/``.yml``) or TOML (``.toml``) config file.

    Args:
        path: The file.
        overrides: Dotted keys to set after reading, e.g. ``{"rl.steps": 2}``.

    Returns:
        The validated config.

    Raises:
        ValueError: On an unknown suffix, unknown keys, wrong types or a violated cross-field rule.
        FileNotFoundError: The file does not exist.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        data = yaml.safe_load(text) or {}
    elif path.suffix == ".toml":
        data = tomllib.loads(text)
    else:
        raise ValueError(f"config file must end in .yaml, .yml or .toml (got {path.name!r})")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the config must be a mapping (got {type(data).__name__})")
    for dotted, value in (overrides or {}).items():
        set_dotted(data, dotted, value)
    return config_from_dict(data)

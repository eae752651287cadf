"""One config section per algorithm trained through TRL: what each advantage estimator and its trainer read.

``rl:`` (:class:`~agent_trainers.algorithms.shared.settings.RLConfig`) holds what every RL trainer reads; the
section named after the chosen ``algorithm`` holds what that algorithm alone reads, so a setting it does not read
is an unknown key ("did you mean ...?"), never a value silently ignored::

    algorithm: gigpo
    rl: {steps: 8, num_generations: 8, prompts_per_step: 2, learning_rate: 5.0e-6}
    gigpo: {advantage: turn, step_weight: 0.5, anchor: observation, micro_batch: 8}

The classes form one family: :class:`TRLSettings` (what TRL's ``GRPOTrainer`` reads for every algorithm on it),
:class:`EstimatorSettings` (what every policy-gradient estimator reads: the advantage mode and the discount),
:class:`GroupBaselineSettings` (estimators with a group baseline, for which a tied group carries no signal),
then one class per algorithm; :class:`RFTSettings` (rejection-sampling fine-tuning) reads no advantage. Each
class also says, as class attributes, whether its estimator takes the KL into the reward (``kl_in_reward``; else
``rl.beta`` is TRL's KL term in the loss) and the smallest group it is defined for. PPO's section is
:class:`~agent_trainers.algorithms.ppo.PPOConfig` (its own room).

Adding a setting to an estimator: one field here, read by its function in :mod:`.advantages`.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from agent_trainers.algorithms.shared.names import (
    AdvantageMode,
    Algorithm,
    AnchorState,
    LossType,
    ScaleRewards,
    VLLMMode,
)

__all__ = [
    "ESTIMATOR_SECTIONS",
    "EstimatorSettings",
    "GRPOSettings",
    "GiGPOSettings",
    "GroupBaselineSettings",
    "RFTSettings",
    "RLOOSettings",
    "ReinforcePPBaselineSettings",
    "ReinforcePPSettings",
    "TRLSettings",
    "carried_over",
]


class TRLSettings(BaseModel):
    """What every algorithm trained through TRL's ``GRPOTrainer`` reads of its trainer.

    A pydantic model (frozen): fields are checked when it is built, each field's docstring is its help text.
    """

    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, validate_default=True, frozen=True, allow_inf_nan=False
    )

    kl_in_reward: ClassVar[bool] = False
    """The estimator takes ``rl.beta``'s KL into the reward, per token (else it is TRL's KL term in the loss)."""
    min_group_size: ClassVar[int] = 1
    """The smallest ``rl.num_generations`` the estimator is defined for."""

    micro_batch: int = Field(default=1, ge=1)
    """Rollouts per forward/backward pass (gradients accumulate over a step's passes); must divide
    ``rl.prompts_per_step * rl.num_generations``. ``rl.num_generations`` puts a whole group in one pass, so the
    task's prompt is run once for all its rollouts (more memory, less compute)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: each layer keeps only its input (less memory, one
    more forward of compute). The shared prompt of ``micro_batch`` stays shared. Set for the RL stage
    whatever the SFT stage left (``sft.gradient_checkpointing``)."""
    loss_type: LossType = LossType.DAPO
    """TRL's loss aggregation."""
    vllm: VLLMMode = VLLMMode.NONE
    """Generate RL rollouts with TRL's vLLM engine: ``none``, ``colocate`` or ``server`` (experimental, GPU)."""
    vllm_server_url: str = "http://127.0.0.1:8000"
    """The ``trl vllm-serve`` server (``vllm: server``)."""


class EstimatorSettings(TRLSettings):
    """What every policy-gradient estimator reads: what an advantage judges, and the discount."""

    advantage: AdvantageMode = AdvantageMode.TURN
    """``outcome`` (one value per rollout) or ``turn`` (per-turn returns-to-go from process rewards). For
    ``gigpo`` it values the turns its step advantage compares (``turn``: their returns-to-go, the paper's;
    ``outcome``: their episode's return); its episode advantage is the outcome one either way."""
    gamma: float = Field(default=1.0, gt=0, le=1)
    """Per-turn discount of returns."""


class GroupBaselineSettings(EstimatorSettings):
    """An estimator with a group baseline: a group whose returns all tie carries no signal for it."""

    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: a group whose rollouts all earn the same return carries no signal for a group
    baseline, so it is dropped and its slot refilled with a fresh training task's group, for up to
    ``dynamic_sampling_tries`` extra rounds per step (groups still tied after them stay)."""
    dynamic_sampling_tries: int = Field(default=3, ge=1)
    """With ``dynamic_sampling``: the most extra rollout rounds per step (each plays fresh groups for the tied
    slots)."""


class GRPOSettings(GroupBaselineSettings):
    """``grpo`` (Shao et al., 2024): group-normalised advantages; ``rl.beta`` is TRL's KL term in the loss."""

    scale_rewards: ScaleRewards = ScaleRewards.GROUP
    """Divide the centred values by the group's std (``group``), the batch's (``batch``) or not (``none``)."""


class GiGPOSettings(GRPOSettings):
    """``gigpo`` (Feng et al., 2025): GRPO's episode advantage plus a step advantage over anchor states."""

    step_weight: float = Field(default=1.0, ge=0)
    """omega, the weight of the step advantage in ``A = A_episode + omega * A_step`` (0: GRPO's outcome
    advantage). ``scale_rewards`` scales the step advantage by its anchor group's std (``group``)."""
    anchor: AnchorState = AnchorState.OBSERVATION
    """Which turns share an anchor state - ``observation`` (the same last env observation, the prompt for turn 0:
    GiGPO's "identical environment state") or ``history`` (the same whole token prefix)."""


class RLOOSettings(GroupBaselineSettings):
    """``rloo`` (Ahmadian et al., 2024): the leave-one-out group baseline; ``rl.beta``'s KL in the reward."""

    kl_in_reward: ClassVar[bool] = True
    min_group_size: ClassVar[int] = 2


class ReinforcePPSettings(EstimatorSettings):
    """``reinforce_pp`` (Hu, 2025): global batch normalisation, no group baseline; ``rl.beta``'s KL in the
    reward."""

    kl_in_reward: ClassVar[bool] = True


class ReinforcePPBaselineSettings(GroupBaselineSettings):
    """``reinforce_pp_baseline``: the group-mean baseline, then global batch normalisation; ``rl.beta``'s KL in
    the reward."""

    kl_in_reward: ClassVar[bool] = True


class RFTSettings(TRLSettings):
    """``rft``: rejection-sampling fine-tuning, online (the non-RL baseline RL is read against). Each step samples the
    episodes an RL step would, keeps those whose return (the sum of the env's rewards) exceeds ``threshold``, and
    takes one supervised step on their model tokens: the advantage is 1 on a kept episode's tokens and 0 elsewhere,
    and at ratio 1 TRL's clipped loss is then the kept episodes' negative log-likelihood. ``rl.beta`` is TRL's KL
    term in the loss."""

    threshold: float = 0.0
    """An episode is kept when its return exceeds this (e.g. 0.5 with an exact-match reward of 1: a right answer)."""
    best_of_group: bool = False
    """Keep at most one episode per task: the group's best, when it passes ``threshold`` (the earliest on a tie)."""


ESTIMATOR_SECTIONS: dict[Algorithm, type[TRLSettings]] = {
    Algorithm.GRPO: GRPOSettings,
    Algorithm.RLOO: RLOOSettings,
    Algorithm.REINFORCE_PP: ReinforcePPSettings,
    Algorithm.REINFORCE_PP_BASELINE: ReinforcePPBaselineSettings,
    Algorithm.GIGPO: GiGPOSettings,
    Algorithm.RFT: RFTSettings,
}
"""The section of each algorithm whose advantages an estimator makes (all trained through TRL); PPO's
section lives in its own room."""


def carried_over(old: type[BaseModel], new: type[BaseModel]) -> set[str]:
    """The fields a section of type ``old`` hands to one of type ``new`` when a recipe changes algorithm: those
    both inherit from one settings class of this family (``rloo`` takes ``grpo``'s ``micro_batch``, ``advantage``
    and ``dynamic_sampling``, not its ``scale_rewards``). A field two unrelated sections merely share a name
    for is not carried (``ppo.gamma`` is per token, ``grpo.gamma`` per turn).

    Example:
        >>> sorted(carried_over(GRPOSettings, RLOOSettings))[:3]
        ['advantage', 'dynamic_sampling', 'dynamic_sampling_tries']
        >>> carried_over(GiGPOSettings, GRPOSettings) == set(GRPOSettings.model_fields)
        True
    """
    shared = [c for c in old.__mro__ if c in new.__mro__ and issubclass(c, TRLSettings)]
    return set(shared[0].model_fields) if shared else set()

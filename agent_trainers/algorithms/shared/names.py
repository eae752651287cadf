"""The names a config chooses among, and what each advantage estimator reads: no torch, no TRL.

The config (:mod:`agent_trainers.pipeline.config`) validates ``algorithm:``, ``rl.advantage``,
``rl.scale_rewards``, ``rl.gigpo_anchor`` and which settings each estimator reads before anything heavy is
imported, so that a wrong setting is a one-line error in about a second. The estimators themselves (torch) live
in :mod:`.advantages`, which registers each built-in under the traits declared here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "ESTIMATOR_TRAITS",
    "GIGPO_HINTS",
    "GIGPO_READS",
    "GROUP_BASELINE_READS",
    "AdvantageMode",
    "Algorithm",
    "AnchorState",
    "EstimatorTraits",
    "ScaleRewards",
]


class Algorithm(StrEnum):
    """RL algorithms ``agent-r1`` can train with (``algorithm:`` in a config)."""

    GRPO = "grpo"
    """Group-normalised advantages; KL (``beta``) in TRL's loss."""
    RLOO = "rloo"
    """Leave-one-out group baseline."""
    REINFORCE_PP = "reinforce_pp"
    """REINFORCE++: global batch normalisation; token-level KL in the reward."""
    REINFORCE_PP_BASELINE = "reinforce_pp_baseline"
    """REINFORCE++-baseline: group-mean baseline, then global batch normalisation."""
    GIGPO = "gigpo"
    """GiGPO: GRPO's episode advantage plus a step advantage over turns taken from the same (anchor) state."""
    PPO = "ppo"
    """PPO: a critic, GAE over agent tokens (its own trainer, :mod:`agent_trainers.algorithms.ppo`)."""


class ScaleRewards(StrEnum):
    """How ``grpo`` and ``gigpo`` scale centred values (TRL's ``scale_rewards``)."""

    GROUP = "group"
    """By the std of the group's units (outcome: its rollouts; turn: the step's turn values; gigpo's step
    advantage: the anchor group's turn values)."""
    BATCH = "batch"
    """By the std of every unit of the batch."""
    NONE = "none"
    """Not at all: only centre."""


class AdvantageMode(StrEnum):
    """What an advantage judges."""

    OUTCOME = "outcome"
    """One value per rollout: its (discounted) episode return."""
    TURN = "turn"
    """Per token: the return-to-go from its turn on (process rewards reach earlier turns)."""


class AnchorState(StrEnum):
    """Which tokens name the state a turn was taken from (GiGPO's anchor states; ``rl.gigpo_anchor``)."""

    OBSERVATION = "observation"
    """The last thing the env said: the prompt for turn 0, else the env tokens between the previous turn's model
    tokens and this turn's (GiGPO's "identical environment state"; earlier turns may differ)."""
    HISTORY = "history"
    """The whole token prefix before the turn (prompt and completion so far): identical only when everything
    the agent saw and did so far was identical."""


@dataclass(frozen=True)
class EstimatorTraits:
    """What the config needs to know of an advantage estimator (its function lives in :mod:`.advantages`).

    Attributes:
        kl_in_reward: The KL penalty enters the reward (else it stays in TRL's loss).
        min_group_size: Smallest group the estimator is defined for.
        reads: The settings it reads besides those every estimator reads (``rl.advantage``, ``rl.gamma``,
            ``rl.beta``), as dotted config keys: the trainer that runs it declares them (e.g. ``rl.scale_rewards``).
    """

    kl_in_reward: bool
    min_group_size: int = 1
    reads: frozenset[str] = frozenset()


GROUP_BASELINE_READS = frozenset({"rl.dynamic_sampling", "rl.dynamic_sampling_tries"})
"""Settings of the estimators with a group baseline: a group whose returns all tie gives them no signal."""

GIGPO_READS = frozenset({"rl.gigpo_step_weight", "rl.gigpo_anchor"})
"""Settings only ``gigpo`` reads: the weight of its step advantage and what names an anchor state."""

GIGPO_HINTS = {key: "only gigpo has a step advantage over anchor states" for key in sorted(GIGPO_READS)}
"""What the refusal of a :data:`GIGPO_READS` setting says under another algorithm (``Reads.instead``)."""

ESTIMATOR_TRAITS: dict[str, EstimatorTraits] = {
    Algorithm.GRPO: EstimatorTraits(False, reads=frozenset({"rl.scale_rewards"}) | GROUP_BASELINE_READS),
    Algorithm.RLOO: EstimatorTraits(True, min_group_size=2, reads=GROUP_BASELINE_READS),
    Algorithm.REINFORCE_PP: EstimatorTraits(True),
    Algorithm.REINFORCE_PP_BASELINE: EstimatorTraits(True, reads=GROUP_BASELINE_READS),
    Algorithm.GIGPO: EstimatorTraits(False, reads=frozenset({"rl.scale_rewards"}) | GIGPO_READS | GROUP_BASELINE_READS),
}
"""Algorithm name -> :class:`EstimatorTraits`, for every estimator (a user's :func:`.advantages.register` adds
its own); PPO has its own trainer and no entry."""

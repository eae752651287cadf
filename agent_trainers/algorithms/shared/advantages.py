"""Advantage estimators behind one registry: GRPO, RLOO, REINFORCE++, REINFORCE++-baseline.

Every estimator starts from the same per-token rewards
(:mod:`agent_trainers.algorithms.shared.tensors`): each turn's env reward - process
terms included - on the last model token of its turn, plus, for estimators that
take the KL in the reward, ``-beta * KL_t`` on every model token. From them,
:func:`~agent_trainers.algorithms.shared.tensors.discounted_returns` gives returns-to-go
``G[b, t]`` (``gamma`` per turn) and the episode return ``R[b] = G[b, 0]``. The
:class:`AdvantageMode` chooses what is judged:

* ``outcome`` - one value per rollout: every token gets ``R[b]``;
* ``turn`` - each token gets its return-to-go ``G[b, t]``: a turn is judged by
  what it and the turns after it earned (process rewards give earlier turns
  their own signal). Baselines are per step: turn ``k`` of a rollout is compared
  with turn ``k`` of the other rollouts of its group that reached it, each valued
  at its first token. (Pooling every turn of a group into one baseline would not
  do: a later turn has fewer rewards left to earn, so the last turn - the answer -
  would be judged below average whatever it said, and a few updates teach the
  policy to stop answering.) A turn no other member of its group reached has
  nothing to be compared with and gets advantage 0 from the group estimators.

Each estimator then applies its baseline and normalisation (``std`` is the
sample standard deviation, Bessel-corrected, as in TRL; ``eps = 1e-4``):

* ``grpo`` (Shao et al., 2024): ``(x - mean) / (std + eps)`` with mean and std
  over the group's units - its ``G`` rollouts (outcome), or per step the turn
  ``k`` values of the rollouts that reached turn ``k`` (turn);
  ``scale="batch"`` takes std over every unit of the batch, ``"none"`` only centres;
* ``rloo`` (Ahmadian et al., 2024): ``x - mean_{j != b} R[j]`` over the other
  members of the group (leave-one-out baseline; needs ``G >= 2``); per step in
  turn mode;
* ``reinforce_pp`` (Hu, 2025): ``(x - mean) / (std + eps)`` over *all model
  tokens of the batch* (global batch normalisation, no group baseline; turn
  mode keeps the published global normalisation of returns-to-go);
* ``reinforce_pp_baseline``: ``x - mean_group R`` (the group mean of episode
  returns; per step in turn mode), then the same global token-level normalisation.

KL: ``grpo`` keeps TRL's KL term in the loss (``beta`` there). The three
REINFORCE-family estimators put it in the reward instead, per token:
``KL_t = log pi_old(a_t) - log pi_ref(a_t)`` from the rollout's sampling
log-probs and the frozen reference (the adapter computes it when ``beta > 0``).

Values on env tokens follow the same rules (their return is what follows
them; in GRPO's turn mode a turn's env tokens share its advantage, as a step
whose rewards are all equal has std 0); they matter only when the loss mask is
switched off. Padding gets 0.
Adding an estimator is one function decorated with :func:`register`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import torch

from agent_trainers.algorithms.shared.tensors import RewardBatch, discounted_returns

__all__ = ["ESTIMATORS", "AdvantageMode", "Algorithm", "Estimator", "ScaleRewards", "compute_advantages", "register"]

EPS = 1e-4


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
    PPO = "ppo"
    """PPO: a critic, GAE over agent tokens (its own trainer, :mod:`agent_trainers.algorithms.ppo`)."""


class ScaleRewards(StrEnum):
    """How ``grpo`` scales centred values (TRL's ``scale_rewards``)."""

    GROUP = "group"
    """By the std of the group's units (outcome: its rollouts; turn: the step's turn values)."""
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


@dataclass(frozen=True)
class Options:
    """Settings an estimator may read."""

    mode: AdvantageMode
    scale: ScaleRewards
    eps: float


EstimatorFn = Callable[[torch.Tensor, torch.Tensor, RewardBatch, Options], torch.Tensor]


@dataclass(frozen=True)
class Estimator:
    """A registered advantage estimator.

    Attributes:
        name: Registry key (an :class:`Algorithm` value).
        fn: ``fn(values, episode_returns, batch, options) -> (B, T)`` advantages.
        kl_in_reward: The KL penalty enters the reward (else it stays in TRL's loss).
        min_group_size: Smallest group the estimator is defined for.
        reads: The settings it reads besides those every estimator reads (``rl.advantage``, ``rl.gamma``,
            ``rl.beta``), as dotted config keys: the trainer that runs it declares them (e.g. ``rl.scale_rewards``).
    """

    name: str
    fn: EstimatorFn
    kl_in_reward: bool
    min_group_size: int
    reads: frozenset[str] = frozenset()


ESTIMATORS: dict[str, Estimator] = {}

GROUP_BASELINE_READS = frozenset({"rl.dynamic_sampling", "rl.dynamic_sampling_tries"})
"""Settings of the estimators with a group baseline: a group whose returns all tie gives them no signal."""
"""The registry: algorithm name -> :class:`Estimator`."""


def register(
    name: str, *, kl_in_reward: bool, min_group_size: int = 1, reads: frozenset[str] = frozenset()
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator adding an estimator function to :data:`ESTIMATORS` under ``name``."""

    def add(fn: EstimatorFn) -> EstimatorFn:
        ESTIMATORS[str(name)] = Estimator(str(name), fn, kl_in_reward, min_group_size, frozenset(reads))
        return fn

    return add


def _std(x: torch.Tensor) -> torch.Tensor:
    return x.std(unbiased=True) if x.numel() > 1 else torch.zeros((), dtype=x.dtype, device=x.device)


def _whiten(values: torch.Tensor, mask: torch.Tensor, eps: float) -> torch.Tensor:
    """``(values - mean) / (std + eps)`` with mean and std over the masked entries."""
    picked = values[mask]
    if picked.numel() == 0:
        return torch.zeros_like(values)
    return (values - picked.mean()) / (_std(picked) + eps)


def _steps(values: torch.Tensor, batch: RewardBatch, start: int, g: int) -> dict[int, dict[int, torch.Tensor]]:
    """Turn ``k`` -> {row: value of its turn ``k`` at the turn's first token} over rows ``start .. start + g - 1``."""
    steps: dict[int, dict[int, torch.Tensor]] = {}
    for b in range(start, start + g):
        for k, first in enumerate(batch.turn_starts[b]):
            steps.setdefault(k, {})[b] = values[b, first]
    return steps


def _step_baselines(
    values: torch.Tensor, batch: RewardBatch, *, leave_one_out: bool, scale: ScaleRewards, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token baseline, divisor and turn value of turn mode: each turn ``k`` against the group's turn ``k``.

    Returns ``(baseline, divisor, turn_value)``, all ``(B, T)``; ``turn_value``
    is the value of a token's turn at its first token (model and env tokens of
    the turn alike). Tokens of a turn no other group member reached keep
    ``baseline = turn_value = value`` (advantage 0). ``scale``: ``group``
    divides by the step's std + eps, ``batch`` by the std of every unit of the
    batch + eps, ``none`` by 1.
    """
    g, n = batch.group_size, values.shape[0]
    baseline, divisor, turn_value = values.clone(), torch.ones_like(values), values.clone()
    groups = [_steps(values, batch, start, g) for start in range(0, n, g)]
    batch_std = None
    if scale is ScaleRewards.BATCH:  # the std of every unit of the batch, shared by all steps
        units = [v for steps in groups for step in steps.values() for v in step.values()]
        batch_std = _std(torch.stack(units)) + eps if units else None
    for steps in groups:
        for k, step in steps.items():
            if len(step) < 2:
                continue
            pooled = torch.stack(list(step.values()))
            std = (
                _std(pooled) + eps if scale is ScaleRewards.GROUP else batch_std if scale is ScaleRewards.BATCH else 1.0
            )
            for b, v in step.items():
                tokens = batch.turn_index[b] == k
                mean = (pooled.sum() - v) / (len(step) - 1) if leave_one_out else pooled.mean()
                baseline[b, tokens], divisor[b, tokens], turn_value[b, tokens] = mean, std, v
    return baseline, divisor, turn_value


@register(Algorithm.GRPO, kl_in_reward=False, reads=frozenset({"rl.scale_rewards"}) | GROUP_BASELINE_READS)
def grpo(values: torch.Tensor, returns: torch.Tensor, batch: RewardBatch, opts: Options) -> torch.Tensor:
    """Group-relative: centre (and scale) by the group's rollouts (outcome) or per step (turn)."""
    if opts.mode is AdvantageMode.TURN:
        baseline, divisor, turn_value = _step_baselines(
            values, batch, leave_one_out=False, scale=opts.scale, eps=opts.eps
        )
        return (turn_value - baseline) / divisor  # a turn's env tokens share its advantage
    grouped = returns.view(-1, batch.group_size)
    centred = values - grouped.mean(dim=1).repeat_interleave(batch.group_size)[:, None]
    if opts.scale is ScaleRewards.NONE:
        return centred
    if opts.scale is ScaleRewards.GROUP:
        stds = torch.stack([_std(row) for row in grouped]).repeat_interleave(batch.group_size)
    else:
        stds = _std(returns).expand(returns.shape[0])
    return centred / (stds[:, None] + opts.eps)


@register(Algorithm.RLOO, kl_in_reward=True, min_group_size=2, reads=GROUP_BASELINE_READS)
def rloo(values: torch.Tensor, returns: torch.Tensor, batch: RewardBatch, opts: Options) -> torch.Tensor:
    """Leave-one-out: subtract the mean episode return (turn mode: turn value) of the other group members."""
    if opts.mode is AdvantageMode.TURN:
        return values - _step_baselines(values, batch, leave_one_out=True, scale=ScaleRewards.NONE, eps=opts.eps)[0]
    g = batch.group_size
    sums = returns.view(-1, g).sum(dim=1, keepdim=True)
    baseline = ((sums - returns.view(-1, g)) / (g - 1)).reshape(-1)
    return values - baseline[:, None]


@register(Algorithm.REINFORCE_PP, kl_in_reward=True)
def reinforce_pp(values: torch.Tensor, returns: torch.Tensor, batch: RewardBatch, opts: Options) -> torch.Tensor:
    """Global batch normalisation over every model token of the batch."""
    return _whiten(values, batch.model_mask, opts.eps)


@register(Algorithm.REINFORCE_PP_BASELINE, kl_in_reward=True, reads=GROUP_BASELINE_READS)
def reinforce_pp_baseline(
    values: torch.Tensor, returns: torch.Tensor, batch: RewardBatch, opts: Options
) -> torch.Tensor:
    """Group-mean baseline, then global batch normalisation over model tokens."""
    if opts.mode is AdvantageMode.TURN:
        baseline = _step_baselines(values, batch, leave_one_out=False, scale=ScaleRewards.NONE, eps=opts.eps)[0]
        return _whiten(values - baseline, batch.model_mask, opts.eps)
    g = batch.group_size
    group_mean = returns.view(-1, g).mean(dim=1).repeat_interleave(g)
    return _whiten(values - group_mean[:, None], batch.model_mask, opts.eps)


def compute_advantages(
    batch: RewardBatch,
    algorithm: Algorithm | str,
    *,
    mode: AdvantageMode | str = AdvantageMode.OUTCOME,
    gamma: float = 1.0,
    kl_coef: float = 0.0,
    kl: torch.Tensor | None = None,
    scale: ScaleRewards | str = ScaleRewards.GROUP,
    eps: float = EPS,
) -> torch.Tensor:
    """Per-token advantages ``(B, T)`` of a batch (see the module docstring).

    Args:
        batch: From :func:`~agent_trainers.algorithms.shared.tensors.reward_batch`.
        algorithm: A registered estimator name (an :class:`Algorithm`).
        mode: ``outcome`` or ``turn``.
        gamma: Per-turn discount in (0, 1].
        kl_coef: ``beta`` of the KL penalty in the reward (estimators with ``kl_in_reward`` only).
        kl: ``(B, T)`` per-token KL estimates; required when ``kl_coef > 0`` for such estimators.
        scale: GRPO's std scaling, a :class:`ScaleRewards` (TRL's ``scale_rewards``).
        eps: Added to standard deviations.

    Raises:
        KeyError: Unknown algorithm (the message lists the registered ones).
        ValueError: Bad ``gamma``/``scale``, a group too small, or a missing ``kl``.
    """
    name = str(algorithm)
    if name not in ESTIMATORS:
        raise KeyError(f"no advantage estimator {name!r}; registered: {sorted(ESTIMATORS)}")
    est = ESTIMATORS[name]
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must be in (0, 1] (got {gamma})")
    if scale not in set(ScaleRewards):
        raise ValueError(f"scale must be 'group', 'batch' or 'none' (got {scale!r})")
    if batch.group_size < est.min_group_size:
        raise ValueError(f"{name} needs groups of at least {est.min_group_size} rollouts (got {batch.group_size})")
    rewards = batch.token_rewards
    if est.kl_in_reward and kl_coef:
        if kl is None:
            raise ValueError(f"{name} with a KL coefficient needs the per-token KL (kl=...)")
        rewards = rewards - kl_coef * kl * batch.model_mask
    returns_to_go = discounted_returns(rewards, batch.turn_index, gamma)
    returns = returns_to_go[:, 0] if returns_to_go.shape[1] else rewards.new_zeros(rewards.shape[0])
    opts = Options(mode=AdvantageMode(mode), scale=ScaleRewards(scale), eps=eps)
    values = returns_to_go if opts.mode is AdvantageMode.TURN else returns[:, None].expand_as(returns_to_go)
    return est.fn(values, returns, batch, opts) * batch.valid

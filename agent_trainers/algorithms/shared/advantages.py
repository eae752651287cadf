"""Advantage estimators behind one registry: GRPO, RLOO, REINFORCE++, REINFORCE++-baseline, GiGPO.

Every estimator starts from the same per-token rewards
(:mod:`agent_trainers.algorithms.shared.batch`): each turn's env reward - process
terms included - on the last model token of its turn, plus, for estimators that
take the KL in the reward, ``-beta * KL_t`` on every model token. From them,
:func:`~agent_trainers.algorithms.shared.batch.discounted_returns` gives returns-to-go
``G[b, t]`` (``gamma`` per turn) and the episode return ``R[b] = G[b, 0]``. The
:class:`AdvantageMode` (the section's ``advantage``) chooses what is judged:

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
  ``scale_rewards: batch`` takes std over every unit of the batch, ``none`` only centres;
* ``rloo`` (Ahmadian et al., 2024): ``x - mean_{j != b} R[j]`` over the other
  members of the group (leave-one-out baseline; needs ``G >= 2``); per step in
  turn mode;
* ``reinforce_pp`` (Hu, 2025): ``(x - mean) / (std + eps)`` over *all model
  tokens of the batch* (global batch normalisation, no group baseline; turn
  mode keeps the published global normalisation of returns-to-go);
* ``reinforce_pp_baseline``: ``x - mean_group R`` (the group mean of episode
  returns; per step in turn mode), then the same global token-level normalisation;
* ``gigpo`` (Feng et al., 2025, "Group-in-Group Policy Optimization"):
  ``A = A_episode + omega * A_step`` (``omega`` is ``gigpo.step_weight``). ``A_episode``
  is ``grpo``'s outcome advantage of the rollout, in either mode. ``A_step`` judges
  a turn against the turns of its group taken from the same *anchor state*
  (``batch.turn_states``: identical token ids, see
  :class:`~agent_trainers.algorithms.shared.names.AnchorState`), across the
  group's rollouts and within one (a state a rollout revisits counts once per
  visit): ``(x - mean) / (std + eps)`` over that anchor group's turn values ``x``,
  each valued at its turn's first token - in turn mode (the paper's) the
  discounted return from that turn on, ``G[b, t]``; in outcome mode the episode
  return ``R[b]``. ``scale_rewards`` as for ``grpo``: ``group`` divides by the anchor
  group's std + eps, ``batch`` by the std of every turn value of the batch + eps,
  ``none`` by 1. A turn whose state no other turn of its group was taken from gets
  ``A_step = 0``. Turn 0 is taken from the prompt, which the whole group shares, so
  with ``scale_rewards: group`` its ``A_step`` equals ``A_episode``.

KL: ``grpo`` and ``gigpo`` keep TRL's KL term in the loss (``beta`` there). The three
REINFORCE-family estimators put it in the reward instead, per token:
``KL_t = log pi_old(a_t) - log pi_ref(a_t)`` from the rollout's sampling
log-probs and the frozen reference (the adapter computes it when ``beta > 0``).

Values on env tokens follow the same rules (their return is what follows
them; in GRPO's turn mode and in GiGPO's step advantage a turn's env tokens
share its advantage, as a step whose rewards are all equal has std 0); they
matter only when the loss mask is switched off. Padding gets 0.
Adding an estimator is one function decorated with :func:`register` and its settings section
(:mod:`.sections`); each estimator reads its settings from that section.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch

from agent_trainers.algorithms.shared.batch import AgentBatch, discounted_returns
from agent_trainers.algorithms.shared.names import AdvantageMode, Algorithm, ScaleRewards
from agent_trainers.algorithms.shared.sections import (
    ESTIMATOR_SECTIONS,
    EstimatorSettings,
    GiGPOSettings,
    GRPOSettings,
    RFTSettings,
    TRLSettings,
)

__all__ = ["ESTIMATORS", "AdvantageMode", "Algorithm", "Estimator", "ScaleRewards", "compute_advantages", "register"]

EPS = 1e-4

EstimatorFn = Callable[[torch.Tensor, torch.Tensor, AgentBatch, Any], torch.Tensor]
"""``fn(values, episode_returns, batch, settings) -> (B, T)`` advantages; ``settings`` is the algorithm's section."""


@dataclass(frozen=True)
class Estimator:
    """A registered advantage estimator.

    Attributes:
        name: Registry key (an :class:`Algorithm` value).
        fn: ``fn(values, episode_returns, batch, settings) -> (B, T)`` advantages.
        settings: Its config section (a :class:`~.sections.TRLSettings` subclass), which also says whether the KL
            enters the reward and the smallest group it is defined for.
    """

    name: str
    fn: EstimatorFn
    settings: type[TRLSettings]

    @property
    def kl_in_reward(self) -> bool:
        """The KL penalty enters the reward (else it stays in TRL's loss)."""
        return self.settings.kl_in_reward

    @property
    def min_group_size(self) -> int:
        """Smallest group the estimator is defined for."""
        return self.settings.min_group_size


ESTIMATORS: dict[str, Estimator] = {}
"""The registry: algorithm name -> :class:`Estimator`."""


def register(name: str, *, settings: type[TRLSettings] | None = None) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator adding an estimator function to :data:`ESTIMATORS` under ``name``.

    A built-in name takes its section from :data:`~.sections.ESTIMATOR_SECTIONS`; a new name gives its own
    ``settings`` class (a :class:`~.sections.TRLSettings` subclass, whose class attributes ``kl_in_reward`` and
    ``min_group_size`` describe the estimator).
    """
    section = settings or ESTIMATOR_SECTIONS.get(str(name))  # type: ignore[call-overload]
    if section is None:
        raise ValueError(f"register({name!r}): a new estimator needs settings= (its TRLSettings subclass)")

    def add(fn: EstimatorFn) -> EstimatorFn:
        ESTIMATORS[str(name)] = Estimator(str(name), fn, section)
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


TurnKey = Callable[[int, int], Hashable]
"""``key(row, turn)``: what a turn is compared by; the turns of a group with equal keys are compared together."""

Unit = tuple[int, int, torch.Tensor]
"""One turn as a unit of comparison: ``(row, turn, its value at the turn's first token)``."""


def _by_turn_index(row: int, turn: int) -> Hashable:
    return turn


def _units(values: torch.Tensor, batch: AgentBatch, start: int, g: int, key: TurnKey) -> dict[Hashable, list[Unit]]:
    """Key -> the units of rows ``start .. start + g - 1`` with that key, in row order."""
    units: dict[Hashable, list[Unit]] = {}
    for b in range(start, start + g):
        for k, first in enumerate(batch.turn_starts[b]):
            units.setdefault(key(b, k), []).append((b, k, values[b, first]))
    return units


def _step_baselines(
    values: torch.Tensor,
    batch: AgentBatch,
    *,
    leave_one_out: bool,
    scale: ScaleRewards,
    eps: float,
    key: TurnKey = _by_turn_index,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token baseline, divisor and turn value: each turn against the turns of its group with the same ``key``.

    ``key`` is the turn index by default (turn mode: turn ``k`` against the
    group's turn ``k``); GiGPO's is the state the turn was taken from, which a
    rollout may revisit (several units of one row under one key).

    Returns ``(baseline, divisor, turn_value)``, all ``(B, T)``; ``turn_value``
    is the value of a token's turn at its first token (model and env tokens of
    the turn alike). Tokens of a turn that no other turn of its group shares a
    key with keep ``baseline = turn_value = value`` (advantage 0). ``scale``:
    ``group`` divides by the std of the key's units + eps, ``batch`` by the std
    of every unit of the batch + eps, ``none`` by 1.
    """
    g, n = batch.group_size, values.shape[0]
    baseline, divisor, turn_value = values.clone(), torch.ones_like(values), values.clone()
    groups = [_units(values, batch, start, g, key) for start in range(0, n, g)]
    batch_std: torch.Tensor | float = 1.0  # read under the batch scale only, where some unit exists
    if scale is ScaleRewards.BATCH:  # the std of every unit of the batch, shared by all comparisons
        units = [v for compared in groups for members in compared.values() for _, _, v in members]
        if units:
            batch_std = _std(torch.stack(units)) + eps
    for compared in groups:
        for members in compared.values():
            if len(members) < 2:
                continue
            pooled = torch.stack([v for _, _, v in members])
            std = (
                _std(pooled) + eps if scale is ScaleRewards.GROUP else batch_std if scale is ScaleRewards.BATCH else 1.0
            )
            for b, k, v in members:
                tokens = batch.turn_index[b] == k
                mean = (pooled.sum() - v) / (len(members) - 1) if leave_one_out else pooled.mean()
                baseline[b, tokens], divisor[b, tokens], turn_value[b, tokens] = mean, std, v
    return baseline, divisor, turn_value


def _group_outcome(returns: torch.Tensor, g: int, scale: ScaleRewards, eps: float) -> torch.Tensor:
    """GRPO's outcome advantage ``(B,)``: each episode return centred by its group's mean, scaled per ``scale``."""
    grouped = returns.view(-1, g)
    centred = returns - grouped.mean(dim=1).repeat_interleave(g)
    if scale is ScaleRewards.NONE:
        return centred
    if scale is ScaleRewards.GROUP:
        stds = torch.stack([_std(row) for row in grouped]).repeat_interleave(g)
    else:
        stds = _std(returns).expand(returns.shape[0])
    return centred / (stds + eps)


@register(Algorithm.GRPO)
def grpo(values: torch.Tensor, returns: torch.Tensor, batch: AgentBatch, settings: GRPOSettings) -> torch.Tensor:
    """Group-relative: centre (and scale) by the group's rollouts (outcome) or per step (turn)."""
    if settings.advantage is AdvantageMode.TURN:
        baseline, divisor, turn_value = _step_baselines(
            values, batch, leave_one_out=False, scale=settings.scale_rewards, eps=EPS
        )
        return (turn_value - baseline) / divisor  # a turn's env tokens share its advantage
    return _group_outcome(returns, batch.group_size, settings.scale_rewards, EPS)[:, None].expand_as(values)


@register(Algorithm.RLOO)
def rloo(values: torch.Tensor, returns: torch.Tensor, batch: AgentBatch, settings: EstimatorSettings) -> torch.Tensor:
    """Leave-one-out: subtract the mean episode return (turn mode: turn value) of the other group members."""
    if settings.advantage is AdvantageMode.TURN:
        return values - _step_baselines(values, batch, leave_one_out=True, scale=ScaleRewards.NONE, eps=EPS)[0]
    g = batch.group_size
    sums = returns.view(-1, g).sum(dim=1, keepdim=True)
    baseline = ((sums - returns.view(-1, g)) / (g - 1)).reshape(-1)
    return values - baseline[:, None]


@register(Algorithm.REINFORCE_PP)
def reinforce_pp(
    values: torch.Tensor, returns: torch.Tensor, batch: AgentBatch, settings: EstimatorSettings
) -> torch.Tensor:
    """Global batch normalisation over every model token of the batch."""
    return _whiten(values, batch.model_mask, EPS)


@register(Algorithm.REINFORCE_PP_BASELINE)
def reinforce_pp_baseline(
    values: torch.Tensor, returns: torch.Tensor, batch: AgentBatch, settings: EstimatorSettings
) -> torch.Tensor:
    """Group-mean baseline, then global batch normalisation over model tokens."""
    if settings.advantage is AdvantageMode.TURN:
        baseline = _step_baselines(values, batch, leave_one_out=False, scale=ScaleRewards.NONE, eps=EPS)[0]
        return _whiten(values - baseline, batch.model_mask, EPS)
    g = batch.group_size
    group_mean = returns.view(-1, g).mean(dim=1).repeat_interleave(g)
    return _whiten(values - group_mean[:, None], batch.model_mask, EPS)


@register(Algorithm.GIGPO)
def gigpo(values: torch.Tensor, returns: torch.Tensor, batch: AgentBatch, settings: GiGPOSettings) -> torch.Tensor:
    """Group-in-group: the episode's GRPO outcome advantage plus ``step_weight`` times its turn's anchor-state one."""
    scale = settings.scale_rewards
    episode = _group_outcome(returns, batch.group_size, scale, EPS)[:, None]
    baseline, divisor, turn_value = _step_baselines(
        values, batch, leave_one_out=False, scale=scale, eps=EPS, key=lambda b, k: batch.turn_states[b][k]
    )
    return episode + settings.step_weight * (turn_value - baseline) / divisor  # a turn's env tokens share its advantage


@register(Algorithm.RFT)
def rft(values: torch.Tensor, returns: torch.Tensor, batch: AgentBatch, settings: RFTSettings) -> torch.Tensor:
    """Rejection sampling: 1 on every token of a kept episode (its undiscounted return above ``threshold``; with
    ``best_of_group`` only its group's best, the earliest on a tie), 0 elsewhere."""
    kept = batch.scores > settings.threshold
    if settings.best_of_group:
        g = batch.group_size
        best = torch.zeros_like(kept)
        first = batch.scores.view(-1, g).argmax(dim=1) + torch.arange(0, kept.shape[0], g, device=kept.device)
        best[first] = True
        kept = kept & best
    return kept.to(values.dtype)[:, None].expand_as(values)


def compute_advantages(
    batch: AgentBatch,
    algorithm: Algorithm | str,
    settings: TRLSettings | None = None,
    *,
    kl_coef: float = 0.0,
    kl: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token advantages ``(B, T)`` of a batch (see the module docstring).

    Args:
        batch: From :meth:`~agent_trainers.algorithms.shared.batch.AgentBatch.from_trajectories`.
        algorithm: A registered estimator name (an :class:`Algorithm`).
        settings: The algorithm's section (:mod:`.sections`); its ``advantage`` (outcome or turn) and ``gamma``
            (per turn) where it has them (else outcome, undiscounted), and whatever the estimator reads of it
            (``scale_rewards``, ``step_weight``, ``threshold``). None: the section's defaults.
        kl_coef: ``beta`` of the KL penalty in the reward (estimators with ``kl_in_reward`` only).
        kl: ``(B, T)`` per-token KL estimates; required when ``kl_coef > 0`` for such estimators.

    Raises:
        KeyError: Unknown algorithm (the message lists the registered ones).
        TypeError: ``settings`` is another algorithm's section.
        ValueError: A group too small, or a missing ``kl``.
    """
    name = str(algorithm)
    if name not in ESTIMATORS:
        raise KeyError(f"no advantage estimator {name!r}; registered: {sorted(ESTIMATORS)}")
    est = ESTIMATORS[name]
    settings = est.settings() if settings is None else settings
    if not isinstance(settings, est.settings):
        raise TypeError(f"{name} reads a {est.settings.__name__} section (got {type(settings).__name__})")
    if batch.group_size < est.min_group_size:
        raise ValueError(f"{name} needs groups of at least {est.min_group_size} rollouts (got {batch.group_size})")
    rewards = batch.token_rewards
    if est.kl_in_reward and kl_coef:
        if kl is None:
            raise ValueError(f"{name} with a KL coefficient needs the per-token KL (kl=...)")
        rewards = rewards - kl_coef * kl * batch.model_mask
    returns_to_go = discounted_returns(rewards, batch.turn_index, getattr(settings, "gamma", 1.0))
    returns = returns_to_go[:, 0] if returns_to_go.shape[1] else rewards.new_zeros(rewards.shape[0])
    turn = getattr(settings, "advantage", AdvantageMode.OUTCOME) is AdvantageMode.TURN
    values = returns_to_go if turn else returns[:, None].expand_as(returns_to_go)
    return est.fn(values, returns, batch, settings) * batch.valid

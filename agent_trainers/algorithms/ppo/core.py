"""PPO's tensor functions: GAE over the agent's tokens, masked whitening, the clipped losses, KL estimators.

All functions take ``(B, T)`` tensors over the completion tokens of a batch
(the layout of :mod:`agent_trainers.algorithms.shared.batch`) and boolean masks;
they hold no state and are checked against hand-computed values in the tests.

Advantage alignment (the Agent-R1 paper's PPO): GAE runs over the tokens of
``mask`` only - by default the agent's own tokens. Env tokens between two
turns are skipped: the value of the last token of a turn bootstraps from the
value of the first token of the next turn, and the discount is applied once
per *agent* token, as if the env's tokens were not there. With the mask off
(``mask = every completion token``) GAE runs over env tokens too, so they are
discounted like agent tokens; with ``gamma = lam = 1`` both give the same
advantages on agent tokens (the sums telescope), with ``gamma`` or ``lam``
below 1 they differ.

Example:
    >>> r = torch.tensor([[0.0, 1.0, 0.0, 0.0, 2.0]])   # agent, agent, env, env, agent
    >>> v = torch.tensor([[0.5, 0.5, 9.0, 9.0, 1.0]])   # env values are never read when masked
    >>> m = torch.tensor([[True, True, False, False, True]])
    >>> adv, ret = masked_gae(r, v, m, gamma=1.0, lam=1.0)
    >>> adv.tolist()
    [[2.5, 2.5, 1.0, 1.0, 1.0]]
"""

from __future__ import annotations

import torch

__all__ = [
    "clipped_surrogate",
    "clipped_value_loss",
    "explained_variance",
    "kl_k1",
    "kl_k3",
    "masked_gae",
    "masked_mean",
    "masked_whiten",
    "step_gae",
]


def masked_gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, *, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the tokens of ``mask`` only (Schulman et al., 2016).

    For the in-mask tokens ``t_1 < t_2 < ... < t_n`` of a row::

        delta_k = r[t_k] + gamma * V[t_{k+1}] - V[t_k]        (V[t_{n+1}] = 0: the episode ended)
        A[t_k]  = delta_k + gamma * lam * A[t_{k+1}]
        R[t_k]  = A[t_k] + V[t_k]                              (the value target)

    Tokens outside the mask are skipped: they neither discount nor bootstrap.
    They get the advantage of the next in-mask token (0 after the last one),
    so that with the loss mask off an env token is judged by what follows it,
    and a return of 0 (they are never value targets).

    Args:
        rewards: ``(B, T)`` per-token rewards (only in-mask rewards are used).
        values: ``(B, T)`` critic values ``V(s_t)``, the state before token ``t``.
        mask: ``(B, T)`` bool, the tokens GAE runs over.
        gamma: Discount per in-mask token, in ``[0, 1]``.
        lam: GAE's lambda, in ``[0, 1]``.

    Returns:
        ``(advantages, returns)``, both ``(B, T)``.
    """
    mask = mask.bool()
    advantages = torch.zeros_like(values)
    next_value = values.new_zeros(values.shape[0])
    running = values.new_zeros(values.shape[0])
    for t in range(values.shape[1] - 1, -1, -1):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        here = delta + gamma * lam * running
        running = torch.where(mask[:, t], here, running)
        next_value = torch.where(mask[:, t], values[:, t], next_value)
        advantages[:, t] = running
    returns = torch.where(mask, advantages + values, torch.zeros_like(values))
    return advantages, returns


def step_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    turn_index: torch.Tensor,
    turn_starts: list[list[int]],
    *,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GAE over the agent's *steps* (turns), as Agent-R1 v0.1.0's step-level critic does.

    Step ``k`` of a row is its turn ``k``: its state's value is ``V_k = values[turn_starts[k]]`` (the value
    read at the step's last prompt token, the state before its first action token), its reward ``r_k`` the
    sum of the per-token rewards of its tokens (the env reward of the turn, and a per-token KL penalty when
    there is one). Then, with ``V_{n} = 0`` after the last step::

        delta_k = r_k + gamma * V_{k+1} - V_k
        A_k     = delta_k + gamma * lam * A_{k+1}
        R_k     = A_k + V_k                     (the value target, at the step's position only)

    Every token of turn ``k`` gets ``A_k``. With ``gamma = lam = 1``, ``A_k`` is the Monte-Carlo return from
    step ``k`` minus ``V_k``.

    Args:
        rewards: ``(B, T)`` per-token rewards.
        values: ``(B, T)`` critic values ``V(s_t)``, the state before token ``t``.
        turn_index: ``(B, T)`` the turn of each token (-1 on padding).
        turn_starts: Per row, the first token of each turn.
        gamma: Discount per step, in ``[0, 1]``.
        lam: GAE's lambda, in ``[0, 1]``.

    Returns:
        ``(advantages, returns, step_mask)``: per-token advantages (0 on padding), the value targets (non-zero
        at step positions only) and the step positions (where the critic is trained).

    Example:
        >>> r = torch.tensor([[0.0, 0.1, 0.0, 0.0, 1.0]])   # turn 0: tokens 0-2 (2 env), turn 1: tokens 3-4
        >>> v = torch.tensor([[0.2, 7.0, 7.0, 0.5, 7.0]])   # only the values at the turn starts are read
        >>> adv, ret, at = step_gae(r, v, torch.tensor([[0, 0, 0, 1, 1]]), [[0, 3]], gamma=1.0, lam=1.0)
        >>> [round(x, 4) for x in adv[0].tolist()], [round(x, 4) for x in ret[0].tolist()]
        ([0.9, 0.9, 0.9, 0.5, 0.5], [1.1, 0.0, 0.0, 1.0, 0.0])
    """
    step_mask = torch.zeros_like(values, dtype=torch.bool)
    step_rewards = torch.zeros_like(values)
    for b, starts in enumerate(turn_starts):
        if not starts:
            continue
        where, tokens = torch.tensor(starts, device=values.device), turn_index[b] >= 0
        step_mask[b, where] = True
        per_turn = torch.zeros(len(starts), dtype=rewards.dtype, device=rewards.device)
        step_rewards[b, where] = per_turn.index_add_(0, turn_index[b, tokens], rewards[b, tokens])
    at_steps, returns = masked_gae(step_rewards, values, step_mask, gamma=gamma, lam=lam)
    advantages = torch.zeros_like(values)
    for b, starts in enumerate(turn_starts):
        if starts:
            tokens = turn_index[b] >= 0
            advantages[b, tokens] = at_steps[b, torch.tensor(starts, device=values.device)][turn_index[b, tokens]]
    return advantages, returns, step_mask


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the True entries of ``mask`` (NaN when there are none: absent, not 0)."""
    mask = mask.bool()
    count = mask.sum()
    if count == 0:
        return x.new_tensor(float("nan"))
    return (x * mask).sum() / count


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, *, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps)`` with mean and (Bessel-corrected) variance over ``mask``; 0 outside it.

    Raises:
        ValueError: Fewer than two entries in ``mask`` (no variance to divide by).
    """
    mask = mask.bool()
    picked = x[mask]
    if picked.numel() < 2:
        raise ValueError(f"whitening needs at least 2 masked entries (got {picked.numel()})")
    mean, var = picked.mean(), picked.var(unbiased=True)
    return torch.where(mask, (x - mean) * torch.rsqrt(var + eps), torch.zeros_like(x))


def clipped_surrogate(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, clip_coef: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, per token: ``max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps))``.

    Returns:
        ``(losses, clipped)``: the per-token loss to minimise and a bool tensor
        telling where the clipped branch was the larger (its gradient is 0).
    """
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    return torch.maximum(unclipped, clipped), clipped > unclipped


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token value loss ``0.5 * max((V - R)^2, (V_clipped - R)^2)``, ``V_clipped = V_old + clip(V - V_old, ±c)``.

    With ``clip=None`` it is the plain ``0.5 * (V - R)^2``.

    Returns:
        ``(losses, clipped)``: per-token losses and where the clipped branch was the larger.
    """
    plain = (values - returns) ** 2
    if clip is None:
        return 0.5 * plain, torch.zeros_like(plain, dtype=torch.bool)
    v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    clipped = (v_clipped - returns) ** 2
    return 0.5 * torch.maximum(plain, clipped), clipped > plain


def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """``log pi(a) - log pi_ref(a)`` per token: the KL estimator that goes into the reward."""
    return logprobs - ref_logprobs


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Schulman's non-negative, unbiased estimator ``exp(ref - logp) - (ref - logp) - 1``: the KL loss term."""
    diff = ref_logprobs - logprobs
    return torch.exp(diff) - diff - 1.0


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """``1 - Var(R - V) / Var(R)`` over ``mask``: 1 is a perfect critic, 0 no better than a constant.

    NaN when the returns have no variance (absent, not 0).
    """
    mask = mask.bool()
    r, v = returns[mask], values[mask]
    if r.numel() < 2:
        return float("nan")
    var_r = r.var(unbiased=True)
    if var_r == 0:
        return float("nan")
    return float(1.0 - (r - v).var(unbiased=True) / var_r)

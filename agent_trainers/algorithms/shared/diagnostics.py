"""What every RL step reports about itself, one table: :data:`DIAGNOSTICS`, the console line and its alarms.

Each trainer logs its own figures under its own names (TRL: ``entropy``,
``clip_ratio/region_mean``, ``kl``; our PPO: ``ppo/entropy``, ``ppo/clipfrac``,
``ppo/kl_ref``) and every trainer logs the rollout figures of
:func:`~agent_trainers.rollout.training.episode_metrics`. This table
names each diagnostic once, says where each trainer logs it, and is what the
pipeline writes to ``metrics.jsonl`` (:func:`canonical`), prints after each step
(:func:`step_line`) and draws (``plots/diagnostics.png``). A figure a trainer
does not produce (the KL without a reference model, dynamic sampling when it is
off) is absent, shown as ``—``, never 0.

==========================  ==========================================================================
diagnostic                  what it says
==========================  ==========================================================================
reward                      mean return of the step's episodes
groups/reward_std           mean spread of returns inside a group (0: no signal for a group baseline)
groups/tied                 share of groups whose returns all tie
dynamic_sampling/dropped    share of the groups played that dynamic sampling left out (tied)
rollout/answered            share of episodes that ended with an answer
rollout/turns               model turns per episode
rollout/evidence            share of the gold evidence found (tasks that have some)
rollout/format_errors       share of model turns the env refused as malformed
kl                          KL to the reference policy (only with one: ``rl.beta > 0``)
entropy                     mean entropy of the policy on the trained tokens (TRL trainers: of the micro-batches
                            the model ran on; absent when every one was idle)
grad_norm                   gradient norm before clipping
update/skipped              1 when the step's update was dropped: no advantage was non-zero (TRL trainers)
update/idle_micro_batches   micro-batches the model did not run on: their gradient was exactly 0 (TRL trainers)
clip                        share of tokens whose ratio was clipped
tokens/total                prompt + completion tokens of the step
step_time                   seconds of the step (rollouts and update)
async/staleness             optimizer steps between the batch's policy and the trained one (async rollouts)
async/trainer_wait          seconds the trainer waited for the step's episodes (async rollouts)
offpolicy/ratio_mean        mean importance ratio pi_train / pi_behaviour of a stale batch's tokens
offpolicy/ratio_max         its largest ratio
offpolicy/capped            share of tokens (sequences) the cap truncated or masked
==========================  ==========================================================================

The last five exist only with ``rl.async_rollouts`` (the ratios only for a stale batch); the console line
leaves them out when absent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from transformers import TrainerCallback

from agent_trainers.errors import NonFiniteTrainingError

__all__ = [
    "DIAGNOSTICS",
    "WATCHED",
    "Diagnostic",
    "NonFiniteTrainingError",
    "StopOnNonFinite",
    "alarms",
    "canonical",
    "step_line",
]

WATCHED = ("loss", "grad_norm", "ppo/policy_loss", "ppo/value_loss")
"""Logged figures that must stay finite: one that is not means the weights are (or are about to be) NaN."""


class StopOnNonFinite(TrainerCallback):
    """Raise :class:`NonFiniteTrainingError` at the first log whose loss or gradient norm is not finite.

    Checkpoints are saved after a step's log, so the step that went wrong is never saved and the last
    checkpoint (``--resume`` continues from it) holds the last good weights.

    Args:
        stage: Named in the message (``"sft"``, ``"rl"``).
    """

    def __init__(self, stage: str):
        self.stage = stage

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        bad = {k: v for k, v in (logs or {}).items() if k in WATCHED and isinstance(v, float) and not math.isfinite(v)}
        if bad:
            shown = ", ".join(f"{k} {v}" for k, v in bad.items())
            raise NonFiniteTrainingError(
                f"{self.stage} step {state.global_step}: {shown}; training stopped, nothing of this step was "
                "saved (the last checkpoint holds the last good weights). Lower the learning rate"
            )


@dataclass(frozen=True)
class Diagnostic:
    """One row of the table.

    Attributes:
        name: Its key in ``metrics.jsonl``.
        label: Its name on the console line.
        digits: Decimals shown.
        sources: The keys the trainers log it under (the first present is taken).
    """

    name: str
    label: str
    digits: int
    sources: tuple[str, ...]
    optional: bool = False


def _row(name: str, label: str, digits: int, *also: str) -> Diagnostic:
    return Diagnostic(name, label, digits, (name, *also))


def _optional(name: str, label: str, digits: int) -> Diagnostic:
    """A row of a feature that may be off: left off the console line when absent."""
    return Diagnostic(name, label, digits, (name,), optional=True)


DIAGNOSTICS: tuple[Diagnostic, ...] = (
    _row("reward", "reward", 3),
    _row("groups/reward_std", "in-group sd", 3),
    _row("groups/tied", "tied", 2),
    _row("dynamic_sampling/dropped", "dropped", 2),
    _row("rollout/answered", "answered", 2),
    _row("rollout/turns", "turns", 2),
    _row("rollout/evidence", "evidence", 2),
    _row("rollout/format_errors", "format err", 2),
    _row("kl", "KL", 4, "kl_reward/mean", "ppo/kl_ref"),
    _row("entropy", "entropy", 3, "ppo/entropy"),
    _row("grad_norm", "|grad|", 2),
    _row("update/skipped", "skipped", 0),
    _optional("update/idle_micro_batches", "idle mb", 0),
    _row("clip", "clip", 3, "clip_ratio/region_mean", "ppo/clipfrac"),
    _row("tokens/total", "tokens", 0),
    _row("step_time", "s", 1),
    _optional("async/staleness", "stale", 0),
    _optional("async/trainer_wait", "wait s", 1),
    _optional("offpolicy/ratio_mean", "IS mean", 3),
    _optional("offpolicy/ratio_max", "IS max", 2),
    _optional("offpolicy/capped", "IS capped", 3),
)
"""Every per-step diagnostic, in the order of the console line."""

TIED_ALARM = 0.5
"""Alarm when more than this share of a step's groups tie."""
DROP_ALARM = 0.2
"""Alarm when the answer rate (or the well-formed share of turns) falls by more than this from the first step."""


def canonical(logs: Mapping[str, float]) -> dict[str, float]:
    """The diagnostics present in a trainer's ``logs``, under their table names."""
    out = {}
    for d in DIAGNOSTICS:
        value = next((logs[k] for k in d.sources if k in logs), None)
        if value is not None:
            out[d.name] = float(value)
    return out


def alarms(now: Mapping[str, float], first: Mapping[str, float] | None = None) -> list[str]:
    """What a user should see at once: most groups tied, the answer rate or the format falling since ``first``.

    Example:
        >>> alarms({"groups/tied": 0.75, "rollout/answered": 0.5}, {"rollout/answered": 0.9})
        ['75% of groups tied (no signal for a group baseline; dynamic_sampling: true refills them)', \
'answer rate fell 0.90 -> 0.50 since the first step']
    """
    out = []
    tied = now.get("groups/tied")
    if tied is not None and tied > TIED_ALARM:
        fix = "its tries ran out" if "dynamic_sampling/dropped" in now else "dynamic_sampling: true refills them"
        out.append(f"{tied:.0%} of groups tied (no signal for a group baseline; {fix})")
    for key, what in (("rollout/answered", "answer rate fell"), ("rollout/format_errors", "format errors rose")):
        if first is None or key not in now or key not in first:
            continue
        change = now[key] - first[key]
        if (change < -DROP_ALARM) if key == "rollout/answered" else (change > DROP_ALARM):
            out.append(f"{what} {first[key]:.2f} -> {now[key]:.2f} since the first step")
    return out


def step_line(step: int, max_steps: int, step_times: Sequence[float], diagnostics: Mapping[str, float]) -> str:
    """One line per RL step: time, mean and ETA, then every diagnostic (``—`` where absent).

    Example:
        >>> step_line(2, 8, [90.0, 70.0], {"reward": 0.25, "groups/tied": 0.5})  # doctest: +ELLIPSIS
        'RL step 2/8: 70.0 s (mean 80.0 s/step, ETA 8.0 min) | reward 0.250 | in-group sd — | tied 0.50 | ...'
    """
    mean = sum(step_times) / len(step_times)
    eta = (max_steps - step) * mean / 60
    cells = []
    for d in DIAGNOSTICS:
        if d.name == "step_time":
            continue
        value = diagnostics.get(d.name)
        if value is None and d.optional:
            continue
        cells.append(f"{d.label} {'—' if value is None else f'{value:.{d.digits}f}'}")
    head = f"RL step {step}/{max_steps}: {step_times[-1]:.1f} s (mean {mean:.1f} s/step, ETA {eta:.1f} min)"
    return " | ".join([head, *cells])

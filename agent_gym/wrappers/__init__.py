"""Wrappers for text environments: cross-cutting concerns live here, not in envs.

* :class:`RecordStopReason` - sets ``info["stop_reason"] = "max_turns"`` when
  a time limit (``max_episode_steps``) truncates the episode, so every episode
  end names the condition that fired, and makes ``step()`` after the end
  (terminated *or* truncated) raise
  :class:`~agent_gym.core.env.EpisodeOverError` until ``reset()``.
  Registered envs carry it by default.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
from gymnasium.utils import RecordConstructorArgs
from gymnasium.wrappers import PassiveEnvChecker

from agent_gym.core.env import EpisodeOverError
from agent_gym.core.info import StopReason

__all__ = ["RecordStopReason"]


class RecordStopReason(gym.Wrapper[str, str, str, str], RecordConstructorArgs):
    """Name the stop condition of truncated episodes and refuse steps after the end.

    Place it outside :class:`gymnasium.wrappers.TimeLimit` (``gymnasium.make``
    does so for registered envs). It records its (empty) constructor
    arguments, so ``gymnasium.make(env.spec)`` rebuilds the same stack.

    The rule it enforces (the one Gymnasium's vector envs assume): once a step
    returns ``terminated`` or ``truncated``, the episode is over and the next
    ``step()`` raises :class:`~agent_gym.core.env.EpisodeOverError`; call
    ``reset()``.

    Example:
        >>> import gymnasium as gym, agent_gym
        >>> env = gym.make("AgentR1/Calculator-v0", max_episode_steps=1)
        >>> _ = env.reset(seed=0)
        >>> env.step("hello")[3]  # truncated by the turn limit
        True
        >>> env.step("hello")
        Traceback (most recent call last):
        ...
        agent_gym.core.env.EpisodeOverError: the episode was truncated (max_turns); call reset() to start a new one
    """

    def __init__(self, env: gym.Env[str, str]):
        RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self._ended: str | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Reset; a reset that raises (e.g. no such task) leaves no episode to step, and the next one works."""
        try:
            obs, info = self.env.reset(seed=seed, options=options)
        except Exception:
            self._ended = "not started (the last reset failed)"
            _rearm_reset_check(self.env)
            raise
        self._ended = None
        return obs, info

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._ended is not None:
            raise EpisodeOverError(f"the episode was {self._ended}; call reset() to start a new one")
        obs, reward, terminated, truncated, info = self.env.step(action)
        if truncated and not terminated and info["stop_reason"] is None:
            info["stop_reason"] = StopReason.MAX_TURNS
        if terminated:
            self._ended = f"terminated ({info['stop_reason']})"
        elif truncated:
            self._ended = f"truncated ({info['stop_reason']})"
        return obs, reward, terminated, truncated, info


def _rearm_reset_check(env: gym.Env) -> None:
    """Let Gymnasium's ``PassiveEnvChecker`` check the next reset again after a first reset that raised.

    It marks its reset check done before the env's reset runs and keeps that reset's result for its first-step
    check; when the reset raised there is no result, and every later first ``step`` failed inside the checker
    (``TypeError: cannot unpack non-iterable NoneType``), good resets in between or not (Gymnasium 1.4).
    """
    while isinstance(env, gym.Wrapper):
        # _previous_data: Gymnasium >= 1.3 keeps the reset result there; 1.2 keeps none (and has no attribute)
        if isinstance(env, PassiveEnvChecker) and not env.checked_step and getattr(env, "_previous_data", None) is None:
            env.checked_reset = False
        env = env.env

"""Wrappers for text environments: cross-cutting concerns live here, not in envs.

* :class:`RecordStopReason` - sets ``info["stop_reason"] = "max_turns"`` when
  a time limit (``max_episode_steps``) truncates the episode, so every episode
  end names the condition that fired. Registered envs carry it by default.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agent_gym.core.env import StopReason

__all__ = ["RecordStopReason"]


class RecordStopReason(gym.Wrapper[str, str, str, str]):
    """Name the stop condition of truncated episodes in ``info["stop_reason"]``.

    Place it outside :class:`gymnasium.wrappers.TimeLimit` (``gymnasium.make``
    does so for registered envs).
    """

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if truncated and not terminated and info.get("stop_reason") is None:
            info["stop_reason"] = StopReason.MAX_TURNS
        return obs, reward, terminated, truncated, info

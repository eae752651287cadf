"""A progress bar for rollouts: :class:`RolloutProgress` (episode-turns done, model tokens/s, ETA).

Batched rollouts finish most episodes together at the very end, so a bar over
episodes would sit at 0 % and look hung. This one counts *episode-turns*: it
advances by one per episode after each batched generation, and when an
episode ends early it jumps over the turns that episode will not play, so it
reaches 100 % exactly when the rollout ends and its ETA (tqdm's) is an upper
bound that tightens as episodes end. The postfix shows model tokens/s and the
number of live episodes.
"""

from __future__ import annotations

import time
from typing import Any

from tqdm.auto import tqdm

from agent_trainers.rollout.types import Trajectory

__all__ = ["RolloutProgress"]


class RolloutProgress:
    """A tqdm bar over ``episodes x max_turns`` episode-turns.

    Args:
        episodes: Episodes in the rollout.
        max_turns: The turn limit; ``None`` (unknown) counts turns without a total or ETA.
        desc: The bar's label.
        done: Episodes already played before this bar (a resumed evaluation): counted as finished.
        **tqdm_kwargs: Passed to ``tqdm`` (e.g. ``disable=True``, ``file=...``).
    """

    def __init__(
        self, episodes: int, max_turns: int | None, *, desc: str = "rollout", done: int = 0, **tqdm_kwargs: Any
    ):
        self.max_turns = max_turns
        total = episodes * max_turns if max_turns else None
        initial = done * max_turns if max_turns else 0
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit="turn", dynamic_ncols=True, **tqdm_kwargs)
        self.start = time.perf_counter()
        self.tokens = 0
        self.live = episodes - done
        self.note = ""

    def generated(self, turns: int, tokens: int) -> None:
        """``turns`` episodes each generated one turn, ``tokens`` model tokens in all."""
        self.tokens += tokens
        self._postfix()
        self.bar.update(turns)

    def ended(self, traj: Trajectory) -> None:
        """An episode ended: skip the turns it will not play."""
        self.live -= 1
        if self.max_turns:
            self.bar.update(max(0, self.max_turns - len(traj.turns)))
        self._postfix()

    def set_note(self, note: str) -> None:
        """Text shown after the rate and live count (e.g. a running metric)."""
        self.note = note
        self._postfix()
        self.bar.refresh()

    def close(self) -> None:
        """Close the bar (its last line stays on the terminal)."""
        self.bar.close()

    def _postfix(self) -> None:
        rate = self.tokens / max(1e-9, time.perf_counter() - self.start)
        note = f", {self.note}" if self.note else ""
        self.bar.set_postfix_str(f"{rate:.1f} model tok/s, {self.live} live{note}", refresh=False)

"""Save and load trajectories as JSON lines (one trajectory per line).

Each line holds every field of :class:`~agent_trainers.rollout.Trajectory`
(messages, token ids, loss mask, log-probs, turn spans with rewards and reward
terms, seed, env id and kwargs, metrics) plus ``"format": 1``. Floats are
written with Python's shortest round-trip repr, so ``load_jsonl(save_jsonl(t))``
gives back equal trajectories (env kwargs must be JSON values; tuples come back
as lists).

Example:
    >>> save_jsonl(trajs, "runs/rollout.jsonl")  # doctest: +SKIP
    >>> load_jsonl("runs/rollout.jsonl") == trajs  # doctest: +SKIP
    True
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agent_gym.core.files import write_atomic
from agent_trainers.rollout.types import Trajectory, TurnSpan

__all__ = ["FORMAT_VERSION", "load_jsonl", "save_jsonl", "trajectory_from_dict", "trajectory_to_dict"]

FORMAT_VERSION = 1
_FIELDS = {f.name for f in dataclasses.fields(Trajectory)}


def trajectory_to_dict(traj: Trajectory) -> dict[str, Any]:
    """A JSON-ready dict of every field of ``traj``, plus ``"format"``."""
    return {"format": FORMAT_VERSION, **dataclasses.asdict(traj)}


def trajectory_from_dict(record: dict[str, Any]) -> Trajectory:
    """Rebuild a trajectory from :func:`trajectory_to_dict` output.

    Raises:
        ValueError: Unknown format version, or missing / unknown fields.
    """
    data = dict(record)
    version = data.pop("format", None)
    if version != FORMAT_VERSION:
        raise ValueError(f"unsupported trajectory format {version!r} (this version reads {FORMAT_VERSION})")
    missing, unknown = _FIELDS - set(data), set(data) - _FIELDS
    required = {f.name for f in dataclasses.fields(Trajectory) if f.default is dataclasses.MISSING}
    if missing & required or unknown:
        raise ValueError(f"bad trajectory record: missing {sorted(missing & required)}, unknown {sorted(unknown)}")
    data["turns"] = [TurnSpan(**t) for t in data.get("turns", [])]
    return Trajectory(**data)


def save_jsonl(trajs: Iterable[Trajectory], path: str | Path) -> Path:
    """Write ``trajs`` to ``path`` (parents created), one JSON object per line.

    Returns:
        The path written.
    """
    lines = "".join(json.dumps(trajectory_to_dict(t), ensure_ascii=False) + "\n" for t in trajs)
    return write_atomic(path, lines)  # a kill while writing leaves the old file or the whole new one


def load_jsonl(path: str | Path) -> list[Trajectory]:
    """Read trajectories written by :func:`save_jsonl`.

    Raises:
        ValueError: A line is not valid JSON or not a trajectory record (the
            message gives the line number).
    """
    trajs = []
    with Path(path).open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                trajs.append(trajectory_from_dict(json.loads(line)))
            except (json.JSONDecodeError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{lineno}: {exc}") from exc
    return trajs

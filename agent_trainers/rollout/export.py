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
from typing import Annotated, Any, NotRequired

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict  # pydantic reads typing.TypedDict only from Python 3.12

from agent_gym.core.files import write_atomic
from agent_trainers.rollout.types import Trajectory, TurnSpan

__all__ = ["FORMAT_VERSION", "first_error", "load_jsonl", "save_jsonl", "trajectory_from_dict", "trajectory_to_dict"]

FORMAT_VERSION = 1
_FIELDS = {f.name for f in dataclasses.fields(Trajectory)}
_TOKEN_ID = Annotated[int, Field(ge=0)]


@with_config(ConfigDict(extra="forbid"))
class _TurnShape(TypedDict):
    start: int
    end: int
    env_end: int
    reward: NotRequired[float]
    reward_terms: NotRequired[dict[str, float]]
    format_errors: NotRequired[list[str]]
    cut: NotRequired[bool]


_SHAPES: dict[str, TypeAdapter[Any]] = {
    "prompt_ids": TypeAdapter(list[_TOKEN_ID]),
    "completion_ids": TypeAdapter(list[_TOKEN_ID]),
    "loss_mask": TypeAdapter(list[Annotated[int, Field(ge=0, le=1)]]),
    "logprobs": TypeAdapter(list[float]),
    "messages": TypeAdapter(list[dict[str, Any]]),
    "metrics": TypeAdapter(dict[str, float]),
    "env_kwargs": TypeAdapter(dict[str, Any]),
    "tools": TypeAdapter(list[dict[str, Any]]),
    "turns": TypeAdapter(list[_TurnShape]),
    "step_prompts": TypeAdapter(list[list[_TOKEN_ID]]),
    "task_type": TypeAdapter(str | None),
    **{name: TypeAdapter(int) for name in ("seed", "task_index", "group_id", "evidence_found", "evidence_total")},
    **{name: TypeAdapter(str) for name in ("env_id", "task_id", "stop_reason", "error")},
    **{name: TypeAdapter(bool) for name in ("terminated", "truncated")},
}
"""Each field's JSON shape, checked in strict mode (no ``"5"`` for 5, no string for a list; NaN and
infinite floats are floats). A saved trajectory has every field; an old or hand-written one may lack the
defaulted ones."""


def trajectory_to_dict(traj: Trajectory) -> dict[str, Any]:
    """A JSON-ready dict of every field of ``traj``, plus ``"format"``."""
    return {"format": FORMAT_VERSION, **dataclasses.asdict(traj)}


def trajectory_from_dict(record: dict[str, Any]) -> Trajectory:
    """Rebuild a trajectory from :func:`trajectory_to_dict` output.

    Raises:
        ValueError: Unknown format version, missing / unknown fields, or a field of the wrong type
            (the message names the field and where in it: ``messages.2``, ``completion_ids.7``).
    """
    if not isinstance(record, dict):
        raise ValueError(f"a trajectory record is a JSON object, not {type(record).__name__}")
    data = dict(record)
    version = data.pop("format", None)
    if version != FORMAT_VERSION:
        raise ValueError(f"unsupported trajectory format {version!r} (this version reads {FORMAT_VERSION})")
    missing, unknown = _FIELDS - set(data), set(data) - _FIELDS
    required = {f.name for f in dataclasses.fields(Trajectory) if f.default is dataclasses.MISSING}
    if missing & required or unknown:
        raise ValueError(f"bad trajectory record: missing {sorted(missing & required)}, unknown {sorted(unknown)}")
    for name, value in data.items():
        try:
            data[name] = _SHAPES[name].validate_python(value, strict=True)
        except ValidationError as exc:
            raise ValueError(f"bad trajectory record: {first_error(exc, name)}") from None
    data["turns"] = [TurnSpan(**t) for t in data.get("turns", [])]
    return Trajectory(**data)


def first_error(exc: ValidationError, *prefix: str) -> str:
    """The first of ``exc``'s errors as ``where: what (got X)``: ``where`` dotted from ``prefix`` and the error's
    location (``messages.0``), the input's repr cut to 60 characters (a bad record may hold a long list)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in (*prefix, *first["loc"]) if p not in ("", "[key]"))
    text = repr(first["input"])
    got = text if len(text) <= 60 else text[:57] + "..."
    return f"{where}: {first['msg']} (got {got})"


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
            except RecursionError:
                raise ValueError(f"{path}:{lineno}: JSON nested too deeply") from None
    return trajs

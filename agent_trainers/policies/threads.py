"""The ``threads`` setting: how many torch CPU threads a command runs its model on.

One type (:data:`Threads`), one command-line parser (:func:`parse_threads`) and one
function that applies it (:func:`apply_threads`), shared by the ``threads`` key of
an ``agent-r1`` config, ``agent-r1 eval --threads``, ``agent-r1 rollout --threads``
and the benchmarks. A setting is a number (0: torch's default) or ``"auto"``: the
cores idle at start (:func:`idle_cores`). On a busy 2-core machine the default of
torch (one thread per core) oversubscribes the cores and made SmolLM2 decoding ~100x
slower; on an idle one, 2 threads ran it 1.8x faster than 1.

Example::

    >>> parse_threads("auto"), parse_threads("2"), resolve_threads(0)
    ('auto', 2, None)
"""

from __future__ import annotations

import argparse
import os
from typing import Annotated, Literal

from pydantic import Field, TypeAdapter, ValidationError

__all__ = ["MAX_THREADS", "Threads", "apply_threads", "idle_cores", "parse_threads", "resolve_threads"]

MAX_THREADS = 1024
"""The most torch CPU threads a setting takes (more than any machine's cores; torch fails to allocate 100,000)."""

Threads = Annotated[int, Field(ge=0, le=MAX_THREADS)] | Literal["auto"]
"""A ``threads`` setting: torch CPU threads (0: torch's default; at most :data:`MAX_THREADS`) or ``"auto"`` (the
cores idle at start)."""

_THREADS: TypeAdapter[int | str] = TypeAdapter(Threads)


def parse_threads(text: str) -> int | Literal["auto"]:
    """A ``--threads`` value (``"auto"`` or a number >= 0) as a :data:`Threads` setting; argparse's ``type=``.

    Raises:
        argparse.ArgumentTypeError: Neither ``auto`` nor a whole number >= 0 (argparse prints it as one line).
    """
    try:
        return _THREADS.validate_strings(text)  # type: ignore[return-value]
    except ValidationError:
        raise argparse.ArgumentTypeError(
            f"expected a number from 0 to {MAX_THREADS} or 'auto' (got {text!r})"
        ) from None


def idle_cores() -> int:
    """The CPU cores not busy right now: usable cores minus the 1-minute load average, at least 1.

    Example: 2 cores with one other busy process (load 1.0) -> 1; an idle 2-core machine -> 2.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - round(os.getloadavg()[0])) if hasattr(os, "getloadavg") else cores


def resolve_threads(setting: int | str) -> int | None:
    """The torch CPU thread count a setting asks for: ``"auto"`` -> :func:`idle_cores`, 0 -> None (torch's
    default), else the number."""
    if setting == "auto":
        return idle_cores()
    return int(setting) or None


def apply_threads(setting: int | str) -> int | None:
    """Set torch's CPU thread count from a :data:`Threads` setting (0 leaves torch's default alone).

    Returns:
        The count set, or None when torch's default was kept.
    """
    threads = resolve_threads(setting)
    if threads:
        import torch

        torch.set_num_threads(threads)
    return threads

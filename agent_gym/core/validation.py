"""Checks of constructor settings shared by the core modules (each a ``ValueError`` naming the setting)."""

from __future__ import annotations

import numbers

__all__ = ["positive_int"]


def positive_int(name: str, value: object) -> int:
    """``value`` as an ``int`` if it is a positive integer (numpy integers too), else a ``ValueError``.

    Example:
        >>> positive_int("top_k", 3)
        3
        >>> positive_int("top_k", 0)
        Traceback (most recent call last):
        ValueError: top_k must be a positive int (got 0)
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int (got {value!r})")
    return int(value)

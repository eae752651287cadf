"""One-line messages for configuration errors (used by every command line; imports nothing else of ours)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

__all__ = ["NonFiniteTrainingError", "one_line"]


class NonFiniteTrainingError(RuntimeError):
    """The loss or gradient norm of a training step was NaN or infinite; training stopped before saving it."""


def _loc(parts: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in parts if not str(p).startswith("function-"))


def one_line(error: BaseException) -> str:
    """A one-line description of a config error: pydantic's errors as ``where: what (got X)``, joined by ``; ``.

    Example:
        >>> from pydantic import BaseModel
        >>> class C(BaseModel):
        ...     steps: int
        >>> try:
        ...     C(steps="abc")
        ... except ValueError as e:
        ...     print(one_line(e))
        steps: Input should be a valid integer, unable to parse string as an integer (got 'abc')
    """
    if not isinstance(error, ValidationError):
        return " ".join(str(error).split())
    return "; ".join(describe_error(err) for err in error.errors(include_url=False))


def describe_error(err: Mapping[str, Any]) -> str:
    """One of pydantic's error dicts (``ValidationError.errors()``) as ``where: what (got X)``."""
    where = _loc(err.get("loc", ()))
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    got = err.get("input")
    shown = "" if err.get("type") == "value_error" or isinstance(got, dict) else f" (got {got!r})"
    return f"{where}: {msg}{shown}" if where else f"{msg}{shown}"

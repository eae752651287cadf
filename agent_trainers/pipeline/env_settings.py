"""The ``env:`` section of a training config: split defaults that fit the env, and its envs built before a run.

``env.train_kwargs`` / ``env.eval_kwargs`` left out of a config default to ``{split: train}`` /
``{split: test}`` when the env's constructor takes ``split`` (the built-in QA envs), and to ``{}`` otherwise
(the procedural envs, your own), so ``--set env.id=my_module:Me/MyEnv-v0`` needs nothing else.

An id of the form ``module:Namespace/Name-vN`` imports ``module`` first (Gymnasium's own form), which
registers the id; a module that is not importable from ``sys.path`` is looked for in the working directory
too (as ``uvicorn module:app`` does), so ``agent-r1 train`` run beside ``my_module.py`` finds it.

:func:`check_env_settings` builds the training and the evaluation env once, before the run writes anything
or loads a model, so that an unknown id or a keyword the env does not take is one line at once.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec, load_env_creator

import agent_gym  # noqa: F401 - registers the built-in ids
from agent_gym.registration import import_env_module

__all__ = ["check_env_settings", "default_kwargs", "env_spec", "import_env_module", "takes_argument"]

DEFAULT_SPLITS = {"train_kwargs": "train", "eval_kwargs": "test"}
"""The split each section defaults to, for envs that take ``split``."""


def env_spec(env_id: str) -> EnvSpec:
    """The registered spec of ``env_id`` (``module:`` ids import their module first).

    Raises:
        ValueError: One line: no such id (with Gymnasium's "did you mean"), or its module does not import.
    """
    try:
        return gym.spec(import_env_module(env_id))
    except (gym.error.Error, ImportError) as exc:
        raise ValueError(f"env.id {env_id!r}: {' '.join(str(exc).split())}") from None


def _accepted(creator: Callable[..., Any]) -> tuple[set[str], bool]:
    """Keyword names an env creator takes, following ``**kwargs`` up the classes' ``__init__`` s; and whether
    that list is complete (no ``**kwargs`` left unexplained)."""
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    inits = (
        [k.__dict__["__init__"] for k in creator.__mro__ if "__init__" in k.__dict__]
        if inspect.isclass(creator)
        else [creator]
    )
    names: set[str] = set()
    for init in inits:
        try:
            params = inspect.signature(init).parameters
        except (TypeError, ValueError):  # a builtin without a signature
            return names, False
        names |= {n for n, p in params.items() if p.kind in keyword and n != "self"}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return names, True
    return names, False


def _arguments(env_id: str) -> tuple[str, set[str], bool]:
    """The creator's ``module:name``, the keywords ``gymnasium.make(env_id, ...)`` takes, and whether that is all."""
    spec = env_spec(env_id)
    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    names, complete = _accepted(creator)  # type: ignore[arg-type]
    where = f"{getattr(creator, '__module__', '?')}:{getattr(creator, '__qualname__', '?')}"
    return where, names | set(_MAKE_KEYWORDS), complete


_MAKE_KEYWORDS = ("max_episode_steps", "disable_env_checker")
"""Keywords ``gymnasium.make`` itself reads."""


def takes_argument(env_id: str, name: str) -> bool:
    """Whether ``gymnasium.make(env_id, name=...)`` reaches a constructor parameter called ``name``.

    Read from the signatures (nothing is built): a ``**kwargs`` is followed to the base class's ``__init__``.
    """
    return name in _arguments(env_id)[1]


def default_kwargs(env_id: str, section: str) -> dict[str, Any]:
    """``{"split": "train"}`` / ``{"split": "test"}`` for ``train_kwargs`` / ``eval_kwargs`` where the env takes
    ``split``; else ``{}`` (also for an id that does not resolve: :func:`check_env_settings` names that)."""
    try:
        return {"split": DEFAULT_SPLITS[section]} if takes_argument(env_id, "split") else {}
    except ValueError:
        return {}


def check_env_settings(env_id: str, sections: Mapping[str, Mapping[str, Any]]) -> None:
    """Build (and close) the env of each section once; any failure is a one-line ``ValueError`` naming it.

    Args:
        env_id: ``env.id``.
        sections: ``{"train_kwargs": {...}, "eval_kwargs": {...}}``.

    Raises:
        ValueError: ``env.id`` is unknown, or ``gymnasium.make(env_id, **kwargs)`` fails for a section, e.g.
            ``env.train_kwargs {'split': 'train'}: DictionaryEnv.__init__() got an unexpected keyword
            argument 'split'``.
    """
    where, names, complete = _arguments(env_id)
    for section, kwargs in sections.items():
        unknown = sorted(set(kwargs) - names) if complete else []
        if unknown:
            close = difflib.get_close_matches(unknown[0], names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (it takes: {', '.join(sorted(names))})"
            if unknown[0] == "split":
                hint = f": it has no splits; leave env.{section} out, or set it to {{}}"
            raise ValueError(f"env.{section}: {env_id} ({where}) takes no argument {unknown[0]!r}{hint}")
        try:
            gym.make(env_id, **dict(kwargs)).close()
        except Exception as exc:  # any failure to build the env is this section's error
            raise ValueError(f"env.{section} {dict(kwargs)}: {type(exc).__name__}: {exc}") from None

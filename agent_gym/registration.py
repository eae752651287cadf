"""Register your own environment ids the way the built-ins are registered.

:func:`register_env` is :func:`gymnasium.register` with what every built-in
id of :data:`agent_gym.envs.REGISTRY` gets: a turn limit (Gymnasium's
``TimeLimit``) and, outside it, the
:class:`~agent_gym.wrappers.RecordStopReason` wrapper, which names the stop
condition of a truncated episode (``info["stop_reason"] == "max_turns"``) and
makes ``step()`` after the end raise. An id registered with plain
``gymnasium.register`` lacks that wrapper: after truncation its
``stop_reason`` is ``None`` and ``step()`` goes on, and
:func:`agent_gym.testing.check_text_env` fails on it.

Example:
    >>> import gymnasium as gym
    >>> from agent_gym import register_env
    >>> register_env("Doc/ShortBandit-v0", "agent_gym.envs.bandit:BanditEnv", max_episode_steps=2)
    >>> env = gym.make("Doc/ShortBandit-v0")
    >>> _ = env.reset(seed=0)
    >>> _ = env.step("thinking"); info = env.step("still thinking")[-1]
    >>> str(info["stop_reason"])
    'max_turns'
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import WrapperSpec, parse_env_id

__all__ = ["STOP_REASON_WRAPPER", "import_env_module", "register_env"]

STOP_REASON_WRAPPER = WrapperSpec(name="RecordStopReason", entry_point="agent_gym.wrappers:RecordStopReason", kwargs={})
"""The wrapper every id registered here carries, outside its ``TimeLimit``."""


def _name_of(entry_point: str | Callable[..., Any]) -> str:
    """``"module:Class"`` for a string entry point or a class / function."""
    if isinstance(entry_point, str):
        return entry_point
    return f"{getattr(entry_point, '__module__', '?')}:{getattr(entry_point, '__qualname__', repr(entry_point))}"


def register_env(
    env_id: str,
    entry_point: str | Callable[..., Any],
    *,
    kwargs: Mapping[str, Any] | None = None,
    max_episode_steps: int = 8,
    additional_wrappers: Sequence[WrapperSpec] = (),
) -> None:
    """Register ``env_id`` with a turn limit and :class:`~agent_gym.wrappers.RecordStopReason`, as the built-ins are.

    Call it at module level next to your env class; ``gymnasium.make("your_module:Name/Env-v0")`` (and
    ``agent-r1 train --set env.id=your_module:Name/Env-v0``) imports the module, which registers the id.
    Registering the same id again with an entry point of the same name (a re-imported module, a re-run
    notebook cell) replaces the registration; with another entry point it is an error.

    Args:
        env_id: ``Namespace/Name-vN``; bump ``-vN`` when observations, tools or rewards change.
        entry_point: Your :class:`~agent_gym.core.env.ToolEnv` subclass, or ``"module:Class"`` (imported on
            ``gymnasium.make``).
        kwargs: Default constructor arguments (``gymnasium.make`` kwargs override them).
        max_episode_steps: The turn limit (a positive int): the episode is truncated after this many steps,
            with ``info["stop_reason"] == "max_turns"``.
        additional_wrappers: More wrappers, applied outside ``RecordStopReason``.

    Raises:
        ValueError: ``env_id`` is not ``Namespace/Name-vN``, ``max_episode_steps`` is not a positive int,
            or the id is already registered with another entry point (e.g. a built-in id).
    """
    try:
        namespace, _, version = parse_env_id(env_id) if ":" not in env_id else (None, env_id, None)
    except gym.error.Error:  # not even Gymnasium's [namespace/](env_name)[-v(version)]
        namespace = version = None
    if namespace is None or version is None:
        raise ValueError(
            f"register_env: the id must look like 'Namespace/Name-vN' (got {env_id!r}); "
            "bump -vN when observations, tools or rewards change"
        )
    if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int) or max_episode_steps < 1:
        raise ValueError(f"register_env: max_episode_steps must be a positive int (got {max_episode_steps!r})")
    existing = gym.registry.get(env_id)
    if existing is not None:
        if _name_of(existing.entry_point) != _name_of(entry_point):  # type: ignore[arg-type]
            raise ValueError(
                f"register_env: {env_id!r} is already registered with entry point "
                f"{_name_of(existing.entry_point)!r} (not {_name_of(entry_point)!r}); choose another id"  # type: ignore[arg-type]
            )
        del gym.registry[env_id]  # the same env again (a re-import): its newest definition wins, without a warning
    gym.register(
        id=env_id,
        entry_point=entry_point,
        kwargs=dict(kwargs or {}),
        max_episode_steps=max_episode_steps,
        additional_wrappers=(STOP_REASON_WRAPPER, *additional_wrappers),
    )


def import_env_module(env_id: str) -> str:
    """Import the ``module`` of a ``module:Namespace/Name-vN`` id, also from the working directory; the rest of it.

    Gymnasium's own ``gymnasium.make("module:Name-vN")`` imports ``module`` from ``sys.path``, which holds the
    working directory under ``python script.py`` but not under a console script (``agent-r1``, ``vf-eval``).
    A module that is not found there is looked for in the working directory too (appended to ``sys.path``, so
    an installed module of the same name still wins), as ``uvicorn module:app`` does.

    Args:
        env_id: ``module:Namespace/Name-vN`` or a plain id (returned as it is).

    Returns:
        The id without its ``module:`` part.

    Raises:
        ModuleNotFoundError: The module is neither on ``sys.path`` nor in the working directory (or a module it
            imports is missing).
    """
    if ":" not in env_id:
        return env_id
    module, name = env_id.split(":", 1)
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        cwd = os.getcwd()
        if exc.name != module.split(".")[0] or cwd in sys.path:
            raise
        sys.path.append(cwd)
        importlib.import_module(module)
    return name

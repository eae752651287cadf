"""Multi-turn rollouts, token in, token out (the layer above :mod:`agent_trainers.policies`).

* :class:`Trajectory`, :class:`TurnSpan`, :class:`StopReason` (:mod:`.types`);
* :class:`RolloutConfig` - the one rollout settings type (:mod:`.config`);
* :class:`ChatTokenizer`, :func:`tokenize_chat` - the one incremental
  tokenisation module, shared by the engine, the checker and SFT (:mod:`.chat`);
* :func:`rollout` - the engine (:mod:`.engine`), with an optional progress bar (:mod:`.progress`);
* :func:`check_trajectory` - token-exactness checks (:mod:`.checker`);
* :func:`save_jsonl` / :func:`load_jsonl` - export (:mod:`.export`);
* ``python -m agent_trainers.rollout`` - the command line (:mod:`.cli`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported on first use
    from agent_trainers.rollout.chat import (
        ChatTokenizer as ChatTokenizer,
    )
    from agent_trainers.rollout.chat import (
        TemplateDriftError as TemplateDriftError,
    )
    from agent_trainers.rollout.chat import (
        TokenizedChat as TokenizedChat,
    )
    from agent_trainers.rollout.chat import (
        tokenize_chat as tokenize_chat,
    )
    from agent_trainers.rollout.checker import (
        TrajectoryError as TrajectoryError,
    )
    from agent_trainers.rollout.checker import (
        check_prefix_stable as check_prefix_stable,
    )
    from agent_trainers.rollout.checker import (
        check_trajectory as check_trajectory,
    )
    from agent_trainers.rollout.concurrency import (
        run_with_timeouts as run_with_timeouts,
    )
    from agent_trainers.rollout.config import (
        RolloutConfig as RolloutConfig,
    )
    from agent_trainers.rollout.engine import (
        rollout as rollout,
    )
    from agent_trainers.rollout.engine import (
        stop_strings_for as stop_strings_for,
    )
    from agent_trainers.rollout.export import (
        load_jsonl as load_jsonl,
    )
    from agent_trainers.rollout.export import (
        save_jsonl as save_jsonl,
    )
    from agent_trainers.rollout.export import (
        trajectory_from_dict as trajectory_from_dict,
    )
    from agent_trainers.rollout.export import (
        trajectory_to_dict as trajectory_to_dict,
    )
    from agent_trainers.rollout.progress import (
        RolloutProgress as RolloutProgress,
    )
    from agent_trainers.rollout.types import (
        StopReason as StopReason,
    )
    from agent_trainers.rollout.types import (
        Trajectory as Trajectory,
    )
    from agent_trainers.rollout.types import (
        TurnSpan as TurnSpan,
    )

_LAZY = {
    "ChatTokenizer": "chat",
    "RolloutConfig": "config",
    "RolloutProgress": "progress",
    "StopReason": "types",
    "TemplateDriftError": "chat",
    "TokenizedChat": "chat",
    "Trajectory": "types",
    "TrajectoryError": "checker",
    "TurnSpan": "types",
    "check_prefix_stable": "checker",
    "check_trajectory": "checker",
    "load_jsonl": "export",
    "rollout": "engine",
    "run_with_timeouts": "concurrency",
    "save_jsonl": "export",
    "stop_strings_for": "engine",
    "tokenize_chat": "chat",
    "trajectory_from_dict": "export",
    "trajectory_to_dict": "export",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

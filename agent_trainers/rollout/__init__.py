"""Multi-turn rollouts, token in, token out (the layer above :mod:`agent_trainers.policies`).

* :class:`Trajectory`, :class:`TurnSpan`, :class:`StopReason` (:mod:`.types`);
* :class:`RolloutConfig` - the one rollout settings type (:mod:`.config`);
* :class:`ChatTokenizer`, :func:`tokenize_chat` - the one incremental
  tokenisation module, shared by the engine, the checker and SFT (:mod:`.chat`);
* :func:`rollout` - the engine (:mod:`.engine`), with an optional progress bar (:mod:`.progress`);
* :func:`check_trajectory` - token-exactness checks (:mod:`.checker`);
* :func:`save_jsonl` / :func:`load_jsonl` - export (:mod:`.export`);
* the training tasks' episodes (:mod:`.training`): :func:`task_rows`, :func:`task_schedule`,
  :class:`EnvRollouts` (every trainer's rollouts, seeded per call), :func:`episode_metrics`;
* generation overlapped with training (:mod:`.async_worker`, its process :mod:`.async_process`):
  :class:`AsyncRollouts`;
* ``python -m agent_trainers.rollout`` - the command line (:mod:`.cli`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported on first use
    from agent_trainers.rollout.async_worker import (
        AsyncRollouts as AsyncRollouts,
    )
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
    from agent_trainers.rollout.training import (
        EnvRollouts as EnvRollouts,
    )
    from agent_trainers.rollout.training import (
        episode_metrics as episode_metrics,
    )
    from agent_trainers.rollout.training import (
        task_rows as task_rows,
    )
    from agent_trainers.rollout.training import (
        task_schedule as task_schedule,
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

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "chat": ["ChatTokenizer", "TemplateDriftError", "TokenizedChat", "tokenize_chat"],
        "checker": ["TrajectoryError", "check_prefix_stable", "check_trajectory"],
        "concurrency": ["run_with_timeouts"],
        "config": ["RolloutConfig"],
        "engine": ["rollout", "stop_strings_for"],
        "export": ["load_jsonl", "save_jsonl", "trajectory_from_dict", "trajectory_to_dict"],
        "progress": ["RolloutProgress"],
        "training": ["EnvRollouts", "episode_metrics", "task_rows", "task_schedule"],
        "async_worker": ["AsyncRollouts"],
        "types": ["StopReason", "Trajectory", "TurnSpan"],
    },
)

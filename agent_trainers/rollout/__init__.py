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

from agent_trainers.rollout.chat import ChatTokenizer, TemplateDriftError, TokenizedChat, tokenize_chat
from agent_trainers.rollout.checker import TrajectoryError, check_prefix_stable, check_trajectory
from agent_trainers.rollout.concurrency import run_with_timeouts
from agent_trainers.rollout.config import RolloutConfig
from agent_trainers.rollout.engine import rollout, stop_strings_for
from agent_trainers.rollout.export import load_jsonl, save_jsonl, trajectory_from_dict, trajectory_to_dict
from agent_trainers.rollout.progress import RolloutProgress
from agent_trainers.rollout.types import StopReason, Trajectory, TurnSpan

__all__ = [
    "ChatTokenizer",
    "RolloutConfig",
    "RolloutProgress",
    "StopReason",
    "TemplateDriftError",
    "TokenizedChat",
    "Trajectory",
    "TrajectoryError",
    "TurnSpan",
    "check_prefix_stable",
    "check_trajectory",
    "load_jsonl",
    "rollout",
    "run_with_timeouts",
    "save_jsonl",
    "stop_strings_for",
    "tokenize_chat",
    "trajectory_from_dict",
    "trajectory_to_dict",
]

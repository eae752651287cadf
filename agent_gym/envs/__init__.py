"""The environment registry: one readable table of every environment id.

``import agent_gym`` registers each row with Gymnasium; so does
``gymnasium.make("agent_gym:AgentR1/...")`` without a prior import. Entry
points are lazy ``"module:Class"`` strings, so registering imports nothing
heavy. Bump ``-vN`` whenever observations, tools or rewards change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agent_gym.registration import STOP_REASON_WRAPPER, register_env

__all__ = ["REGISTRY", "EnvEntry", "list_envs", "register_envs"]


@dataclass(frozen=True)
class EnvEntry:
    """One row of the registry.

    Attributes:
        id: ``Namespace/Name-vN``.
        entry_point: ``"module:Class"``, imported on ``gymnasium.make``.
        description: One line for ``list_envs()`` and ``agent-r1 envs``.
        kwargs: Default constructor arguments (``gym.make`` kwargs override them).
        max_episode_steps: Turn limit (Gymnasium's ``TimeLimit``).
    """

    id: str
    entry_point: str
    description: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    max_episode_steps: int = 8


REGISTRY: tuple[EnvEntry, ...] = (
    # id, entry point, one-line description, default kwargs, turn limit
    EnvEntry(
        "AgentR1/HotpotQA-v0",
        "agent_gym.envs.qa:MultiHopQAEnv",
        "HotpotQA multi-hop QA with a BM25 search tool (embedded original sample; data_path= for real data)",
        {"source": "hotpotqa"},
        8,
    ),
    EnvEntry(
        "AgentR1/2WikiMultihopQA-v0",
        "agent_gym.envs.qa:MultiHopQAEnv",
        "2WikiMultihopQA multi-hop QA with a BM25 search tool (embedded original sample; data_path= for real data)",
        {"source": "2wikimultihopqa"},
        8,
    ),
    EnvEntry(
        "AgentR1/MuSiQue-v0",
        "agent_gym.envs.qa:MultiHopQAEnv",
        "MuSiQue 2-4 hop QA with a BM25 search tool (embedded original sample; data_path= for real data)",
        {"source": "musique"},
        10,
    ),
    EnvEntry(
        "AgentR1/SQLite-v0",
        "agent_gym.envs.sqlite:SqliteEnv",
        "Generated relational-database questions (lookups, joins, aggregates, two-step) via a read-only sql tool",
        {},
        10,
    ),
    EnvEntry(
        "AgentR1/Calculator-v0",
        "agent_gym.envs.calculator:CalculatorEnv",
        "Generated multi-step arithmetic word problems solved with an exact calculator tool",
        {},
        10,
    ),
    EnvEntry(
        "AgentR1/TextWorld-v0",
        "agent_gym.envs.textworld_env:TextWorldEnv",
        "TextWorld household text games, made locally and cached, played with a command tool (textworld extra)",
        {},
        50,
    ),
    EnvEntry(
        "AgentR1/Bandit-v0",
        "agent_gym.envs.bandit:BanditEnv",
        "A four-armed bandit as a text task (pull arms, answer the one that pays): a fast toy for RL checks",
        {},
        3,
    ),
)

_STOP_REASON = STOP_REASON_WRAPPER


def register_envs() -> None:
    """Register every row of :data:`REGISTRY` with Gymnasium (idempotent), through :func:`~agent_gym.register_env`.

    Your own ids go through the same helper, so they get the same turn limit and wrappers.
    """
    for entry in REGISTRY:
        if entry.id in gym.registry:
            continue
        register_env(entry.id, entry.entry_point, kwargs=entry.kwargs, max_episode_steps=entry.max_episode_steps)


def list_envs() -> list[tuple[str, str]]:
    """``(id, one-line description)`` for every registered environment."""
    return [(e.id, e.description) for e in REGISTRY]

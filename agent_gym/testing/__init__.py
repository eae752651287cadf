"""Conformance kit for text environments (product code, for your envs too).

:func:`check_text_env` runs Gymnasium's :func:`~gymnasium.utils.env_checker.check_env`
and then the checks a text agent environment needs on top:

* observations are in the observation space after ``reset`` and every ``step``;
* whole trajectories are deterministic under a seed (observations, rewards,
  infos), noise included;
* rewards are finite, inside ``env.reward_range``, and equal the sum of
  ``info["reward_terms"]``;
* ``step`` after the end raises, and ``reset`` after the end works;
* every tool's JSON schema is a valid schema and tool names are unique.

Example:
    >>> import gymnasium as gym, agent_gym
    >>> from agent_gym.testing import check_text_env
    >>> check_text_env(gym.make("AgentR1/Calculator-v0"))  # doctest: +SKIP

Hypothesis strategies for adversarial actions live in
:mod:`agent_gym.testing.strategies`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import jsonschema
import numpy as np
from gymnasium.utils.env_checker import check_env, data_equivalence

from agent_gym.core.env import EpisodeOverError, ToolEnv
from agent_gym.core.tool import Tool

__all__ = ["check_step", "check_text_env", "random_call", "random_episode_actions", "run_episode"]


def check_step(env: ToolEnv[Any], obs: str, reward: float, terminated: bool, truncated: bool, info: dict) -> None:
    """Assert the invariants of one ``step`` result; the messages name the bug."""
    assert env.observation_space.contains(obs), f"observation of length {len(obs)} is not in {env.observation_space}"
    assert isinstance(reward, float) and math.isfinite(reward), f"reward must be a finite float, got {reward!r}"
    low, high = env.reward_range
    assert low - 1e-9 <= reward <= high + 1e-9, f"reward {reward} outside reward_range {env.reward_range}"
    terms = info.get("reward_terms")
    assert isinstance(terms, dict), "info['reward_terms'] must be a dict of named reward parts"
    assert math.isclose(sum(terms.values()), reward, abs_tol=1e-9), (
        f"reward terms {terms} sum to {sum(terms.values())}, not to the reward {reward}"
    )
    assert isinstance(info.get("tool_calls"), list), "info['tool_calls'] must be a list"
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    if terminated:
        assert info.get("stop_reason"), "a terminated step must name its info['stop_reason']"
        assert isinstance(info.get("metrics"), dict), "a terminated step must report info['metrics']"


def random_call(tool: Tool, rng: np.random.Generator) -> dict[str, Any]:
    """Arguments for ``tool`` that usually satisfy its schema (random strings, small ints)."""
    args: dict[str, Any] = {}
    for name, prop in tool.parameters.get("properties", {}).items():
        kind = prop.get("type")
        if "enum" in prop:
            args[name] = prop["enum"][int(rng.integers(len(prop["enum"])))]
        elif kind == "integer":
            args[name] = int(rng.integers(0, 10))
        elif kind == "number":
            args[name] = float(rng.normal())
        elif kind == "boolean":
            args[name] = bool(rng.integers(2))
        else:
            words = ["the", "film", "director", "born", "1", "+", "2", "SELECT", "name", "city", "count(*)"]
            args[name] = " ".join(rng.choice(words, size=int(rng.integers(1, 5))))
    return args


def random_episode_actions(env: ToolEnv[Any], rng: np.random.Generator) -> Callable[[], str]:
    """A policy mixing random text, well-formed random tool calls and answers."""

    def act() -> str:
        u = rng.random()
        tools = list(env.tools.values())
        if u < 0.3:
            return env.action_space.sample()
        if u < 0.85 and tools:
            t = tools[int(rng.integers(len(tools)))]
            return env.parser.format_call(t.name, random_call(t, rng))
        return env.parser.format_answer(str(rng.integers(100)))

    return act


def run_episode(
    env: gym.Env[str, str],
    policy: Callable[[], str],
    *,
    seed: int,
    options: dict[str, Any] | None = None,
    max_steps: int = 12,
) -> list[tuple[Any, ...]]:
    """Play one episode; returns ``[(obs, info), (action, obs, reward, term, trunc, info), ...]``."""
    obs, info = env.reset(seed=seed, options=options)
    record: list[tuple[Any, ...]] = [(obs, info)]
    for _ in range(max_steps):
        action = policy()
        obs, reward, terminated, truncated, info = env.step(action)
        record.append((action, obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return record


def check_text_env(
    env: gym.Env[str, str],
    *,
    seeds: Sequence[int] = (0, 1, 2),
    max_steps: int = 10,
    skip_gymnasium_checker: bool = False,
) -> None:
    """Run Gymnasium's checker and the text-agent checks; raise ``AssertionError`` on a bug.

    Args:
        env: The environment (wrapped or not; the checks use ``env.unwrapped``).
        seeds: Seeds of the trajectories checked for determinism and invariants.
        max_steps: Steps per checked trajectory.
        skip_gymnasium_checker: Skip :func:`gymnasium.utils.env_checker.check_env`.
    """
    base = env.unwrapped
    assert isinstance(base, ToolEnv), f"expected a ToolEnv, got {type(base).__name__}"
    if not skip_gymnasium_checker:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_env(base, skip_render_check=base.render_mode is None)
    low, high = base.reward_range
    assert math.isfinite(low) and math.isfinite(high) and low <= high, f"bad reward_range {base.reward_range}"

    for seed in seeds:
        runs = []
        for _ in range(2):
            base.reset(seed=seed)  # makes env.tools/parser available to the policy
            base.action_space.seed(seed)
            policy = random_episode_actions(base, np.random.default_rng(seed))
            runs.append(run_episode(base, policy, seed=seed, max_steps=max_steps))
        first, second = runs
        assert len(first) == len(second), f"seed {seed}: episode lengths differ ({len(first)} vs {len(second)})"
        for i, (a, b) in enumerate(zip(first, second, strict=True)):
            assert data_equivalence(a, b), f"seed {seed}: step {i} differs between two runs with the same seed"
        obs0, info0 = first[0]
        assert base.observation_space.contains(obs0), "reset observation is not in the observation space"
        assert isinstance(info0.get("messages"), list), "info['messages'] must be a list of chat messages"
        for _action, obs, reward, terminated, truncated, info in first[1:]:
            check_step(base, obs, reward, terminated, truncated, info)
        if first[-1][3]:  # terminated: step must now refuse
            try:
                base.step("<answer>again</answer>")
            except EpisodeOverError:
                pass
            else:
                raise AssertionError("step() after termination must raise EpisodeOverError")
        obs, _ = base.reset(seed=seed)
        assert base.observation_space.contains(obs), "reset after an episode returned an invalid observation"

    names = [t.name for t in base.tools.values()]
    assert len(names) == len(set(names)), f"tool names must be unique: {names}"
    for t in base.tools.values():
        jsonschema.Draft202012Validator.check_schema(t.schema()["function"]["parameters"])
        assert t.description, f"tool {t.name!r} needs a description"

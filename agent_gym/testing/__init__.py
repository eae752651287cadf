"""Conformance kit for text environments (product code, for your envs too).

:func:`check_text_env` runs Gymnasium's :func:`~gymnasium.utils.env_checker.check_env`
and then drives whole episodes *to their end* through the env as given
(wrappers included), checking what a text agent environment needs on top:

* observations are in the observation space after ``reset`` and every ``step``;
* rewards are finite floats inside ``env.reward_range`` and equal the sum of
  ``info["reward_terms"]``, whose names are the rubric's terms; reward terms
  stay inside their declared bounds;
* ``score_answer`` returns finite scores in ``[0, 1]`` (checked on every
  answer the kit gives, before the env scores it);
* a terminated step names its ``stop_reason`` and reports ``metrics``; a
  truncated step names its ``stop_reason`` too (``"max_turns"``, set by
  :class:`~agent_gym.wrappers.RecordStopReason`, which
  :func:`agent_gym.register_env` adds: an id registered with plain
  ``gymnasium.register`` fails here);
* whole trajectories are deterministic under a seed (observations, rewards,
  infos), noise included;
* ``step`` after the end (``terminated`` or ``truncated``) raises
  :class:`~agent_gym.core.env.EpisodeOverError`, and ``reset`` after the end works;
* every tool's JSON schema is a valid schema and tool names are unique;
* ``info["history"]`` only grows, by exactly ``info["new_messages"]``, and
  ``info["messages"]`` is a faithful view of it under the env's context policy
  (:func:`check_view`), so ``check_text_env(gym.make(env_id, context=policy))``
  checks a user's policy on real episodes;
* every tool takes empty, whitespace-only, missing and wrongly typed arguments
  (:func:`check_odd_arguments`) with every step invariant above kept.

Each episode is played by a seeded random policy that mixes random text,
schema-valid tool calls and answers, and answers at its last step, so every
episode ends (by an answer or a time limit); when the env has an oracle, one
more episode is played by the oracle. When the env has a turn limit (a
``TimeLimit`` among its wrappers, as every registered id has), one more
episode is played by a policy that never answers, to that limit, so that
truncation is always checked: a truncated step names its ``stop_reason`` and
``step`` after it raises. A broken invariant is an
``AssertionError`` whose message names it; an exception the env raises while
scoring (:class:`~agent_gym.core.rubric.RewardError`) is reported the same way.

:func:`check_copies` checks that an env pickles and deep-copies, before
``reset`` and mid-episode, and that the copy goes on exactly like the original.

:func:`check_context_policy` checks a context policy on histories you give it
(e.g. :func:`agent_gym.testing.strategies.histories`): deterministic, the
history left as it was, and each view faithful (:func:`check_view`).

Example:
    >>> import gymnasium as gym, agent_gym
    >>> from agent_gym.testing import check_text_env
    >>> check_text_env(gym.make("AgentR1/Calculator-v0"))

Hypothesis strategies (hostile actions, and actions that reach the whole MDP)
live in :mod:`agent_gym.testing.strategies` (``pip install 'agent-r1-gym[testing]'``).
"""

from __future__ import annotations

import copy
import math
import pickle
import warnings
from collections.abc import Callable, Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import jsonschema
import numpy as np
from gymnasium.utils.env_checker import check_env, data_equivalence

from agent_gym.core.env import EpisodeOverError, ToolEnv
from agent_gym.core.info import ChatMessage
from agent_gym.core.rubric import RewardError
from agent_gym.core.tool import Tool
from agent_gym.testing.arguments import odd_arguments
from agent_gym.testing.views import check_context_policy, check_view

__all__ = [
    "check_answer_scores",
    "check_context_policy",
    "check_copies",
    "check_odd_arguments",
    "check_step",
    "check_text_env",
    "check_view",
    "odd_arguments",
    "random_call",
    "random_episode_actions",
    "run_episode",
]

Record = list[tuple[Any, ...]]


def check_step(
    env: ToolEnv[Any], obs: str, reward: SupportsFloat, terminated: bool, truncated: bool, info: dict
) -> None:
    """Assert the invariants of one ``step`` result; the messages name the broken invariant."""
    assert env.observation_space.contains(obs), f"observation of length {len(obs)} is not in {env.observation_space}"
    assert isinstance(reward, float) and math.isfinite(reward), f"reward must be a finite float, got {reward!r}"
    low, high = env.reward_range
    assert low - 1e-9 <= reward <= high + 1e-9, f"reward {reward} outside reward_range {env.reward_range}"
    terms = info.get("reward_terms")
    assert isinstance(terms, dict), "info['reward_terms'] must be a dict of named reward parts"
    names = [t.name for t in env.rubric.terms]
    assert list(terms) == names, f"info['reward_terms'] names {list(terms)} are not the rubric's terms {names}"
    assert math.isclose(sum(terms.values()), reward, abs_tol=1e-9), (
        f"reward terms {terms} sum to {sum(terms.values())}, not to the reward {reward}"
    )
    assert isinstance(info.get("tool_calls"), list), "info['tool_calls'] must be a list"
    assert isinstance(terminated, bool) and isinstance(truncated, bool), "terminated and truncated must be bools"
    if terminated:
        assert info.get("stop_reason"), "a terminated step must name its info['stop_reason']"
        assert isinstance(info.get("metrics"), dict), "a terminated step must report info['metrics']"
    elif truncated:
        assert info.get("stop_reason"), (
            "a truncated step must name its info['stop_reason'] (e.g. 'max_turns'): register the id with "
            "agent_gym.register_env, or wrap the env in agent_gym.wrappers.RecordStopReason outside its TimeLimit"
        )


def check_answer_scores(env: ToolEnv[Any], answer: str) -> None:
    """Assert that ``env.score_answer`` gives finite scores in ``[0, 1]`` for ``answer`` on the current task."""
    state = env.state
    assert state is not None, "check_answer_scores needs a running episode"
    scores = env.score_answer(state.task, answer)
    assert isinstance(scores, dict) and scores, f"score_answer must return a non-empty dict, got {scores!r}"
    for name, value in scores.items():
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
        assert ok and 0.0 <= value <= 1.0, (
            f"score bounds: score_answer must return scores in [0, 1], got {name}={value!r} for answer {answer!r}"
        )


def random_call(tool: Tool, rng: np.random.Generator) -> dict[str, Any]:
    """Arguments for ``tool`` that usually satisfy its schema.

    Strings are 1-4 words from a small vocabulary with text for every built-in tool; integers are 0-9,
    numbers standard normal, booleans fair coins, enums a uniform member.
    """
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


def random_episode_actions(
    env: ToolEnv[Any], rng: np.random.Generator, *, answer_at: int | None = None, answers: bool = True
) -> Callable[[], str]:
    """A policy mixing random text, well-formed random tool calls and answers.

    Args:
        env: The (unwrapped) env, already reset (its tools and parser are used).
        rng: The policy's random generator.
        answer_at: If set, the policy's ``answer_at``-th action (1-based) and
            any later one is an answer, so the episode ends.
        answers: False: never answer; the policy then makes only random tool calls (plain text when the
            env has no tools), so that a limit, not the agent, ends the episode (``answer_at`` is ignored).
    """
    count = 0

    def act() -> str:
        nonlocal count
        count += 1
        u = rng.random()
        tools = list(env.tools.values())
        if not answers:
            u = 0.5 if tools else 0.0
        elif answer_at is not None and count >= answer_at:
            u = 1.0
        if u < 0.3:
            return env.action_space.sample() if answers else "thinking; no answer yet"
        if u < 0.8 and tools:
            t = tools[int(rng.integers(len(tools)))]
            try:
                return env.parser.format_call(t.name, random_call(t, rng))
            except KeyError:  # a tool the tag format cannot write
                return env.action_space.sample()
        return env.parser.format_answer(str(rng.integers(100)))

    return act


def run_episode(
    env: gym.Env[str, str],
    policy: Callable[[], str],
    *,
    seed: int,
    options: dict[str, Any] | None = None,
    max_steps: int = 12,
) -> Record:
    """Play one episode; returns ``[(obs, info), (action, obs, reward, term, trunc, info), ...]``."""
    obs, info = env.reset(seed=seed, options=options)
    record: Record = [(obs, info)]
    for _ in range(max_steps):
        action = policy()
        obs, reward, terminated, truncated, info = env.step(action)
        record.append((action, obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return record


def _play_checked(env: gym.Env[str, str], policy: Callable[[], str], *, seed: int, max_steps: int) -> Record:
    """:func:`run_episode` with every step checked (answers' scores first) and scoring errors as assertions."""
    base = env.unwrapped
    assert isinstance(base, ToolEnv)
    obs, info = env.reset(seed=seed)
    assert base.observation_space.contains(obs), f"seed {seed}: the reset observation is not in the observation space"
    assert isinstance(info.get("messages"), list), "info['messages'] must be a list of chat messages"
    history = _check_history(info, [], f"seed {seed}, reset: ")
    record: Record = [(obs, info)]
    for turn in range(1, max_steps + 1):
        action = policy()
        parsed = base.parser.parse(action) if isinstance(action, str) else None
        if parsed is not None and parsed.is_final and len(action) <= base.action_space.max_length:
            check_answer_scores(base, parsed.answer or "")
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except RewardError as exc:
            raise AssertionError(
                f"seed {seed}, step {turn}: a reward term broke its contract (a finite number inside its "
                f"declared bounds): {exc}"
            ) from exc
        check_step(base, obs, reward, terminated, truncated, info)
        history = _check_history(info, history, f"seed {seed}, step {turn}: ")
        record.append((action, obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return record


def _step_checked(env: gym.Env[str, str], action: str, where: str) -> tuple[Any, ...]:
    """One ``env.step`` with the step invariants checked; a scoring error or an exception is an assertion."""
    base = env.unwrapped
    assert isinstance(base, ToolEnv)
    try:
        result = env.step(action)
    except RewardError as exc:
        raise AssertionError(
            f"{where}a reward term broke its contract (a finite number inside its declared bounds): {exc}"
        ) from exc
    except Exception as exc:
        raise AssertionError(
            f"{where}step() raised {type(exc).__name__}: {exc} (a tool's failure must be a result the agent reads)"
        ) from exc
    check_step(base, *result)
    return result


def check_odd_arguments(env: gym.Env[str, str], *, seed: int = 0) -> int:
    """Call every tool with empty, whitespace-only, missing and wrongly typed arguments; assert each step's invariants.

    Each argument set of :func:`~agent_gym.testing.arguments.odd_arguments` is the first action of a fresh
    episode (``reset(seed=seed)``), written by the env's own parser; the step must keep every invariant
    of :func:`check_step` (a finite reward inside ``reward_range``, the terms summing to it, ...) and must
    not raise: a tool that cannot use its arguments returns an error result. Argument sets the parser
    cannot write (the tag format writes one argument) are skipped.

    Args:
        env: The environment (wrapped or not); the steps go through ``env`` as given.
        seed: The seed of every episode.

    Returns:
        How many argument sets were sent.

    Raises:
        AssertionError: Naming the tool, the argument set and the broken invariant (or the exception).
    """
    base = env.unwrapped
    assert isinstance(base, ToolEnv), f"expected a ToolEnv, got {type(base).__name__}"
    env.reset(seed=seed)
    tools = list(base.tools.values())
    sent = 0
    for t in tools:
        for label, arguments in odd_arguments(t, random_call(t, np.random.default_rng(seed))):
            try:
                action = base.parser.format_call(t.name, arguments)
            except KeyError:  # the tag format writes one named argument; it cannot leave it out
                continue
            env.reset(seed=seed)
            _step_checked(env, action, f"seed {seed}, tool {t.name!r} called with {label}: ")
            sent += 1
    return sent


def _turn_limit(env: gym.Env[str, str]) -> int | None:
    """The ``max_episode_steps`` of a ``TimeLimit`` among ``env``'s wrappers (None: no turn limit)."""
    layer: Any = env
    while isinstance(layer, gym.Wrapper):
        if isinstance(layer, gym.wrappers.TimeLimit):
            return int(layer._max_episode_steps)
        layer = layer.env
    return None


def _check_truncation(env: gym.Env[str, str], limit: int, seeds: Sequence[int]) -> None:
    """Play episodes by a policy that never answers until one is truncated at the turn limit; check its end.

    An env that ends every such episode otherwise (a tool that finishes it, ``on_no_action="end"``) cannot be
    truncated by this policy: a warning says that the truncation checks did not run.
    """
    base = env.unwrapped
    assert isinstance(base, ToolEnv)
    ends = []
    for seed in seeds:
        base.reset(seed=seed)
        base.action_space.seed(seed)
        policy = random_episode_actions(base, np.random.default_rng(seed), answers=False)
        record = _play_checked(env, policy, seed=seed, max_steps=limit)
        *_, terminated, truncated, info = record[-1]
        assert terminated or truncated, (
            f"seed {seed}: the episode went on past the turn limit of {limit} steps without being truncated"
        )
        if truncated:
            _check_end(env, record, seed)
            return
        ends.append(str(info.get("stop_reason")))
    warnings.warn(
        f"check_text_env: no episode reached the turn limit of {limit} steps without an answer (each ended "
        f"otherwise: {', '.join(ends)}), so truncation was not checked",
        stacklevel=3,
    )


def _check_history(info: dict[str, Any], before: list[ChatMessage], where: str) -> list[ChatMessage]:
    """``info["history"]`` is ``before`` plus ``info["new_messages"]``, and ``info["messages"]`` views it faithfully."""
    history = info.get("history")
    assert isinstance(history, list), f"{where}info['history'] must be the whole history, a list of chat messages"
    assert history[: len(before)] == before and history[len(before) :] == info.get("new_messages"), (
        f"{where}info['history'] must be the previous history followed by info['new_messages'] (append-only)"
    )
    check_view(info["messages"], history, where=where)
    return history


def _check_end(env: gym.Env[str, str], record: Record, seed: int) -> None:
    """After the end (terminated or truncated), ``step`` raises."""
    *_, terminated, truncated, _info = record[-1]
    if not (terminated or truncated):
        return
    try:
        env.step("<answer>again</answer>")
    except EpisodeOverError:
        return
    end = "termination" if terminated else "truncation"
    raise AssertionError(f"seed {seed}: step() after {end} must raise EpisodeOverError")


def _has_oracle(base: ToolEnv[Any]) -> bool:
    return type(base).oracle_action is not ToolEnv.oracle_action


def check_text_env(
    env: gym.Env[str, str],
    *,
    seeds: Sequence[int] = (0, 1, 2),
    max_steps: int = 10,
    skip_gymnasium_checker: bool = False,
) -> None:
    """Run Gymnasium's checker and the text-agent checks; raise ``AssertionError`` on a bug.

    Args:
        env: The environment (wrapped or not). Episodes run through ``env`` as
            given; the policies read ``env.unwrapped``'s tools and parser.
        seeds: Seeds of the random-policy episodes (each played twice, for determinism).
        max_steps: Steps per episode; the random policy answers at the last one.
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
            base.reset(seed=seed)  # makes the tools and parser available to the policy
            base.action_space.seed(seed)
            policy = random_episode_actions(base, np.random.default_rng(seed), answer_at=max_steps)
            runs.append(_play_checked(env, policy, seed=seed, max_steps=max_steps))
            _check_end(env, runs[-1], seed)
        first, second = runs
        assert len(first) == len(second), f"seed {seed}: episode lengths differ ({len(first)} vs {len(second)})"
        for i, (a, b) in enumerate(zip(first, second, strict=True)):
            assert data_equivalence(a, b), f"seed {seed}: step {i} differs between two runs with the same seed"
    if _has_oracle(base):
        base.reset(seed=seeds[0] if seeds else 0)
        record = _play_checked(env, base.oracle_action, seed=seeds[0] if seeds else 0, max_steps=max_steps)
        _check_end(env, record, seeds[0] if seeds else 0)
    limit = _turn_limit(env)
    if limit is not None:
        _check_truncation(env, limit, list(seeds) or [0])
    check_odd_arguments(env, seed=seeds[0] if seeds else 0)
    obs, _ = env.reset(seed=0)
    assert base.observation_space.contains(obs), "reset after an episode returned an invalid observation"

    names = [t.name for t in base.tools.values()]
    assert len(names) == len(set(names)), f"tool names must be unique: {names}"
    for t in base.tools.values():
        jsonschema.Draft202012Validator.check_schema(t.schema()["function"]["parameters"])
        assert t.description, f"tool {t.name!r} needs a description"


def check_copies(env: gym.Env[str, str], *, seed: int = 0, max_steps: int = 6) -> None:
    """Assert that ``env`` pickles and deep-copies before ``reset`` and mid-episode, and copies behave the same.

    Before every step of one episode (the oracle's when the env has one, else
    a seeded random policy's), a new pickled and a new deep-copied twin is
    made; every twin made so far takes the same action as the original, and
    must return equal observations, rewards, flags and infos, to the end.
    """
    base = env.unwrapped
    assert isinstance(base, ToolEnv), f"expected a ToolEnv, got {type(base).__name__}"
    clones: dict[str, Callable[[Any], Any]] = {
        "pickle": lambda e: pickle.loads(pickle.dumps(e)),
        "deepcopy": copy.deepcopy,
    }
    for how, clone in clones.items():
        fresh = clone(env)
        assert data_equivalence(fresh.reset(seed=seed), env.reset(seed=seed)), f"{how} before reset: resets differ"
    policy = _copy_policy(base, seed)
    twins: list[tuple[str, int, Any]] = []
    for turn in range(1, max_steps + 1):
        twins += [(how, turn, clone(env)) for how, clone in clones.items()]
        action = policy()
        mine = env.step(action)
        for how, made, twin in twins:
            assert data_equivalence(mine, twin.step(action)), (
                f"{how} made before step {made}: step {turn} differs from the original's"
            )
        if mine[2] or mine[3]:
            return


def _copy_policy(base: ToolEnv[Any], seed: int) -> Callable[[], str]:
    if _has_oracle(base):
        return base.oracle_action
    base.action_space.seed(seed)  # its random text too, so a failure replays
    return random_episode_actions(base, np.random.default_rng(seed))

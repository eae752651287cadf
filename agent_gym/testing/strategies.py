"""Hypothesis strategies for agent actions (reuse them on your envs).

Two families:

* **hostile** actions (:mod:`agent_gym.testing.hostile`, re-exported here), each a class that once
  crashed or stalled a parser:
  :func:`huge_number_actions` (integer literals over Python's 4,300-digit
  limit, ``1e999``, ``NaN``), :func:`deep_json_actions` (arguments nested
  past the depth limit, as objects, arrays or double-encoded strings, around
  the ~1,000 recursion limit too), :func:`repeated_tag_actions` (one tag
  repeated up to 20,000 times), :func:`megabyte_actions` (1 MiB of one
  shape), :func:`mixed_call_actions` (valid and malformed calls in one
  action, more than four of them), :func:`odd_argument_actions` (calls whose
  arguments are empty, whitespace-only, missing or of the wrong type);
  :func:`actions` draws from all of them plus random text;
* actions that **reach the whole MDP**: :func:`next_action` draws the next
  action from the env's *current* state - calls with the tools' real argument
  names and values (words of the question and of the last result), the same
  calls with one argument empty, whitespace-only, missing or wrongly typed
  (:func:`odd_tool_arguments`), the oracle's evidence-finding call, the gold
  answer and near misses, answers that end the episode, and now and then a
  hostile action;
  :func:`play_episode` plays a whole episode with them and labels its
  coverage with :func:`hypothesis.event` / :func:`hypothesis.target`.

And :func:`histories` (:mod:`agent_gym.testing.histories`, re-exported here): episode histories shaped
like a ToolEnv's, for testing context policies (:func:`agent_gym.testing.check_context_policy`).

Example:
    >>> from hypothesis import given, strategies as st
    >>> from agent_gym.testing.strategies import actions, play_episode
    >>> @given(actions(tool_names=["search"]))
    ... def test_never_crashes(action): ...
    >>> @given(st.data())
    ... def test_episodes(data):
    ...     coverage = play_episode(data, env)
"""

from __future__ import annotations

import copy
import math
import re
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

try:
    from hypothesis import event, target
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - exercised only without the test extra
    raise ImportError("agent_gym.testing.strategies needs hypothesis: pip install 'agent-r1-gym[testing]'") from exc

from agent_gym.core.env import ToolEnv
from agent_gym.core.history import Role
from agent_gym.core.tool import Tool
from agent_gym.testing.arguments import odd_values
from agent_gym.testing.histories import histories
from agent_gym.testing.hostile import (
    _TAGS,
    MIB,
    deep_json_actions,
    hostile_actions,
    huge_number_actions,
    json_values,
    megabyte_actions,
    mixed_call_actions,
    odd_argument_actions,
    repeated_tag_actions,
    tool_call_actions,
)

__all__ = [
    "MIB",
    "EpisodeCoverage",
    "actions",
    "deep_json_actions",
    "histories",
    "hostile_actions",
    "huge_number_actions",
    "json_values",
    "megabyte_actions",
    "mixed_call_actions",
    "next_action",
    "odd_argument_actions",
    "odd_tool_arguments",
    "play_episode",
    "repeated_tag_actions",
    "schema_arguments",
    "tool_call_actions",
]

_WORD = re.compile(r"[\w'.+*/()-]+")


def actions(tool_names: Sequence[str] = ("search",), max_size: int = 400) -> st.SearchStrategy[str]:
    """Any string an agent could write: empty, huge, binary-looking, broken JSON, several calls,
    nested or unclosed tags, answers mixed with calls, and every hostile class."""
    fragments = st.sampled_from(_TAGS) | st.text(max_size=30) | tool_call_actions(tool_names)
    mixed = st.lists(fragments, max_size=8).map("".join)
    tags = st.builds(
        lambda t, q: f"<{t}>{q}</{t}>", st.sampled_from(["search", "answer", *tool_names]), st.text(max_size=40)
    )
    binary = st.binary(max_size=200).map(lambda b: b.decode("latin-1"))
    return st.one_of(
        st.text(max_size=max_size),
        mixed,
        tags,
        binary,
        tool_call_actions(tool_names),
        hostile_actions(tool_names),
        st.just(""),
    )


# ------------------------------------------------------------------- reaching the whole MDP
def _words(env: ToolEnv[Any]) -> list[str]:
    """Words of the question and of the latest tool result: the agent's vocabulary right now."""
    state = env.state
    assert state is not None, "call reset() first"
    texts = [m.content for m in state.history.messages[1:2]]
    texts += [m.content for m in state.history.messages[2:] if m.role is Role.TOOL][-1:]
    words = [w.strip(".,") for text in texts for w in _WORD.findall(text)]
    return [w for w in words if w] or ["x"]


def _phrases(words: Sequence[str]) -> st.SearchStrategy[str]:
    """Contiguous spans of 1-6 of ``words``."""
    return st.builds(lambda i, n: " ".join(words[i : i + n]), st.integers(0, len(words) - 1), st.integers(1, 6)).filter(
        bool
    )


def _value(prop: Mapping[str, Any], words: Sequence[str]) -> st.SearchStrategy[Any]:
    if "enum" in prop:
        return st.sampled_from(list(prop["enum"]))
    kind = prop.get("type")
    if kind == "integer":
        return st.integers(-10, 100)
    if kind == "number":
        return st.floats(-100, 100, allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(_value(prop.get("items", {}), words), max_size=3)
    return _phrases(words)


def schema_arguments(tool: Tool, words: Sequence[str] = ("x",)) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments for ``tool`` from its JSON schema: its real argument names, values built from ``words``.

    Required arguments are always present, optional ones sometimes.
    """
    props = dict(tool.parameters.get("properties", {}))
    required = set(tool.parameters.get("required", []))
    fixed = {k: _value(v, words) for k, v in props.items() if k in required}
    optional = {k: _value(v, words) for k, v in props.items() if k not in required}
    return st.fixed_dictionaries(fixed, optional=optional)


_GOLD: weakref.WeakKeyDictionary[ToolEnv[Any], dict[int, str | None]] = weakref.WeakKeyDictionary()


def _has_oracle(env: ToolEnv[Any]) -> bool:
    return type(env).oracle_action is not ToolEnv.oracle_action


def gold_answer(env: ToolEnv[Any], max_steps: int = 30) -> str | None:
    """The current task's gold answer as the oracle writes it (played out on a deep copy; cached per task).

    ``None`` when the env has no oracle, cannot be deep-copied, or the oracle
    does not answer within ``max_steps``.
    """
    state = env.state
    if state is None or not _has_oracle(env):
        return None
    known = _GOLD.setdefault(env, {})
    if state.task_index not in known:
        known[state.task_index] = _play_oracle(env, max_steps)
    return known[state.task_index]


def _play_oracle(env: ToolEnv[Any], max_steps: int) -> str | None:
    try:
        twin = copy.deepcopy(env)
    except TypeError:  # an env that cannot be copied mid-episode: only the live oracle's answers then
        return None
    for _ in range(max_steps):
        action = twin.oracle_action()
        parsed = twin.parser.parse(action)
        if parsed.is_final:
            return parsed.answer
        _, _, terminated, truncated, _ = twin.step(action)
        if terminated or truncated:
            break
    return None


def _answers(env: ToolEnv[Any], words: Sequence[str]) -> st.SearchStrategy[str]:
    gold = gold_answer(env)
    near = [gold, gold.upper(), f" {gold} ", f"{gold} {words[0]}", gold[:-1]] if gold else []
    text = st.sampled_from(near) | _phrases(words) if near else _phrases(words)
    return text.map(env.parser.format_answer)


@st.composite
def odd_tool_arguments(draw: st.DrawFn, tool: Tool, words: Sequence[str] = ("x",)) -> dict[str, Any]:
    """Arguments for ``tool`` with one thing wrong, the others drawn by :func:`schema_arguments`.

    One argument is chosen; half the time it is empty or whitespace-only (valid under a string schema, so
    it reaches the tool), a quarter of the time of another JSON type, a quarter of the time left out. The
    values are :func:`agent_gym.testing.arguments.odd_values`'s.
    """
    valid = draw(schema_arguments(tool, words))
    props: Mapping[str, Any] = tool.parameters.get("properties", {})
    if not props:
        return {}
    name = draw(st.sampled_from(sorted(props)))
    others = {k: v for k, v in valid.items() if k != name}
    values = odd_values(props[name])
    blanks = [v for v in values if isinstance(v, str) and not v.strip()]
    wrong = [v for v in values if v not in blanks]
    kind = draw(st.sampled_from(["blank", "blank", "wrong type", "missing"]))
    if kind == "missing":
        return others
    return {**others, name: draw(st.sampled_from(blanks if kind == "blank" else wrong))}


def _calls(env: ToolEnv[Any], words: Sequence[str], arguments: Any = schema_arguments) -> st.SearchStrategy[str]:
    writable = []
    for t in env.tools.values():
        try:
            env.parser.format_call(t.name, {p: "x" for p in t.parameters.get("properties", {})})
        except KeyError:  # the tag format writes only one-argument tools
            continue
        drawn = arguments(t, words)
        writable.append(drawn.map(lambda a, n=t.name: _format_call(env, n, a)).filter(bool))
    return st.one_of(writable) if writable else st.text(max_size=40)


def _format_call(env: ToolEnv[Any], name: str, arguments: Mapping[str, Any]) -> str:
    """The call in the env's own format; ``""`` when that format cannot write it (a tag without its argument)."""
    try:
        return env.parser.format_call(name, arguments)
    except KeyError:
        return ""


def next_action(env: gym.Env[str, str]) -> st.SearchStrategy[str]:
    """The next action, drawn from the env's current state (build it anew every step).

    About 35% the oracle's action (evidence-finding calls, then the gold
    answer) when the env has one; 20% a schema-valid call with words of the
    question or last result; 15% such a call with one argument empty,
    whitespace-only, missing or wrongly typed (:func:`odd_tool_arguments`);
    15% an answer (the gold one and near misses, or words); 10% several calls
    at once, some malformed; 5% a hostile action.
    """
    base = env.unwrapped
    assert isinstance(base, ToolEnv), f"expected a ToolEnv, got {type(base).__name__}"
    words = _words(base)
    calls = _calls(base, words)
    names = list(base.tools) or ["search"]
    args = [p for t in base.tools.values() for p in t.parameters.get("properties", {})] or ["query"]
    kinds: list[tuple[int, st.SearchStrategy[str]]] = []
    if _has_oracle(base):
        kinds.append((35, st.just(base.oracle_action())))
    kinds += [
        (20, calls),
        (15, _calls(base, words, odd_tool_arguments)),
        (15, _answers(base, words)),
        (10, st.lists(calls, min_size=1, max_size=5).map("".join) | mixed_call_actions(names, args, valid=calls)),
        (5, hostile_actions(names, args)),
    ]
    total = sum(w for w, _ in kinds)

    def pick(u: int) -> st.SearchStrategy[str]:
        for weight, strategy in kinds:
            if u < weight:
                return strategy
            u -= weight
        return kinds[-1][1]

    return st.integers(0, total - 1).flatmap(pick)


@dataclass
class EpisodeCoverage:
    """What one drawn episode reached.

    Attributes:
        steps: Steps taken.
        tool_ok: Steps in which some tool call succeeded.
        evidence_found: Gold evidence items found by the end.
        evidence_total: Gold evidence items of the task.
        terminated: The episode ended with an answer.
        truncated: A time limit ended it.
        correct: The answer's exact match was 1 (``None`` unless terminated).
        reward: The episode's undiscounted return.
    """

    steps: int = 0
    tool_ok: int = 0
    evidence_found: int = 0
    evidence_total: int = 0
    terminated: bool = False
    truncated: bool = False
    correct: bool | None = None
    reward: float = 0.0

    def label(self) -> None:
        """Report coverage to hypothesis (``--hypothesis-show-statistics`` prints it)."""
        event("evidence found" if self.evidence_found else "no evidence found")
        event("ended by an answer" if self.terminated else "truncated" if self.truncated else "not ended")
        if self.terminated:
            event("answered correctly" if self.correct else "answered wrongly")
        if self.evidence_total:
            target(self.evidence_found / self.evidence_total, label="evidence recall")
        target(self.reward, label="return")


def play_episode(
    data: st.DataObject, env: gym.Env[str, str], *, max_steps: int = 8, check: bool = True
) -> EpisodeCoverage:
    """Play one episode with actions from :func:`next_action`; task and seed are drawn too.

    Args:
        data: Hypothesis's ``st.data()`` object of the running test.
        env: The env, as ``gymnasium.make`` returns it or bare.
        max_steps: At most this many steps (a time limit may end it sooner).
        check: Assert :func:`agent_gym.testing.check_step` after every step.
    """
    from agent_gym.testing import check_step  # the kit imports nothing from here; avoid a cycle

    base = env.unwrapped
    assert isinstance(base, ToolEnv), f"expected a ToolEnv, got {type(base).__name__}"
    seed = data.draw(st.integers(0, 2**16), label="seed")
    index = data.draw(st.integers(0, base.num_tasks() - 1), label="task_index")
    env.reset(seed=seed, options={"task_index": index})
    cov = EpisodeCoverage()
    for turn in range(1, max_steps + 1):
        action = data.draw(next_action(env), label=f"action {turn}")
        obs, reward, terminated, truncated, info = env.step(action)
        if check:
            check_step(base, obs, reward, terminated, truncated, info)
        cov.steps, cov.reward = turn, cov.reward + float(reward)
        cov.tool_ok += any(c["ok"] for c in info["tool_calls"])
        cov.evidence_found, cov.evidence_total = info["evidence_found"], info["evidence_total"]
        cov.terminated, cov.truncated = terminated, truncated
        if terminated and "answer_em" in info["metrics"]:  # an env without EM leaves it None
            cov.correct = math.isclose(info["metrics"]["answer_em"], 1.0)
        if terminated or truncated:
            break
    cov.label()
    return cov

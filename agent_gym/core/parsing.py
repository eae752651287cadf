"""Action parsers: turn an agent's text into tool calls or a final answer.

Two protocols, chosen per environment with ``action_format=``:

* :class:`ToolCallParser` (``"tool_call"``) - Hermes / Qwen style
  ``<tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>``
  and a final ``<answer>...</answer>``;
* :class:`TagParser` (``"tags"``) - Search-R1 / Agent-R1 style
  ``<search>query</search>`` and ``<answer>...</answer>``.

Any string is a legal action. Parsing never raises: problems are collected
in :attr:`ParsedAction.errors`, the environment turns them into an error
observation and a format penalty.

The rule for several calls in one action: the first ``max_calls`` (4) calls
written are examined, in order; the well-formed ones run, the malformed ones
are refused, and every call after the ``max_calls``-th is refused unread. An
action with any refused call (or any other problem) is malformed, yet its
well-formed calls still run, and :attr:`ParsedAction.call_positions` says
which of the calls written they were, so feedback can say exactly what ran.

Parsing is linear in the text's length and bounded by sizes only (the
number of calls, :class:`~agent_gym.core.scanning.JsonLimits`), never by
wall-clock time, so the same text always parses the same way.

A :class:`ParsedAction` is the one boundary through which everything an
agent writes enters an episode (its text into the history, its calls'
arguments into tools and ``info``, its answer into scoring), so that is where
text becomes well-formed Unicode: valid JSON can spell a lone UTF-16
surrogate (``{"query": "\\ud800"}``) that no UTF-8 file, tokenizer or HTTP
body accepts, and every such code point is replaced with U+FFFD there
(:func:`~agent_gym.core.scanning.well_formed_text`), whichever parser built
the action.

Example:
    >>> p = ToolCallParser()
    >>> a = p.parse('<think>hm</think><tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>')
    >>> a.tool_calls[0].name, a.well_formed
    ('search', True)
    >>> p.parse("<tool_call>{oops</tool_call>").well_formed
    False
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from agent_gym.core.history import ToolCall
from agent_gym.core.scanning import (
    JsonLimits,
    count_blocks,
    decode_json,
    scan_blocks,
    well_formed_text,
    well_formed_value,
)

__all__ = [
    "ActionFormat",
    "ActionParser",
    "ParsedAction",
    "TagParser",
    "ToolCallParser",
    "make_parser",
]

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


class ActionFormat(StrEnum):
    """The action protocols an environment can speak."""

    TOOL_CALL = "tool_call"
    TAGS = "tags"


@dataclass(frozen=True)
class ParsedAction:
    """What an action asked for.

    Every string in it is well-formed Unicode: a lone surrogate in the text,
    in a call's name or arguments (decoded from a JSON escape such as
    ``"\\ud800"``), in the answer or in an error is replaced with U+FFFD when
    the action is made, so the history, ``info``, tokenizers and JSON-lines
    files all take it (see the module's docstring).

    Attributes:
        raw: The action text, unchanged but for lone surrogates.
        tool_calls: The calls to run, in order (possibly empty; possibly
            non-empty for a malformed action whose other calls were refused).
        answer: The final answer, if the action gave one.
        errors: Human-readable problems; empty iff the action is well formed.
        call_positions: For each entry of ``tool_calls``, its 1-based position
            among the calls the action wrote (default ``1..len(tool_calls)``).
        calls_written: How many calls the action wrote, run or refused
            (default ``len(tool_calls)``).
    """

    raw: str
    tool_calls: tuple[ToolCall, ...] = ()
    answer: str | None = None
    errors: tuple[str, ...] = field(default_factory=tuple)
    call_positions: tuple[int, ...] = ()
    calls_written: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "raw", well_formed_text(self.raw))
        if self.answer is not None:
            object.__setattr__(self, "answer", well_formed_text(self.answer))
        object.__setattr__(self, "errors", tuple(well_formed_text(e) for e in self.errors))
        object.__setattr__(self, "tool_calls", tuple(_well_formed_call(c) for c in self.tool_calls))
        if not self.call_positions:
            object.__setattr__(self, "call_positions", tuple(range(1, len(self.tool_calls) + 1)))
        if len(self.call_positions) != len(self.tool_calls):
            raise ValueError("call_positions needs one position per tool call")
        object.__setattr__(self, "calls_written", max(self.calls_written, len(self.tool_calls)))

    @property
    def well_formed(self) -> bool:
        return not self.errors

    @property
    def is_final(self) -> bool:
        """A well-formed final answer."""
        return self.answer is not None and not self.errors

    @property
    def refused_positions(self) -> tuple[int, ...]:
        """1-based positions of the calls written but not run."""
        return tuple(i for first, last in self.refused_ranges() for i in range(first, last + 1))

    def ran_ranges(self) -> list[tuple[int, int]]:
        """``(first, last)`` runs of the positions of the calls that run."""
        return _runs(self.call_positions)

    def refused_ranges(self) -> list[tuple[int, int]]:
        """``(first, last)`` runs of refused positions; cheap even for thousands of calls written."""
        ran = set(self.call_positions)
        head = max(ran, default=0)
        runs = _runs([i for i in range(1, head) if i not in ran])
        if self.calls_written > head:  # every call after the last one that ran was refused: one run
            runs.append((head + 1, self.calls_written))
        return runs


class ActionParser(Protocol):
    """Parses actions and writes them (for scripted policies and prompts)."""

    format: ActionFormat
    max_calls: int

    def parse(self, text: str, turn: int = 0) -> ParsedAction: ...

    def format_call(self, name: str, arguments: Mapping[str, Any]) -> str: ...

    def format_answer(self, answer: str) -> str: ...

    def instructions(self, tools: Sequence[Any]) -> str: ...


def _well_formed_call(call: ToolCall) -> ToolCall:
    """``call`` with lone surrogates replaced in its name, id and arguments (the same object when it has none)."""
    name, call_id, arguments = well_formed_text(call.name), well_formed_text(call.id), well_formed_value(call.arguments)
    if name is call.name and call_id is call.id and arguments is call.arguments:
        return call
    return ToolCall(name, arguments, id=call_id)


def _runs(positions: Sequence[int]) -> list[tuple[int, int]]:
    """Increasing positions -> ``(first, last)`` runs of consecutive ones."""
    runs: list[list[int]] = []
    for p in positions:
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return [(a, b) for a, b in runs]


def not_a_string(text: object) -> ParsedAction:
    """The parse of a non-``str`` action (its type is named; its value is never rendered)."""
    kind = type(text).__name__
    return ParsedAction(raw=f"<a {kind}, not a str>", errors=(f"an action must be a str, got {kind}",))


def _answer(text: str) -> tuple[str | None, list[str]]:
    found = scan_blocks(text, ANSWER_OPEN, ANSWER_CLOSE, limit=2)
    total = count_blocks(text, ANSWER_OPEN, ANSWER_CLOSE) if len(found) > 1 else len(found)
    errors = []
    if total > 1:
        errors.append(f"give exactly one <answer>...</answer>, found {total}")
    if text.count(ANSWER_OPEN) != total:
        errors.append("<answer> is not closed with </answer>")
    return (found[0][1].strip() if found else None), errors


def _blocks(text: str, open_tag: str, close_tag: str, limit: int) -> tuple[list[tuple[int, str]], int]:
    """The first ``limit`` blocks and how many there are in all."""
    found = scan_blocks(text, open_tag, close_tag, limit=limit + 1)
    return found[:limit], (count_blocks(text, open_tag, close_tag) if len(found) > limit else len(found))


def _check_max_calls(max_calls: int) -> None:
    if isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 1:
        raise ValueError(f"max_calls must be a positive int (got {max_calls!r})")


def _beyond_limit(first: int, last: int, max_calls: int) -> str:
    which = f"tool call {first}" if first == last else f"tool calls {first}-{last}"
    return f"{which}: over the limit of {max_calls} calls per action, not read"


@dataclass(frozen=True)
class ToolCallParser:
    """Hermes / Qwen ``<tool_call>`` JSON blocks plus ``<answer>``.

    Attributes:
        max_calls: Only the first this many calls of an action are read; the
            well-formed ones among them run (see the module docstring).
        json_limits: Size budgets for the JSON inside a call.
    """

    max_calls: int = 4
    json_limits: JsonLimits = field(default_factory=JsonLimits)
    format: ActionFormat = ActionFormat.TOOL_CALL

    def __post_init__(self) -> None:
        _check_max_calls(self.max_calls)

    def parse(self, text: str, turn: int = 0) -> ParsedAction:
        if not isinstance(text, str):
            return not_a_string(text)
        answer, errors = _answer(text)
        blocks, written = _blocks(text, CALL_OPEN, CALL_CLOSE, self.max_calls)
        if text.count(CALL_OPEN) != written:
            errors.append("every <tool_call> must be closed with </tool_call>")
        calls: list[ToolCall] = []
        positions: list[int] = []
        for i, (_, block) in enumerate(blocks, start=1):
            call, problem = self._decode(block, f"call_{turn}_{len(calls)}")
            if call is None:
                errors.append(f"tool call {i}: {problem}")
            else:
                calls.append(call)
                positions.append(i)
        if written > self.max_calls:
            errors.append(_beyond_limit(self.max_calls + 1, written, self.max_calls))
        if answer is not None and blocks:
            errors.append("give either tool calls or a final <answer>, not both (the answer was not taken)")
        if answer is None and not blocks and not errors:
            errors.append("no <tool_call> and no <answer> found")
        return ParsedAction(text, tuple(calls), answer, tuple(errors), tuple(positions), written)

    def _decode(self, block: str, call_id: str) -> tuple[ToolCall | None, str | None]:
        obj, problem = decode_json(block.strip(), self.json_limits)
        if problem is not None:
            return None, problem
        if not isinstance(obj, dict):
            return None, "expected a JSON object with 'name' and 'arguments'"
        name = obj.get("name")
        if not isinstance(name, str) or not name:
            return None, "missing string field 'name'"
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):  # some models double-encode the arguments
            args, problem = decode_json(args, self.json_limits)
            if problem is not None:
                return None, f"'arguments' is a string that is not a JSON object: {problem}"
        if not isinstance(args, dict):
            return None, "'arguments' must be a JSON object"
        return ToolCall(name=name, arguments=args, id=call_id), None

    def format_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        payload = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
        return f"<tool_call>\n{payload}\n</tool_call>"

    def format_answer(self, answer: str) -> str:
        return f"<answer>{answer}</answer>"

    def instructions(self, tools: Sequence[Any]) -> str:
        schemas = "\n".join(json.dumps(t.schema(), ensure_ascii=False) for t in tools)
        return (
            "You may call tools. Their signatures, as JSON schemas, are:\n"
            f"<tools>\n{schemas}\n</tools>\n"
            "To call a tool, write a JSON object inside <tool_call></tool_call> tags:\n"
            '<tool_call>\n{"name": <tool-name>, "arguments": <args-json-object>}\n</tool_call>\n'
            "Tool results come back in the next message. When you know the answer, write it "
            "inside <answer></answer> tags, e.g. <answer>Paris</answer>, with no tool call in "
            "that message."
        )


@dataclass(frozen=True)
class TagParser:
    """Search-R1 style tags: ``<tool>argument</tool>`` plus ``<answer>``.

    Attributes:
        tags: Maps a tag to ``(tool name, argument name)``; the default maps
            ``<search>q</search>`` to ``search(query=q)``.
    """

    tags: Mapping[str, tuple[str, str]] = field(default_factory=lambda: {"search": ("search", "query")})
    max_calls: int = 4
    format: ActionFormat = ActionFormat.TAGS

    def __post_init__(self) -> None:
        _check_max_calls(self.max_calls)

    def parse(self, text: str, turn: int = 0) -> ParsedAction:
        if not isinstance(text, str):
            return not_a_string(text)
        answer, errors = _answer(text)
        found: list[tuple[int, str, str, str]] = []
        written = 0
        for tag, (tool_name, arg) in self.tags.items():  # the first max_calls overall are among each tag's first
            blocks, count = _blocks(text, f"<{tag}>", f"</{tag}>", self.max_calls)
            if text.count(f"<{tag}>") != count:
                errors.append(f"<{tag}> is not closed with </{tag}>")
            found.extend((start, tool_name, arg, inner.strip()) for start, inner in blocks)
            written += count
        found.sort()
        calls = [
            ToolCall(tool_name, {arg: value}, id=f"call_{turn}_{i}")
            for i, (_, tool_name, arg, value) in enumerate(found[: self.max_calls])
        ]
        if written > self.max_calls:
            errors.append(_beyond_limit(self.max_calls + 1, written, self.max_calls))
        if answer is not None and found:
            errors.append("give either a tool call or a final <answer>, not both (the answer was not taken)")
        if answer is None and not found and not errors:
            tags = ", ".join(f"<{t}>" for t in self.tags)
            errors.append(f"no {tags} and no <answer> found")
        return ParsedAction(text, tuple(calls), answer, tuple(errors), calls_written=written)

    def format_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        for tag, (tool_name, arg) in self.tags.items():
            if tool_name == name:
                return f"<{tag}>{arguments[arg]}</{tag}>"
        raise KeyError(f"no tag maps to tool {name!r}")

    def format_answer(self, answer: str) -> str:
        return f"<answer>{answer}</answer>"

    def instructions(self, tools: Sequence[Any]) -> str:
        by_name = {t.name: t for t in tools}
        lines = []
        for tag, (tool_name, arg) in self.tags.items():
            desc = by_name[tool_name].description if tool_name in by_name else tool_name
            lines.append(f"- <{tag}>{arg}</{tag}>: {desc}")
        return (
            "You may use these actions, each written inside its tags:\n"
            + "\n".join(lines)
            + "\nResults come back in the next message. When you know the answer, write it inside "
            "<answer></answer> tags, e.g. <answer>Paris</answer>."
        )


def make_parser(
    action_format: str | ActionFormat, tools: Sequence[Any] = (), *, max_calls: int = 4
) -> ToolCallParser | TagParser:
    """The parser for ``action_format``; for tags, one tag per one-argument tool."""
    fmt = ActionFormat(action_format)
    if fmt is ActionFormat.TOOL_CALL:
        return ToolCallParser(max_calls=max_calls)
    tags: dict[str, tuple[str, str]] = {}
    for t in tools:
        props = list(t.parameters.get("properties", {}))
        if len(props) == 1:
            tags[t.name] = (t.name, props[0])
    if not tags:
        raise ValueError("action_format='tags' needs at least one tool with exactly one argument")
    return TagParser(tags=tags, max_calls=max_calls)

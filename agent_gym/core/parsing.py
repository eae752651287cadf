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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from agent_gym.core.history import ToolCall

__all__ = [
    "ActionFormat",
    "ActionParser",
    "ParsedAction",
    "TagParser",
    "ToolCallParser",
    "make_parser",
]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


class ActionFormat(StrEnum):
    """The action protocols an environment can speak."""

    TOOL_CALL = "tool_call"
    TAGS = "tags"


@dataclass(frozen=True)
class ParsedAction:
    """What an action asked for.

    Attributes:
        raw: The action text, unchanged.
        tool_calls: Well-formed calls, in order (possibly empty).
        answer: The final answer, if the action gave one.
        errors: Human-readable problems; empty iff the action is well formed.
    """

    raw: str
    tool_calls: tuple[ToolCall, ...] = ()
    answer: str | None = None
    errors: tuple[str, ...] = field(default_factory=tuple)

    @property
    def well_formed(self) -> bool:
        return not self.errors

    @property
    def is_final(self) -> bool:
        """A well-formed final answer."""
        return self.answer is not None and not self.errors


class ActionParser(Protocol):
    """Parses actions and writes them (for scripted policies and prompts)."""

    format: ActionFormat

    def parse(self, text: str, turn: int = 0) -> ParsedAction: ...

    def format_call(self, name: str, arguments: Mapping[str, Any]) -> str: ...

    def format_answer(self, answer: str) -> str: ...

    def instructions(self, tools: Sequence[Any]) -> str: ...


def _answers(text: str) -> tuple[str | None, list[str]]:
    found = _ANSWER.findall(text)
    errors = []
    if len(found) > 1:
        errors.append(f"give exactly one <answer>...</answer>, found {len(found)}")
    if not found and "<answer>" in text:
        errors.append("<answer> is not closed with </answer>")
    return (found[0].strip() if found else None), errors


@dataclass(frozen=True)
class ToolCallParser:
    """Hermes / Qwen ``<tool_call>`` JSON blocks plus ``<answer>``.

    Attributes:
        max_calls: Calls beyond this many in one action are refused (an error).
    """

    max_calls: int = 4
    format: ActionFormat = ActionFormat.TOOL_CALL

    _BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

    def parse(self, text: str, turn: int = 0) -> ParsedAction:
        if not isinstance(text, str):
            return ParsedAction(raw=repr(text), errors=(f"an action must be a str, got {type(text).__name__}",))
        answer, errors = _answers(text)
        calls: list[ToolCall] = []
        blocks = self._BLOCK.findall(text)
        if text.count("<tool_call>") != len(blocks):
            errors.append("every <tool_call> must be closed with </tool_call>")
        for i, block in enumerate(blocks):
            call, problem = self._decode(block, f"call_{turn}_{i}")
            if problem:
                errors.append(f"tool call {i + 1}: {problem}")
            elif len(calls) >= self.max_calls:
                errors.append(f"at most {self.max_calls} tool calls per turn (got {len(blocks)})")
                break
            else:
                calls.append(call)  # type: ignore[arg-type]
        if answer is not None and blocks:
            errors.append("give either tool calls or a final <answer>, not both")
        if answer is None and not blocks and not errors:
            errors.append("no <tool_call> and no <answer> found")
        return ParsedAction(raw=text, tool_calls=tuple(calls), answer=answer, errors=tuple(errors))

    @staticmethod
    def _decode(block: str, call_id: str) -> tuple[ToolCall | None, str | None]:
        try:
            obj = json.loads(block.strip())
        except (json.JSONDecodeError, RecursionError) as exc:
            msg = getattr(exc, "msg", "too deeply nested")
            return None, f"invalid JSON ({msg})"
        if not isinstance(obj, dict):
            return None, "expected a JSON object with 'name' and 'arguments'"
        name = obj.get("name")
        if not isinstance(name, str) or not name:
            return None, "missing string field 'name'"
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):  # some models double-encode the arguments
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                return None, "'arguments' is a string that is not a JSON object"
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

    def parse(self, text: str, turn: int = 0) -> ParsedAction:
        if not isinstance(text, str):
            return ParsedAction(raw=repr(text), errors=(f"an action must be a str, got {type(text).__name__}",))
        answer, errors = _answers(text)
        found: list[tuple[int, str, str, str]] = []
        for tag, (tool_name, arg) in self.tags.items():
            t = re.escape(tag)
            matches = list(re.finditer(rf"<{t}>(.*?)</{t}>", text, re.DOTALL))
            if text.count(f"<{tag}>") != len(matches):
                errors.append(f"<{tag}> is not closed with </{tag}>")
            found.extend((m.start(), tool_name, arg, m.group(1).strip()) for m in matches)
        found.sort()
        calls: list[ToolCall] = []
        for _, tool_name, arg, value in found:
            if len(calls) >= self.max_calls:
                errors.append(f"at most {self.max_calls} tool calls per turn (got {len(found)})")
                break
            calls.append(ToolCall(tool_name, {arg: value}, id=f"call_{turn}_{len(calls)}"))
        if answer is not None and found:
            errors.append("give either a tool call or a final <answer>, not both")
        if answer is None and not found and not errors:
            tags = ", ".join(f"<{t}>" for t in self.tags)
            errors.append(f"no {tags} and no <answer> found")
        return ParsedAction(raw=text, tool_calls=tuple(calls), answer=answer, errors=tuple(errors))

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


def make_parser(action_format: str | ActionFormat, tools: Sequence[Any] = ()) -> ToolCallParser | TagParser:
    """The parser for ``action_format``; for tags, one tag per one-argument tool."""
    fmt = ActionFormat(action_format)
    if fmt is ActionFormat.TOOL_CALL:
        return ToolCallParser()
    tags: dict[str, tuple[str, str]] = {}
    for t in tools:
        props = list(t.parameters.get("properties", {}))
        if len(props) == 1:
            tags[t.name] = (t.name, props[0])
    if not tags:
        raise ValueError("action_format='tags' needs at least one tool with exactly one argument")
    return TagParser(tags=tags)

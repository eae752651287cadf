"""Arguments a careless agent sends: empty, whitespace-only, missing, or of the wrong type.

A model writes ``{"word": ""}``, ``{"word": "  "}``, ``{}`` or ``{"limit": "5"}`` often,
and these are exactly the inputs a tool's author forgets: a schema lets an empty or
whitespace-only string through, so the tool (and any reward term that reads the call)
must cope with it, while a missing or wrongly typed argument must come back to the agent
as a tool error, never as an exception or a non-finite reward.

:func:`odd_arguments` lists such argument sets for one tool, one property changed at a
time, for :func:`agent_gym.testing.check_odd_arguments` (deterministic) and for the
Hypothesis strategies of :mod:`agent_gym.testing.strategies` (which draw from it).

Example:
    >>> from agent_gym.core.tool import tool
    >>> @tool
    ... def define(word: str) -> str:
    ...     '''Look a word up.
    ...
    ...     Args:
    ...         word: The word.
    ...     '''
    ...     return word
    >>> [label for label, _ in odd_arguments(define)][:3]
    ['no arguments', "word=''", "word='   '"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_gym.core.tool import Tool

__all__ = ["odd_arguments", "odd_values", "plain_value"]

_BLANKS: tuple[str, ...] = ("", "   ", "\n\t ")
"""An empty string and two whitespace-only ones (spaces; newline, tab and space)."""


def odd_values(prop: Mapping[str, Any]) -> list[Any]:
    """Values for a property of JSON schema ``prop`` that an agent may send but a careless tool mishandles.

    Strings get the empty and whitespace-only strings (schema-valid: the tool itself must cope) and
    values of other JSON types; numbers, booleans, arrays and objects get blank strings, a number
    written as a string, ``null`` and values of other types; an enum also gets a string outside it.

    Args:
        prop: The property's schema (``{"type": "string", ...}``); no ``type`` is read as a string.

    Returns:
        The values, without repeats, in a fixed order.
    """
    kind = prop.get("type", "string")
    if isinstance(kind, list):  # ["string", "null"]: the first type
        kind = kind[0] if kind else "string"
    wrong_types: list[Any] = [0, None, True, [], {}]
    if kind == "string":
        values = [*_BLANKS, *wrong_types]
    elif kind in ("integer", "number"):
        values = [*_BLANKS, "1", None, True, [], {}] + ([1.5] if kind == "integer" else [])
    elif kind == "boolean":
        values = [*_BLANKS, "true", 0, None, []]
    elif kind == "array":
        values = [*_BLANKS, [], [""], ["   "], None, {}]
    else:  # object, null or an unknown type
        values = [*_BLANKS, 0, None, []]
    if "enum" in prop:
        values.append("not one of " + "/".join(str(v) for v in prop["enum"])[:40])
    unique: list[Any] = []
    for value in values:
        if not any(type(value) is type(seen) and value == seen for seen in unique):
            unique.append(value)
    return unique


def plain_value(prop: Mapping[str, Any]) -> Any:
    """A simple valid value for a property: its first enum member, ``1``, ``True``, ``["x"]`` or ``"x"``."""
    if prop.get("enum"):
        return prop["enum"][0]
    kind = prop.get("type", "string")
    if isinstance(kind, list):
        kind = kind[0] if kind else "string"
    return {"integer": 1, "number": 1.0, "boolean": True, "array": ["x"], "object": {}}.get(kind, "x")


def odd_arguments(tool: Tool, valid: Mapping[str, Any] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Argument sets for ``tool`` with one thing wrong each: ``(label, arguments)`` pairs.

    First no arguments at all; then, property by property, the property missing (when there are others)
    and each of its :func:`odd_values`, the other properties kept as in ``valid``.

    Args:
        tool: The tool; its JSON schema (``tool.parameters``) names the properties and their types.
        valid: Arguments to start from (default: a :func:`plain_value` for every property).

    Returns:
        ``(label, arguments)`` pairs; the label names what is wrong (``"word missing"``, ``"word=''"``).
    """
    props: Mapping[str, Any] = tool.parameters.get("properties", {})
    base = dict(valid) if valid is not None else {name: plain_value(prop) for name, prop in props.items()}
    cases: list[tuple[str, dict[str, Any]]] = [("no arguments", {})]
    for name, prop in props.items():
        others = {k: v for k, v in base.items() if k != name}
        if others:  # with no other property, "missing" is "no arguments" again
            cases.append((f"{name} missing", others))
        cases += [(f"{name}={value!r}", {**others, name: value}) for value in odd_values(prop)]
    return cases

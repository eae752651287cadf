"""Tools: typed, documented callables that report what happened.

A :class:`Tool` has a name, a description and a JSON schema of its arguments
(declared once, or derived from a function's type hints and docstring by
:func:`tool`). :meth:`Tool.call` validates the arguments with ``jsonschema``
and runs the tool; *every* failure - bad arguments, an exception inside the
tool - comes back as a :class:`~agent_gym.core.history.ToolResult` with
``ok=False``, never as an exception that would end the episode.

Tools receive a :class:`ToolContext` carrying the environment's random
generator, so any randomness a tool has (retrieval noise, flaky results) is
reproducible from ``env.reset(seed=...)``.

Tools pickle and deep-copy with their env (a :class:`FunctionTool` saves its
function by reference, so define it at module level: ``@tool`` on a module's
function, as below, pickles; a function defined inside another does not).

Example:
    >>> @tool
    ... def add(a: int, b: int) -> str:
    ...     '''Add two integers.
    ...
    ...     Args:
    ...         a: The first number.
    ...         b: The second number.
    ...     '''
    ...     return str(a + b)
    >>> add.call({"a": 2, "b": 3}).content
    '5'
    >>> add.call({"a": "two"}).ok
    False
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import numpy as np

from agent_gym.core.history import ToolResult

__all__ = ["FunctionTool", "Tool", "ToolContext", "tool"]


@dataclass
class ToolContext:
    """What an environment hands a tool for one call.

    Attributes:
        rng: The environment's ``np_random``; tools draw every random choice
            from it so that episodes are reproducible under a seed.
        noise: The environment's tool-noise configuration (or ``None``); tools
            that can misbehave in tool-specific ways (retrieval) read it.
        turn: The index of the current step within the episode.
    """

    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    noise: Any = None
    turn: int = 0


@functools.lru_cache(maxsize=512)
def _cached_validator(schema_json: str) -> jsonschema.Draft202012Validator:
    schema = json.loads(schema_json)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _validator_for(schema: Mapping[str, Any]) -> jsonschema.Draft202012Validator:
    """A checked validator for ``schema``; checking a schema costs milliseconds, so each is checked once."""
    return _cached_validator(json.dumps(schema, sort_keys=True))


class Tool:
    """Base class: subclass and implement :meth:`run`, or use :func:`tool`.

    Attributes:
        name: The name the agent calls the tool by.
        description: One paragraph for the system prompt.
        parameters: The JSON schema of the arguments (an ``object`` schema).
    """

    name: str = ""
    description: str = ""
    parameters: Mapping[str, Any] = {"type": "object", "properties": {}}

    def __init__(self) -> None:
        if not self.name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", self.name):
            raise ValueError(f"tool name must be an identifier, got {self.name!r}")
        self._validator = _validator_for(self.parameters)

    def run(self, ctx: ToolContext, *args: Any, **arguments: Any) -> ToolResult | str:
        """Execute the tool on validated arguments.

        :meth:`call` passes ``ctx`` and then the arguments by name, so a
        subclass declares its own (``def run(self, ctx, query: str)``); the
        ``*args: Any, **arguments: Any`` here tell type checkers exactly that
        (any signature after ``ctx`` is a valid override).

        Return a :class:`ToolResult`, or a ``str`` for a plain success. Raising
        is allowed: :meth:`call` turns any exception into an error result.
        """
        raise NotImplementedError

    def validate(self, arguments: Any) -> str | None:
        """``None`` if ``arguments`` match the schema, else a readable message."""
        if not isinstance(arguments, Mapping):
            return f"arguments must be a JSON object, got {type(arguments).__name__}"
        errors = sorted(self._validator.iter_errors(dict(arguments)), key=lambda e: list(e.path))
        if not errors:
            return None
        first = errors[0]
        where = "/".join(str(p) for p in first.path) or "arguments"
        return f"invalid arguments for {self.name}: {where}: {first.message}"

    def call(self, arguments: Any, ctx: ToolContext | None = None) -> ToolResult:
        """Validate and run; never raises for anything the agent wrote."""
        try:
            problem = self.validate(arguments)
        except (RecursionError, ValueError) as exc:  # e.g. nesting deeper than the validator can walk
            problem = f"invalid arguments for {self.name}: {type(exc).__name__}"
        if problem is not None:
            return ToolResult.error(problem, reason="invalid_arguments")
        try:
            out = self.run(ctx or ToolContext(), **dict(arguments))
        except Exception as exc:  # a tool failure is an observation, not a crash
            return ToolResult.error(f"{self.name} failed: {type(exc).__name__}: {exc}", reason="exception")
        if isinstance(out, str):
            return ToolResult(out)
        if not isinstance(out, ToolResult):
            return ToolResult.error(f"{self.name} returned {type(out).__name__}, not text", reason="bad_return")
        return out

    def schema(self) -> dict[str, Any]:
        """The OpenAI / Hugging Face ``tools=[...]`` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(dict(self.parameters)),
            },
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    def __getstate__(self) -> dict[str, Any]:
        """Pickled and deep-copied without the schema validator (it is rebuilt from ``parameters``)."""
        state = self.__dict__.copy()
        state.pop("_validator", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._validator = _validator_for(self.parameters)


_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _json_type(annotation: Any) -> dict[str, Any]:
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, tuple) and args:
        return {"type": "array", "items": _json_type(args[0])}
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1:
            return _json_type(non_null[0])
        return {"anyOf": [_json_type(a) for a in non_null]}
    if origin is dict or annotation is dict:
        return {"type": "object"}
    raise TypeError(f"cannot derive a JSON schema for annotation {annotation!r}")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into summary text and ``Args:`` entries."""
    doc = inspect.cleandoc(doc or "")
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    section = None
    current = None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            section = "args"
            continue
        if re.fullmatch(r"[A-Z][A-Za-z ]*:", stripped):
            section = "other"
            continue
        if section is None:
            summary_lines.append(stripped)
        elif section == "args":
            m = re.match(r"(\w+)(?:\s*\(.*?\))?:\s*(.*)", stripped)
            if m and not line.startswith(" " * 8):
                current = m.group(1)
                params[current] = m.group(2)
            elif current and stripped:
                params[current] += " " + stripped
    return " ".join(s for s in summary_lines if s).strip(), params


class FunctionTool(Tool):
    """A tool made from a plain function; see :func:`tool`."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None, description: str | None = None):
        summary, arg_docs = _parse_docstring(fn.__doc__ or "")
        hints = typing.get_type_hints(fn)
        properties: dict[str, Any] = {}
        required: list[str] = []
        self._wants_ctx = False
        for pname, param in inspect.signature(fn).parameters.items():
            if pname == "ctx" or hints.get(pname) is ToolContext:
                self._wants_ctx = True
                continue
            if pname not in hints:
                raise TypeError(f"parameter {pname!r} of {fn.__name__} needs a type hint")
            prop = _json_type(hints[pname])
            if pname in arg_docs:
                prop["description"] = arg_docs[pname]
            properties[pname] = prop
            if param.default is inspect.Parameter.empty:
                required.append(pname)
        self.name = name or fn.__name__
        self.description = description or summary
        self.parameters = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
        self._fn = fn
        super().__init__()

    def run(self, ctx: ToolContext, **arguments: Any) -> ToolResult | str:
        if self._wants_ctx:
            return self._fn(ctx=ctx, **arguments)
        return self._fn(**arguments)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with the function by reference, also when ``@tool`` put this tool in the function's place.

        ``@tool`` at module level binds the module's name to the tool, so pickle (which saves a function as
        ``module.qualname``) would find the tool there instead of the function and refuse; such a function is
        saved as that name and taken back from the tool found there on load.
        """
        state = super().__getstate__()
        module, qualname = getattr(self._fn, "__module__", None), getattr(self._fn, "__qualname__", "")
        if module is not None and _lookup(module, qualname) is self:
            state["_fn"] = _DecoratedFunction(module, qualname)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        fn = state.get("_fn")
        if isinstance(fn, _DecoratedFunction):
            found = _lookup(fn.module, fn.qualname)
            if not isinstance(found, FunctionTool):
                raise TypeError(f"{fn.module}.{fn.qualname} is no longer a @tool; cannot load the tool pickled from it")
            state = {**state, "_fn": found._fn}
        super().__setstate__(state)


@dataclass(frozen=True)
class _DecoratedFunction:
    """A reference to the function of a module-level ``@tool``: its module and qualified name."""

    module: str
    qualname: str


def _lookup(module: str, qualname: str) -> Any:
    """The object ``module.qualname`` names, importing the module (``None`` when there is none, e.g. a local)."""
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return obj


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None) -> Any:
    """Make a :class:`FunctionTool` from a typed, documented function.

    Usable bare (``@tool``) or with options (``@tool(name="search")``). A
    parameter named ``ctx`` receives the :class:`ToolContext`.
    """
    if fn is None:
        return lambda f: FunctionTool(f, name=name, description=description)
    return FunctionTool(fn, name=name, description=description)

"""A griffe extension for the API reference: render the docstrings' Sphinx roles as cross-references.

The docstrings name other objects the Sphinx way (``:func:`check_text_env```, ``:class:`~agent_gym.ToolEnv```,
``:mod:`.strategies```); mkdocstrings reads them as Markdown, where a role is plain text. Before a docstring is
parsed, each role becomes an *optional* mkdocs-autorefs reference (``<autoref identifier=... optional>``): a
link where the target is on the site, its name in code font where it is not (a Gymnasium or TRL object), so
the strict build never warns about one. The docstrings keep the roles they have.

The target is read as Sphinx reads it: ``~`` shows only its last part, ``title <target>`` an explicit title,
a leading ``.`` or a bare name is looked up from the object's own scope (its members, its module's imports,
then the modules above it), and ``func``/``meth`` targets are shown with ``()``.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(
    r":(?:py:)?(?P<role>func|meth|class|mod|data|attr|exc|obj|const|type):`(?P<body>[^`]+)`(?!`)",
)
"""A Sphinx cross-reference role (``:func:`name```), with or without the ``py:`` domain."""

_EXPLICIT = re.compile(r"(?P<title>.*?)\s*<(?P<target>[^<>]+)>\s*")


def _resolve(obj: griffe.Object, name: str) -> str:
    """The full path of ``name`` as seen from ``obj``; ``name`` itself when nothing in scope has it."""
    dotted = name.lstrip(".")
    head, _, rest = dotted.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        try:
            found = scope.resolve(head)
        except griffe.NameResolutionError:
            scope = scope.parent
            continue
        return f"{found}.{rest}" if rest else found
    module = obj.module
    if name.startswith(".") and module.parent is not None:  # a module beside this one (:mod:`.strategies`)
        return f"{module.parent.path}.{dotted}" if not module.is_package else f"{module.path}.{dotted}"
    return dotted


def rewrite_roles(obj: griffe.Object, text: str) -> str:
    """``text`` with every Sphinx role replaced by an optional autorefs reference resolved from ``obj``."""

    def one(match: re.Match[str]) -> str:
        body = match["body"].strip()
        explicit = _EXPLICIT.fullmatch(body)
        title, target = (explicit["title"], explicit["target"]) if explicit else (None, body)
        short = target.startswith("~")
        target = target.lstrip("~").removesuffix("()")
        if title is None:
            title = target.lstrip(".").rsplit(".", 1)[-1] if short else target.lstrip(".")
            if match["role"] in ("func", "meth"):
                title += "()"
        identifier = html.escape(_resolve(obj, target), quote=True)
        return f'<autoref identifier="{identifier}" optional><code>{html.escape(title)}</code></autoref>'

    return ROLE.sub(one, text)


class SphinxRoles(griffe.Extension):
    """Rewrite the Sphinx roles of every docstring of a package once it is loaded (names resolve then)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._walk(pkg, set())

    def _walk(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = rewrite_roles(obj, obj.docstring.value)
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, seen)

"""A griffe extension for the API reference: read a Google-style ``Example:`` section as ``Examples:``.

Napoleon (Google style) takes both headings; griffe takes only the plural and would render the singular as
an admonition whose ``>>>`` lines Markdown reads as quotes. The docstrings keep the heading they have.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_HEADING = re.compile(r"^(\s*)Example:[ \t]*$", flags=re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Rename each ``Example:`` heading to ``Examples:`` before the docstring is parsed."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _HEADING.sub(r"\1Examples:", obj.docstring.value)

"""Passages and their stable ids: the unit of text that datasets, retrieval and tools share.

QA loaders (:mod:`agent_gym.datasets`) build a question's context paragraphs
with :func:`passage_id`, retrievers (:mod:`agent_gym.retrieval`) index and
return :class:`Passage` objects, and the search tool shows them; so the gold
supporting paragraphs of a question map to the ids a retriever returns. Both
names are re-exported by :mod:`agent_gym.retrieval`.

Example:
    >>> p = Passage(id=passage_id("Paris", "Paris is the capital of France."), title="Paris",
    ...             text="Paris is the capital of France.")
    >>> p.id
    'Paris#11651935d5'
    >>> p.contents
    'Paris\\nParis is the capital of France.'
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = ["Passage", "passage_id"]


@dataclass(frozen=True)
class Passage:
    """One retrievable unit of text (a paragraph or a 100-word chunk).

    Attributes:
        id: Unique id within a corpus (see :func:`passage_id`).
        title: The title of the page the passage comes from (may be empty).
        text: The passage text, without the title.
    """

    id: str
    title: str
    text: str

    def __post_init__(self) -> None:
        for name in ("id", "title", "text"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TypeError(f"Passage.{name} must be a str, got {type(value).__name__}")
        if not self.id:
            raise ValueError("Passage.id must not be empty")

    @property
    def contents(self) -> str:
        """``title`` and ``text`` on two lines: what a retriever indexes."""
        return f"{self.title}\n{self.text}"


def passage_id(title: str, text: str) -> str:
    """A stable, content-derived id: ``"<title>#<first 10 hex digits of sha1(title + '\\n' + text)>"``.

    The same paragraph gets the same id in every process and in every dataset
    file, so gold supporting paragraphs can be matched to retrieved passages.

    Args:
        title: The passage title.
        text: The passage text.

    Returns:
        The id string.
    """
    digest = hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:10]
    return f"{title}#{digest}"

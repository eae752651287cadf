"""The retriever protocol every backend implements."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol, runtime_checkable

from agent_gym.retrieval.corpus import Hit, Passage

__all__ = ["Retriever"]


@runtime_checkable
class Retriever(Protocol):
    """Ranks passages of a corpus for a text query.

    Attributes:
        passages: The corpus, in index order (may be empty for a remote
            backend whose corpus is not known locally).
    """

    passages: Sequence[Passage]

    def search(self, query: str, k: int = 5, allowed: Collection[str] | None = None) -> list[Hit]:
        """The top-``k`` hits for ``query``, best first (``rank`` 1, 2, ...).

        Args:
            query: Free text; empty or all-stopword queries return no hits.
            k: How many hits at most.
            allowed: If given, only passages whose id is in it may be returned
                (the per-question "distractor" corpus served from one pooled index).
        """
        ...

    def search_batch(
        self, queries: Sequence[str], k: int = 5, allowed: Collection[str] | None = None
    ) -> list[list[Hit]]:
        """:meth:`search` for many queries at once (one result list per query, same order)."""
        ...

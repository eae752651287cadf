"""The ``search`` tool: top-k passages from a retriever, with seeded retrieval noise.

:class:`SearchTool` wraps any :class:`~agent_gym.retrieval.Retriever`. It
reports the ids of the passages it showed in ``metadata["evidence"]`` so the
environment can reward newly retrieved gold paragraphs. When the
environment's :class:`~agent_gym.core.noise.ToolNoise` has active retrieval
noise, the ranked list is perturbed with the environment's generator
(``ctx.rng``): drops, shuffles and distractor substitutions replay exactly
under ``env.reset(seed=...)``.

Example:
    >>> from agent_gym.retrieval import BM25Retriever, Passage
    >>> retriever = BM25Retriever([Passage("a", "Paris", "Paris is the capital of France."),
    ...                            Passage("b", "Tokyo", "Tokyo is the capital of Japan.")])
    >>> result = SearchTool(retriever, k=1).call({"query": "capital of France"})
    >>> print(result.content)
    Doc 1 (Title: Paris): Paris is the capital of France.
    >>> result.metadata["evidence"]
    ['a']
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from agent_gym.core.history import ToolResult
from agent_gym.core.noise import ToolNoise
from agent_gym.core.passages import Passage
from agent_gym.core.tool import Tool, ToolContext
from agent_gym.retrieval.base import Retriever
from agent_gym.retrieval.corpus import Hit

__all__ = ["SearchTool", "format_passages"]


def format_passages(passages: Sequence[Passage], max_chars: int) -> str:
    """Numbered passages with titles, one per line: ``"Doc 1 (Title: T): text"``.

    Args:
        passages: The passages to show, best first.
        max_chars: Each passage's text is cut to this many characters (``"..."`` marks a cut).
    """
    lines = []
    for i, p in enumerate(passages, start=1):
        text = " ".join(p.text.split())
        if len(text) > max_chars:
            text = text[:max_chars].rstrip() + "..."
        lines.append(f"Doc {i} (Title: {p.title}): {text}")
    return "\n".join(lines)


class SearchTool(Tool):
    """Search the document collection and return the most relevant passages.

    Args:
        retriever: Any :class:`~agent_gym.retrieval.Retriever`.
        k: How many passages to return per query (>= 1).
        allowed: If given, only these passage ids can be returned (the
            question's own paragraphs in the distractor setting).
        max_passage_chars: Each passage's text is truncated to this many characters.
        distractor_pool: Passages that retrieval noise may substitute for hits;
            default: the allowed passages, else the whole corpus.
    """

    name = "search"
    description = (
        "Search a collection of Wikipedia paragraphs with a keyword query and return the most relevant "
        "paragraphs, each with its title. Search for one entity or fact at a time; to answer a multi-hop "
        "question, search again with what you learned."
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Keywords or a short question, e.g. an entity's name."}
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        retriever: Retriever,
        *,
        k: int = 3,
        allowed: Collection[str] | None = None,
        max_passage_chars: int = 600,
        distractor_pool: Sequence[Passage] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer (got {k!r})")
        if isinstance(max_passage_chars, bool) or not isinstance(max_passage_chars, int) or max_passage_chars < 1:
            raise ValueError(f"max_passage_chars must be a positive integer (got {max_passage_chars!r})")
        if isinstance(allowed, str):
            raise TypeError("allowed must be a collection of passage ids, not a single string")
        self.retriever = retriever
        self.k = k
        self.allowed = frozenset(allowed) if allowed is not None else None
        self.max_passage_chars = max_passage_chars
        self._explicit_pool = tuple(distractor_pool) if distractor_pool is not None else None
        self._pool: tuple[list[str], dict[str, Passage]] | None = None

    @property
    def distractor_pool(self) -> list[Passage]:
        """Passages retrieval noise may inject, in a fixed order (so noise is reproducible)."""
        return list(self._pool_index()[1].values())

    def _pool_index(self) -> tuple[list[str], dict[str, Passage]]:
        """The distractor pool's ids (ordered) and an id -> passage map, built on first use."""
        if self._pool is None:
            if self._explicit_pool is not None:
                pool: Sequence[Passage] = self._explicit_pool
            elif self.allowed is not None:
                pool = [p for p in self.retriever.passages if p.id in self.allowed]
            else:
                pool = self.retriever.passages
            by_id = {p.id: p for p in pool}
            self._pool = (list(by_id), by_id)
        return self._pool

    def run(self, ctx: ToolContext, query: str) -> ToolResult:
        """Retrieve, perturb under the env's noise, format. An empty query is an error result."""
        if not query.strip():
            return ToolResult.error("the search query is empty; write some keywords", reason="empty_query")
        hits = self.retriever.search(query, k=self.k, allowed=self.allowed)
        shown, scores, events = self._apply_noise(hits, ctx)
        metadata: dict[str, Any] = {
            "evidence": [p.id for p in shown],
            "passage_ids": [p.id for p in shown],
            "scores": scores,
            "retrieved_ids": [h.passage.id for h in hits],
            "noise_events": list(events),
        }
        if not shown:
            return ToolResult(f"No results found for {query.strip()!r}. Try other keywords.", metadata=metadata)
        return ToolResult(format_passages(shown, self.max_passage_chars), metadata=metadata)

    def _apply_noise(
        self, hits: list[Hit], ctx: ToolContext
    ) -> tuple[list[Passage], list[float | None], tuple[str, ...]]:
        """The passages to show, their retrieval scores (``None`` for injected distractors), noise events."""
        passages = [h.passage for h in hits]
        noise = ctx.noise
        if not (isinstance(noise, ToolNoise) and noise.retrieval.active):
            return passages, [h.score for h in hits], ()
        pool_ids, pool_by_id = self._pool_index()
        ids, events = noise.retrieval.apply([p.id for p in passages], pool_ids, ctx.rng)
        by_id = {h.passage.id: h for h in hits}
        shown = [by_id[i].passage if i in by_id else pool_by_id[i] for i in ids]
        return shown, [by_id[i].score if i in by_id else None for i in ids], events

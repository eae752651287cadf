"""Retrieval for the multi-hop QA environments: passages, corpora and retrievers.

One pooled index serves every question of a split; ``allowed=`` restricts a
search to a question's own paragraphs (the distractor setting), so no index is
built on ``reset``. :meth:`BM25Retriever.cached` shares one index between all
environments over the same corpus. :class:`RemoteRetriever` talks to a
Search-R1-compatible ``/retrieve`` server for indexes too big for one process.

Example:
    >>> from agent_gym.retrieval import BM25Retriever, Passage, passage_id
    >>> docs = [Passage(passage_id(t, x), t, x) for t, x in [
    ...     ("Paris", "Paris is the capital of France."), ("Tokyo", "Tokyo is the capital of Japan.")]]
    >>> retriever = BM25Retriever.cached(docs)
    >>> retriever is BM25Retriever.cached(docs)
    True
    >>> retriever.search("Japan capital", k=1)[0].passage.title
    'Tokyo'
"""

from agent_gym.retrieval.base import Retriever
from agent_gym.retrieval.bm25 import Analyzer, BM25Retriever
from agent_gym.retrieval.corpus import (
    DatasetFormatError,
    Hit,
    Passage,
    dedupe_passages,
    load_corpus,
    parse_contents,
    passage_id,
)
from agent_gym.retrieval.dense import DenseRetriever
from agent_gym.retrieval.lucene import LuceneRetriever
from agent_gym.retrieval.remote import RemoteRetriever, RemoteRetrieverError

__all__ = [
    "Analyzer",
    "BM25Retriever",
    "DatasetFormatError",
    "DenseRetriever",
    "Hit",
    "LuceneRetriever",
    "Passage",
    "RemoteRetriever",
    "RemoteRetrieverError",
    "Retriever",
    "dedupe_passages",
    "load_corpus",
    "parse_contents",
    "passage_id",
]

"""One retriever cache: every backend's ``cached()`` / ``clear_cache()`` rest on ``SharedInstances``."""

import pytest

from agent_gym.retrieval import BM25Retriever, DenseRetriever, LuceneRetriever, Passage
from agent_gym.retrieval.base import InstanceCache, SharedInstances, corpus_key
from agent_gym.retrieval.bm25 import corpus_key as corpus_key_from_bm25

BACKENDS = [BM25Retriever, LuceneRetriever, DenseRetriever]
DOCS = [Passage("a", "Paris", "Paris is the capital of France."), Passage("b", "Tokyo", "Tokyo is in Japan.")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_uses_the_one_cache_and_writes_no_copy_of_it(backend):
    assert issubclass(backend, SharedInstances)
    assert "clear_cache" not in vars(backend) and "_shared" not in vars(backend)
    assert isinstance(backend._cache, InstanceCache) and backend._cache.size == backend.cache_size


def test_each_backend_keeps_its_own_instances_and_sizes():
    assert len({id(b._cache) for b in BACKENDS}) == len(BACKENDS)
    assert [b.cache_size for b in BACKENDS] == [8, 8, 4]


def test_cached_shares_per_corpus_and_settings_and_clear_cache_forgets():
    BM25Retriever.clear_cache()
    first = BM25Retriever.cached(DOCS)
    assert BM25Retriever.cached(list(reversed(DOCS))) is not first  # another index order is another index
    assert BM25Retriever.cached([*DOCS, DOCS[0]]) is first  # exact duplicates are dropped before keying
    assert BM25Retriever.cached(DOCS, k1=1.2) is not first
    BM25Retriever.clear_cache()
    assert len(BM25Retriever._cache) == 0 and BM25Retriever.cached(DOCS) is not first
    BM25Retriever.clear_cache()


def test_a_subclass_gets_a_cache_of_its_own():
    class Mine(BM25Retriever):
        cache_size = 1

    BM25Retriever.clear_cache()
    mine = Mine.cached(DOCS)
    assert type(mine) is Mine and Mine.cached(DOCS) is mine and BM25Retriever.cached(DOCS) is not mine
    assert Mine._cache.size == 1 and len(BM25Retriever._cache) == 1
    BM25Retriever.clear_cache()


def test_corpus_key_keeps_its_old_import_path():
    assert corpus_key_from_bm25 is corpus_key

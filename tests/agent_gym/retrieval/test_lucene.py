"""LuceneRetriever (pyserini): runs only where the `lucene` extra and a Java 21+ runtime are installed."""

import functools
import json
import math
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("pyserini", reason="needs the lucene extra: pip install 'agent-r1-gym[lucene]'")

from agent_gym.retrieval import BM25Retriever, Hit, LuceneRetriever, Passage, Retriever
from agent_gym.retrieval import lucene as lucene_module

WORDS = ["apple", "apples", "banana", "river", "rivers", "running", "stone", "paris", "tokyo", "capital", "delta"]
STOP = ["the", "of", "and", "is"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lucene-cache")


@pytest.fixture(scope="module")
def small(cache_dir) -> LuceneRetriever:
    """80 short passages (<= 12 tokens, so Lucene's length norms are exact) over a stemmed vocabulary."""
    rng = np.random.default_rng(0)
    passages = [
        Passage(f"p{i}", str(rng.choice(WORDS)), " ".join(rng.choice(WORDS + STOP, size=int(rng.integers(1, 11)))))
        for i in range(80)
    ]
    return LuceneRetriever(passages, k1=1.2, b=0.6, cache_dir=cache_dir)


@functools.cache
def lucene_tokens(text: str) -> tuple[str, ...]:
    """Anserini's default English analysis (Porter stemmer, Lucene stopwords), as the index applied it."""
    from pyserini.analysis import Analyzer, get_lucene_analyzer

    return tuple(Analyzer(get_lucene_analyzer()).analyze(text))


def brute_force(retriever: LuceneRetriever, query: str, allowed) -> list[tuple[str, float]]:
    """Lucene BM25 written out term by term: idf = ln(1 + (N - df + .5)/(df + .5)), tf/(tf + k1(1 - b + b dl/avgdl))."""
    docs = [lucene_tokens(p.contents) for p in retriever.passages]
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    df = Counter(t for d in docs for t in set(d))
    scored = []
    for pos, (p, d) in enumerate(zip(retriever.passages, docs, strict=True)):
        tf = Counter(d)
        s = 0.0
        for t in lucene_tokens(query):
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * tf[t] / (tf[t] + retriever.k1 * (1 - retriever.b + retriever.b * len(d) / avgdl))
        if s > 0 and (allowed is None or p.id in allowed):
            scored.append((-s, pos, p.id))
    scored.sort()
    return [(pid, -neg) for neg, _, pid in scored]


query_text = st.lists(st.sampled_from([*WORDS, *STOP, "zebra", "run", "APPLE"]), max_size=6).map(" ".join)


@given(
    query=query_text, k=st.integers(1, 8), allowed=st.none() | st.sets(st.sampled_from([f"p{i}" for i in range(80)]))
)
def test_top_k_matches_lucene_bm25_written_out(small, query, k, allowed):
    hits = small.search(query, k=k, allowed=allowed)
    expected = brute_force(small, query, allowed)
    top = expected[:k]
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert len(hits) == len(top)
    # Anserini scores in float32, rounds to 4 decimals and lowers tied documents by 1e-6 per position
    np.testing.assert_allclose([h.score for h in hits], [s for _, s in top], atol=2e-4)
    for i, (pid, s) in enumerate(top):  # ids agree wherever the score is not (near-)tied with a neighbour
        neighbours = [o for other, o in expected[max(0, i - 1) : i + 2] if other != pid]
        if all(abs(s - o) > 3e-4 for o in neighbours):
            assert hits[i].passage.id == pid
    if allowed is not None:
        assert {h.passage.id for h in hits} <= allowed
        full = [h for h in small.search(query, k=80) if h.passage.id in allowed][:k]
        assert [h.passage.id for h in hits] == [h.passage.id for h in full]
        np.testing.assert_allclose([h.score for h in hits], [h.score for h in full], atol=1e-4)


def test_ties_are_ordered_by_id_as_in_anserini(cache_dir):
    docs = [Passage(pid, "", "same words here") for pid in ("z", "m", "a", "q")] + [Passage("x", "", "other")]
    hits = LuceneRetriever(docs, cache_dir=cache_dir).search("same words", k=4)
    assert [h.passage.id for h in hits] == ["a", "m", "q", "z"]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].score - hits[-1].score < 1e-5


def test_protocol_ranks_and_bm25_settings(small):
    assert isinstance(small, Retriever) and len(small) == 80
    hits = small.search("apple river", k=5)
    assert len(hits) == 5 and all(isinstance(h, Hit) for h in hits)
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    other = LuceneRetriever.from_index(small.index_dir, k1=0.9, b=0.0)
    assert [h.score for h in other.search("apple river", k=5)] != [h.score for h in hits]


def test_empty_stopword_and_unmatched_queries_return_nothing(small):
    assert small.search("") == [] and small.search("the of and") == [] and small.search("zebra") == []


@pytest.mark.parametrize(
    "query",
    [
        "   ",
        "!!! ??? ...",
        'apple AND (river OR "',
        "title:apple^3 river~2 *",
        "\x00\n\t",
        "東京 naïve 🙂",
        "apple " * 3000,
    ],
)
def test_odd_queries_are_plain_text_and_never_crash(small, query):
    hits = small.search(query, k=3)
    assert len(hits) <= 3
    assert small.search_batch([query, query], k=3) == [hits, hits]


def test_long_query_over_lucene_clause_limit(small):
    query = " ".join(f"w{i}" for i in range(3000)) + " apple"
    assert [h.passage.id for h in small.search(query, k=3)] == [h.passage.id for h in small.search("apple", k=3)]


def test_allowed_edge_cases(small):
    assert small.search("apple", k=3, allowed=set()) == []
    hits = small.search("apple banana river", k=10, allowed={"p1", "p2"})
    assert len(hits) <= 2 and {h.passage.id for h in hits} <= {"p1", "p2"}


def test_bad_arguments_raise_clearly(small):
    with pytest.raises(ValueError, match="k must be a positive integer"):
        small.search("apple", k=0)
    with pytest.raises(ValueError, match=r"not in the corpus, e\.g\. 'nope'"):
        small.search("apple", allowed={"p1", "nope"})
    with pytest.raises(TypeError, match="not a single string"):
        small.search("apple", allowed="p1")
    with pytest.raises(TypeError, match="sequence of queries"):
        small.search_batch("apple")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty corpus"):
        LuceneRetriever([])
    with pytest.raises(ValueError, match="b must lie in"):
        LuceneRetriever([Passage("a", "", "x")], b=2.0)
    with pytest.raises(FileNotFoundError, match="no Lucene index"):
        LuceneRetriever.from_index(small.index_dir.parent / "missing")


def test_search_batch_equals_search(small):
    queries = ["apple", "", "river stone tokyo", "capital paris"]
    assert small.search_batch(queries, k=3) == [small.search(q, k=3) for q in queries]
    allowed = {f"p{i}" for i in range(30)}
    assert small.search_batch(queries, 2, allowed) == [small.search(q, 2, allowed) for q in queries]


def test_ranking_agrees_with_bm25s_on_unambiguous_queries(cache_dir):
    docs = [Passage(f"d{i}", f"topic{i}", f"alpha{i} beta{i} common words here") for i in range(20)]
    lucene, bm25 = LuceneRetriever(docs, cache_dir=cache_dir), BM25Retriever(docs)
    for i in (0, 7, 19):
        assert (
            lucene.search(f"alpha{i} beta{i}", k=1)[0].passage.id == bm25.search(f"alpha{i} beta{i}", k=1)[0].passage.id
        )


def test_index_is_built_once_and_reused_from_disk(small, cache_dir, monkeypatch):
    def no_rebuild(*args, **kwargs):
        raise AssertionError("the cached index should have been reused")

    monkeypatch.setattr(lucene_module, "build_index", no_rebuild)
    again = LuceneRetriever(list(small.passages), k1=1.2, b=0.6, cache_dir=cache_dir)
    assert again.index_dir == small.index_dir
    assert again.search("apple river", k=5) == small.search("apple river", k=5)


def test_cached_shares_one_instance_per_corpus_and_settings(cache_dir):
    LuceneRetriever.clear_cache()
    docs = [Passage("a", "A", "apple pie"), Passage("b", "B", "banana split")]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda _: LuceneRetriever.cached(docs, cache_dir=cache_dir), range(8)))
    assert all(g is got[0] for g in got)
    assert LuceneRetriever.cached(docs, k1=0.9, cache_dir=cache_dir) is not got[0]
    assert LuceneRetriever.cached(docs[:1], cache_dir=cache_dir).index_dir != got[0].index_dir
    LuceneRetriever.clear_cache()


def test_from_index_rebuilds_passages_from_stored_documents(small):
    opened = LuceneRetriever.from_index(small.index_dir, k1=1.2, b=0.6)
    assert opened.passages == ()
    assert opened.search("apple banana", k=5) == small.search("apple banana", k=5)
    assert opened.search("apple", k=2, allowed={"p3", "p4"}) == small.search("apple", k=2, allowed={"p3", "p4"})
    with pytest.raises(ValueError, match="not in the corpus"):
        opened.search("apple", allowed={"nope"})


def test_concurrent_searches_equal_sequential(small):
    rng = np.random.default_rng(1)
    queries = [" ".join(rng.choice(WORDS, size=3)) for _ in range(120)]
    alloweds = [None if i % 3 else {f"p{j}" for j in rng.integers(0, 80, size=15)} for i in range(120)]
    sequential = [small.search(q, 5, a) for q, a in zip(queries, alloweds, strict=True)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        concurrent = list(
            pool.map(lambda qa: small.search(*qa), [(q, 5, a) for q, a in zip(queries, alloweds, strict=True)])
        )
    assert concurrent == sequential


def test_java_home_checks(tmp_path, monkeypatch):
    old = tmp_path / "jdk17"
    old.mkdir()
    (old / "release").write_text('JAVA_VERSION="17.0.15"\nMODULES="java.base"\n')
    monkeypatch.setenv("JAVA_HOME", str(old))
    with pytest.raises(RuntimeError, match=r"Java 17, but pyserini 1\.6 needs Java 21"):
        lucene_module.find_java_home()
    options = ["-Xmx1g", "--add-modules=jdk.incubator.vector"]
    assert lucene_module._jvm_options(old, options) == ["-Xmx1g"]
    (old / "release").write_text('JAVA_VERSION="25"\nMODULES="java.base jdk.incubator.vector"\n')
    assert lucene_module._jvm_options(old, options) == options


def test_missing_pyserini_names_the_extra(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"agent-r1-gym\[lucene\]"):
        lucene_module._anserini_jar()


def test_pooled_hotpotqa_questions_find_gold_paragraphs(shared_data, cache_dir):
    from agent_gym.retrieval import dedupe_passages, passage_id

    path = shared_data / "hotpotqa" / "dev_distractor_sample_a_300.jsonl"
    records = [json.loads(line) for line in path.open()][:100]
    contexts = [
        [Passage(passage_id(t, "".join(s)), t, "".join(s)) for t, s in zip(*r["context"].values(), strict=True)]
        for r in records
    ]
    retriever = LuceneRetriever(dedupe_passages(p for c in contexts for p in c), cache_dir=cache_dir)
    found = 0
    for record, context in zip(records, contexts, strict=True):
        gold = set(record["supporting_facts"]["title"])
        hits = retriever.search(record["question"], k=5, allowed={p.id for p in context})
        assert {h.passage.id for h in hits} <= {p.id for p in context}
        found += bool(gold & {h.passage.title for h in hits})
    assert found >= 90  # BM25 finds a gold paragraph among 10 candidates for nearly every question

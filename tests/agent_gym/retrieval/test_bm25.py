import math
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_gym.retrieval import BM25Retriever, Hit, Passage, Retriever

WORDS = ["apple", "apples", "banana", "river", "rivers", "stone", "paris", "tokyo", "capital", "echo", "delta"]
STOP = ["the", "of", "and", "is"]


def brute_force(retriever: BM25Retriever, query: str, allowed) -> list[tuple[str, float]]:
    """Every allowed matching passage as (id, score), best first: Lucene BM25 written out term by term."""
    docs = [retriever.analyzer(p.contents) for p in retriever.passages]
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    df = Counter(t for d in docs for t in set(d))
    scored = []
    for pos, (p, d) in enumerate(zip(retriever.passages, docs, strict=True)):
        if allowed is not None and p.id not in allowed:
            continue
        tf = Counter(d)
        s = 0.0
        for t in retriever.analyzer(query):
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * tf[t] / (tf[t] + retriever.k1 * (1 - retriever.b + retriever.b * len(d) / avgdl))
        if s > 0:
            scored.append((-s, pos, p.id))
    scored.sort()
    return [(pid, -neg) for neg, _, pid in scored]


text = st.lists(st.sampled_from(WORDS + STOP), max_size=8).map(" ".join)


@st.composite
def corpus_query(draw):
    bodies = draw(st.lists(st.tuples(text, text), min_size=1, max_size=10))
    passages = [Passage(f"p{i}", title, body) for i, (title, body) in enumerate(bodies)]
    if not any(any(w in WORDS for w in (p.contents.split())) for p in passages):
        passages.append(Passage("extra", "apple", "river"))
    query = draw(text)
    allowed = draw(st.none() | st.sets(st.sampled_from([p.id for p in passages])))
    return passages, query, draw(st.integers(1, 6)), allowed


@given(corpus_query())
def test_top_k_matches_brute_force(case):
    passages, query, k, allowed = case
    retriever = BM25Retriever(passages)
    hits = retriever.search(query, k=k, allowed=allowed)
    expected = brute_force(retriever, query, allowed)
    top = expected[:k]
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert len(hits) == len(top)
    np.testing.assert_allclose([h.score for h in hits], [s for _, s in top], rtol=1e-5)
    if allowed is not None:
        assert {h.passage.id for h in hits} <= allowed
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    # ids agree wherever a score is not (near-)tied with a neighbour, including the first one left out
    for i, (pid, s) in enumerate(top):
        neighbours = [o for _, o in expected[max(0, i - 1) : i] + expected[i + 1 : i + 2]]
        if all(abs(s - o) > 1e-4 * max(1.0, s) for o in neighbours):
            assert hits[i].passage.id == pid


@pytest.fixture(scope="module")
def pooled() -> BM25Retriever:
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(400)]
    passages = [Passage(f"d{i}", f"title {vocab[i % 400]}", " ".join(rng.choice(vocab, size=30))) for i in range(600)]
    return BM25Retriever(passages)


def test_protocol_and_ranks(pooled):
    assert isinstance(pooled, Retriever)
    hits = pooled.search("w1 w2 w3", k=5)
    assert len(hits) == 5 and all(isinstance(h, Hit) for h in hits)
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]


def test_allowed_restricts_and_equals_full_ranking_filtered(pooled):
    allowed = {f"d{i}" for i in range(0, 600, 7)}
    full = [h for h in pooled.search("w5 w17 w200", k=600) if h.passage.id in allowed]
    restricted = pooled.search("w5 w17 w200", k=4, allowed=allowed)
    assert [h.passage.id for h in restricted] == [h.passage.id for h in full[:4]]


def test_allowed_with_fewer_matches_than_k_returns_only_matches(pooled):
    only = {"d3", "d4"}
    hits = pooled.search("w1", k=10, allowed=only)
    assert len(hits) <= 2 and all(h.score > 0 for h in hits)
    assert pooled.search("w1", k=3, allowed=set()) == []


@pytest.mark.parametrize(
    "query", ["", "   ", "the of and is", "!!! ??? ...", "\x00\n\t", "東京 naïve ÉCOLE 🙂", "w1 " * 3400, "x" * 10_000]
)
def test_odd_queries_never_crash(pooled, query):
    hits = pooled.search(query, k=3)
    assert len(hits) <= 3
    assert pooled.search_batch([query, query], k=3) == [hits, hits]


def test_empty_and_stopword_queries_return_nothing(pooled):
    assert pooled.search("") == [] and pooled.search("the of and") == []


def test_unicode_terms_are_indexed():
    retriever = BM25Retriever([Passage("a", "東京", "東京 是 日本的首都"), Passage("b", "École", "une école à Paris")])
    assert retriever.search("東京")[0].passage.id == "a"
    assert retriever.search("ÉCOLE")[0].passage.id == "b"


def test_stemming_and_no_stemmer():
    docs = [Passage("a", "", "running rivers"), Passage("b", "", "a stone")]
    assert [h.passage.id for h in BM25Retriever(docs).search("run river")] == ["a"]
    assert BM25Retriever(docs, stemmer=None).search("run river") == []


def test_search_batch_equals_search(pooled):
    queries = ["w1 w2", "", "w399 w398 w3", "title w10"]
    allowed = {f"d{i}" for i in range(100)}
    assert pooled.search_batch(queries, k=3) == [pooled.search(q, k=3) for q in queries]
    assert pooled.search_batch(queries, k=2, allowed=allowed) == [pooled.search(q, 2, allowed) for q in queries]
    with pytest.raises(TypeError, match="sequence of queries"):
        pooled.search_batch("w1")  # type: ignore[arg-type]


def test_bad_arguments_raise_clearly(pooled):
    with pytest.raises(ValueError, match="k must be a positive integer"):
        pooled.search("w1", k=0)
    with pytest.raises(ValueError, match=r"not in the corpus, e\.g\. 'nope'"):
        pooled.search("w1", allowed={"d1", "nope"})
    with pytest.raises(TypeError, match="not a single string"):
        pooled.search("w1", allowed="d1")


def test_construction_errors():
    with pytest.raises(ValueError, match="empty corpus"):
        BM25Retriever([])
    with pytest.raises(ValueError, match="no passage has any indexable word"):
        BM25Retriever([Passage("a", "", "the of"), Passage("b", "", "")])
    with pytest.raises(ValueError, match="two different passages share the id 'a'"):
        BM25Retriever([Passage("a", "", "x y"), Passage("a", "", "z w")])
    with pytest.raises(TypeError, match=r"passages\[0\] must be a Passage"):
        BM25Retriever(["just text"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="unknown stemmer 'klingon'"):
        BM25Retriever([Passage("a", "", "x")], stemmer="klingon")
    with pytest.raises(ValueError, match="b must lie in"):
        BM25Retriever([Passage("a", "", "x")], b=2.0)


def test_exact_duplicates_are_indexed_once():
    retriever = BM25Retriever([Passage("a", "A", "apple"), Passage("a", "A", "apple"), Passage("b", "B", "pear")])
    assert len(retriever) == 2 and len(retriever.search("apple", k=5)) == 1


def test_cached_returns_one_instance_per_corpus():
    BM25Retriever.clear_cache()
    docs = [Passage("a", "A", "apple pie"), Passage("b", "B", "banana split")]
    first = BM25Retriever.cached(docs)
    assert BM25Retriever.cached(list(docs)) is first
    assert BM25Retriever.cached(tuple(Passage(p.id, p.title, p.text) for p in docs)) is first
    assert BM25Retriever.cached([*docs[:1], Passage("b", "B", "banana bread")]) is not first
    assert BM25Retriever.cached(docs, k1=1.2) is not first
    BM25Retriever.clear_cache()
    assert BM25Retriever.cached(docs) is not first


def test_cached_evicts_least_recently_used(monkeypatch):
    BM25Retriever.clear_cache()
    monkeypatch.setattr(BM25Retriever._cache, "size", 2)
    corpora = [[Passage("a", "A", f"word{i}")] for i in range(3)]
    first = BM25Retriever.cached(corpora[0])
    BM25Retriever.cached(corpora[1])
    assert BM25Retriever.cached(corpora[0]) is first  # refreshes corpus 0
    BM25Retriever.cached(corpora[2])  # evicts corpus 1
    assert BM25Retriever.cached(corpora[0]) is first
    BM25Retriever.clear_cache()


def test_concurrent_searches_equal_sequential(pooled):
    rng = np.random.default_rng(1)
    queries = [" ".join(f"w{j}" for j in rng.integers(0, 400, size=5)) for _ in range(300)]
    alloweds = [None if i % 3 else {f"d{j}" for j in rng.integers(0, 600, size=20)} for i in range(300)]
    sequential = [pooled.search(q, 5, a) for q, a in zip(queries, alloweds, strict=True)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        concurrent = list(pool.map(lambda qa: pooled.search(qa[0], 5, qa[1]), zip(queries, alloweds, strict=True)))
    assert concurrent == sequential


def test_concurrent_cached_builds_once():
    BM25Retriever.clear_cache()
    docs = [Passage(f"d{i}", "t", f"word{i} common") for i in range(50)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(lambda _: BM25Retriever.cached(docs), range(16)))
    assert all(g is got[0] for g in got)
    BM25Retriever.clear_cache()


def test_pooled_hotpotqa_question_finds_own_context(shared_data):
    import json

    from agent_gym.retrieval import dedupe_passages, passage_id

    records = [json.loads(line) for line in (shared_data / "hotpotqa" / "dev_distractor_sample_a_300.jsonl").open()]
    contexts = [
        [Passage(passage_id(t, "".join(s)), t, "".join(s)) for t, s in zip(*r["context"].values(), strict=True)]
        for r in records
    ]
    retriever = BM25Retriever(dedupe_passages(p for c in contexts for p in c))
    hits = retriever.search(records[0]["question"], k=5, allowed={p.id for p in contexts[0]})
    assert len(hits) == 5 and {h.passage.id for h in hits} <= {p.id for p in contexts[0]}
    gold = {t for t, _ in zip(*records[0]["supporting_facts"].values(), strict=True)}
    assert gold & {h.passage.title for h in hits}

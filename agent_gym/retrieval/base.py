"""The retriever protocol every backend implements."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar, runtime_checkable

import numpy as np

from agent_gym.core.passages import Passage
from agent_gym.retrieval.corpus import Hit, as_passage_list

__all__ = [
    "InstanceCache",
    "Retriever",
    "SharedInstances",
    "allowed_positions",
    "check_allowed",
    "check_k",
    "check_queries",
    "corpus_key",
]

T = TypeVar("T")


@runtime_checkable
class Retriever(Protocol):
    """Ranks passages of a corpus for a text query.

    Attributes:
        passages: The corpus, in index order (may be empty for a remote
            backend whose corpus is not known locally).
    """

    @property
    def passages(self) -> Sequence[Passage]:
        """The corpus, in index order (a read-only view: an implementation may keep a tuple or a list)."""
        ...

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


class InstanceCache(Generic[T]):
    """A thread-safe LRU map from a corpus key to one shared retriever instance.

    Backs each backend's ``cached()`` classmethod: N environments over the
    same corpus get the same index, and concurrent first calls build it once.

    Args:
        size: How many distinct instances to keep (least recently used evicted).
    """

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"size must be >= 1 (got {size})")
        self.size = size
        self._items: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_build(self, key: str, build: Callable[[], T]) -> T:
        """The instance stored under ``key``, building (and storing) it if absent."""
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
            made = build()
            self._items[key] = made
            while len(self._items) > self.size:
                self._items.popitem(last=False)
            return made

    def clear(self) -> None:
        """Forget every stored instance."""
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


def corpus_key(passages: Iterable[Passage], *extra: object) -> str:
    """A sha1 over every passage's id, title and text (plus ``extra`` settings)."""
    h = hashlib.sha1(repr(extra).encode())
    for p in passages:
        h.update(f"{p.id}\0{p.title}\0{p.text}\0".encode())
    return h.hexdigest()


class SharedInstances:
    """The one retriever cache: what a backend's ``cached()`` and ``clear_cache()`` share.

    Each subclass gets its own :class:`InstanceCache` of ``cache_size``
    instances (least recently used evicted) and writes its typed ``cached()``
    as one call to :meth:`_shared`, naming the settings that change the index;
    the key is :func:`corpus_key` of the passages, the class and those settings.
    """

    cache_size: ClassVar[int] = 8
    """How many distinct corpora (and settings) ``cached()`` keeps."""
    _cache: ClassVar[InstanceCache[Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._cache = InstanceCache(size=cls.cache_size)

    @classmethod
    def _shared(
        cls, passages: Iterable[Passage], settings: tuple[object, ...], build: Callable[[list[Passage]], Self]
    ) -> Self:
        """The instance for ``passages`` and ``settings``, made by ``build(unique passages)`` on the first call.

        Thread-safe: concurrent first calls for the same key build it once.
        """
        items = as_passage_list(passages)
        key = corpus_key(items, cls.__qualname__, *settings)
        return cls._cache.get_or_build(key, lambda: build(items))

    @classmethod
    def clear_cache(cls) -> None:
        """Forget every instance held by ``cached()`` (whatever the backend keeps on disk stays)."""
        cls._cache.clear()


# --- argument checks shared by every backend (same errors everywhere) -------


def check_k(k: Any) -> None:
    """Raise ``ValueError`` unless ``k`` is a positive integer."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"k must be a positive integer (got {k!r})")


def check_queries(queries: Any) -> None:
    """Raise ``TypeError`` if ``search_batch`` got a single string instead of a sequence."""
    if isinstance(queries, str):
        raise TypeError("search_batch takes a sequence of queries, not a single string")


def check_allowed(allowed: Iterable[str], known: Callable[[str], bool]) -> None:
    """Raise unless ``allowed`` is a collection (not a str) of ids that ``known`` accepts."""
    if isinstance(allowed, str):
        raise TypeError("allowed must be a collection of passage ids, not a single string")
    missing = sorted(pid for pid in set(allowed) if not known(pid))
    if missing:
        shown = ", ".join(repr(m) for m in missing[:3])
        raise ValueError(f"allowed names {len(missing)} passage id(s) not in the corpus, e.g. {shown}")


def allowed_positions(allowed: Collection[str] | None, position: Mapping[str, int]) -> np.ndarray | None:
    """Sorted corpus positions of the allowed ids (``None`` = the whole corpus), after :func:`check_allowed`."""
    if allowed is None:
        return None
    check_allowed(allowed, position.__contains__)
    return np.unique(np.fromiter((position[pid] for pid in allowed), dtype=np.int64, count=len(allowed)))

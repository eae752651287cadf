"""A client for a Search-R1-compatible retrieval server (``POST /retrieve``), on httpx.

Search-R1's ``retrieval_server.py`` (and FlashRAG-style servers that copy it,
and :mod:`agent_gym.retrieval.server`) serve one large index to many rollout
workers. The request is ``{"queries": [...], "topk": k, "return_scores": true}``;
the response is ``{"result": [[{"document": {"id", "contents"}, "score": s}, ...], ...]}``,
one list per query.

A hostile or broken server cannot hold an episode: every request has a
**total deadline** (``timeout``: connecting, retries, waiting and reading the
whole body together - a server that drips one byte every 0.5 s is cut off at
the deadline, not after each read), a **response-size cap** (the body is
streamed and abandoned once its *decoded* size passes ``max_response_bytes``,
so a 300 MB answer, or a 2 KB Brotli body that decodes to 1 GiB, costs at most
the cap in memory: the client asks for ``identity``, decodes a gzip/deflate body
itself in bounded pieces and refuses any other encoding unread), and **bounded retries** with exponential backoff
on network errors (refused, reset or dropped connections), HTTP 429 and 5xx
(``/retrieve`` is read-only, so repeating it is safe). Every failure is
a :class:`RemoteRetrieverError` with a message naming the server and what went
wrong (inside :class:`~agent_gym.tools.SearchTool`: an error observation, never
a crash). One ``httpx.AsyncClient`` per retriever keeps connections alive
between searches; requests run on one private event-loop thread per process,
so the deadline can cancel a request mid-read, and any number of threads may
search through one retriever at once.

``allowed=`` is sent as the ``allowed_ids`` extension field, which
:mod:`agent_gym.retrieval.server` honours (exact restricted top-k); the
client also asks for ``overfetch * k`` hits (at most ``max_topk``) and keeps the allowed ones, so
against a server that ignores the field the result is the top-k among the
allowed passages *within the server's top overfetch * k*.

Example:
    >>> retriever = RemoteRetriever("http://127.0.0.1:8000/retrieve", timeout=5.0)  # doctest: +SKIP
    >>> retriever.search("who wrote Hamlet", k=3)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import OrderedDict
from collections.abc import Collection, Coroutine, Mapping, Sequence
from typing import Any

import httpx

from agent_gym.core.bodies import BodyError, BodyTooLarge, read_body
from agent_gym.core.files import loads
from agent_gym.core.passages import Passage, passage_id
from agent_gym.retrieval.base import check_k, check_queries
from agent_gym.retrieval.corpus import Hit, parse_contents

__all__ = ["RemoteRetriever", "RemoteRetrieverError"]

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_TITLE_MEMORY = 100_000


class RemoteRetrieverError(RuntimeError):
    """The retrieval server could not be reached in time or answered something unexpected."""


class _Retryable(Exception):
    """A failure worth another attempt (connection refused or dropped, 429, 5xx)."""


class _LoopThread:
    """One asyncio event loop in a daemon thread, per process (a forked child makes its own)."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _pid: int | None = None

    @classmethod
    def loop(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or cls._pid != os.getpid() or cls._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="agent-gym-remote-retriever", daemon=True)
                thread.start()
                cls._loop, cls._pid = loop, os.getpid()
            return cls._loop


class RemoteRetriever:
    """Search through a Search-R1 ``/retrieve`` HTTP endpoint.

    Args:
        url: The full endpoint, e.g. ``"http://127.0.0.1:8000/retrieve"``.
        timeout: Total deadline in seconds for one request (one :meth:`search`,
            or one chunk of ``max_batch`` queries of :meth:`search_batch`),
            retries and backoff included.
        max_response_bytes: Abandon a response whose body exceeds this size.
        retries: Extra attempts after a network error (refused, reset or
            dropped connection), HTTP 429 or 5xx (0 = try once).
        backoff: Seconds before the first retry; doubled for each further one
            (never past the deadline).
        overfetch: With ``allowed=``, request ``overfetch * k`` hits and filter.
        max_topk: Never ask for more than this many hits per query (the
            server's limit; :mod:`agent_gym.retrieval.server` defaults to 100).
        max_batch: Queries per HTTP request in :meth:`search_batch`.

    Attributes:
        passages: Empty: the corpus lives on the server (so a
            :class:`~agent_gym.tools.SearchTool` over it needs an explicit
            ``distractor_pool`` for distractor noise).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 10.0,
        max_response_bytes: int = 16 * 2**20,
        retries: int = 2,
        backoff: float = 0.1,
        overfetch: int = 10,
        max_topk: int = 100,
        max_batch: int = 64,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https:// (got {url!r})")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds (got {timeout})")
        if max_response_bytes < 1 or retries < 0 or backoff < 0:
            raise ValueError(
                f"max_response_bytes must be >= 1, retries and backoff >= 0 (got {max_response_bytes}, {retries}, "
                f"{backoff})"
            )
        if overfetch < 1 or max_batch < 1 or max_topk < 1:
            raise ValueError(
                f"overfetch, max_topk and max_batch must be >= 1 (got {overfetch}, {max_topk}, {max_batch})"
            )
        self.url, self.timeout = url, float(timeout)
        self.max_response_bytes, self.retries, self.backoff = int(max_response_bytes), int(retries), float(backoff)
        self.overfetch, self.max_topk, self.max_batch = overfetch, max_topk, max_batch
        self.passages: Sequence[Passage] = ()
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._titles: OrderedDict[str, str] = OrderedDict()
        self._titles_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RemoteRetriever({self.url!r}, timeout={self.timeout})"

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the settings only: the client and its connections are re-made on first use."""
        state = self.__dict__.copy()
        state.update(_client=None, _client_loop=None, _titles=OrderedDict(), _titles_lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._titles_lock = threading.Lock()

    # ------------------------------------------------------------- searching
    def search(self, query: str, k: int = 5, allowed: Collection[str] | None = None) -> list[Hit]:
        """The top-``k`` hits from the server (see the module note on ``allowed``).

        Raises:
            RemoteRetrieverError: On a network error, the deadline, an HTTP
                error status, an oversize or malformed response.
        """
        return self.search_batch([query], k, allowed)[0]

    def search_batch(
        self, queries: Sequence[str], k: int = 5, allowed: Collection[str] | None = None
    ) -> list[list[Hit]]:
        """One HTTP request per ``max_batch`` queries; empty queries get no hits without a request."""
        check_k(k)
        check_queries(queries)
        if isinstance(allowed, str):
            raise TypeError("allowed must be a collection of passage ids, not a single string")
        keep = frozenset(allowed) if allowed is not None else None
        topk = min(k * self.overfetch if keep is not None else k, self.max_topk)
        todo = [i for i, q in enumerate(queries) if q.strip()]
        results: list[list[Hit]] = [[] for _ in queries]
        for start in range(0, len(todo), self.max_batch):
            chunk = todo[start : start + self.max_batch]
            payload: dict[str, Any] = {"queries": [queries[i] for i in chunk], "topk": topk, "return_scores": True}
            if keep is not None:
                payload["allowed_ids"] = sorted(keep)
            answers = self._run(self._request(payload))
            if not isinstance(answers, list) or len(answers) != len(chunk):
                raise RemoteRetrieverError(
                    f"{self.url} must answer {{'result': [one list per query]}} for {len(chunk)} queries"
                )
            for i, answer in zip(chunk, answers, strict=True):
                results[i] = self._to_hits(answer, k, keep)
        return results

    def title_of(self, passage_id: str) -> str | None:
        """The title of a passage this retriever returned recently (the last 100,000 remembered), else ``None``."""
        with self._titles_lock:
            return self._titles.get(passage_id)

    def close(self) -> None:
        """Close the pooled connections (a later search opens new ones)."""
        client, loop = self._client, self._client_loop
        self._client = self._client_loop = None
        if client is not None and loop is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(timeout=5.0)

    def __enter__(self) -> RemoteRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------- transport
    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on the private loop under the total deadline; block this thread for its result."""
        future = asyncio.run_coroutine_threadsafe(self._deadline(coro), _LoopThread.loop())
        try:
            return future.result(timeout=self.timeout + 5.0)  # the deadline fires first; this is a safety net
        except TimeoutError:
            future.cancel()
            raise RemoteRetrieverError(f"no answer from {self.url} within {self.timeout} s") from None

    async def _deadline(self, coro: Coroutine[Any, Any, Any]) -> Any:
        try:
            async with asyncio.timeout(self.timeout):
                return await coro
        except TimeoutError:
            raise RemoteRetrieverError(
                f"no complete answer from {self.url} within the {self.timeout} s deadline"
            ) from None

    def _async_client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout),
                headers={"Accept-Encoding": "identity"},
                limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
            )
            self._client_loop = loop
        return self._client

    async def _request(self, payload: dict[str, Any]) -> Any:
        """POST with bounded retries and exponential backoff; the decoded ``result`` list."""
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                return await self._post_once(payload)
            except _Retryable as exc:
                last = str(exc)
        raise RemoteRetrieverError(f"{self.url}: {last} (gave up after {self.retries + 1} attempts)")

    async def _post_once(self, payload: dict[str, Any]) -> Any:
        client = self._async_client()
        try:
            async with client.stream("POST", self.url, json=payload) as response:
                body = await self._read_capped(response)
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise _Retryable(f"cannot reach the server ({type(exc).__name__}: {exc})") from None
        except httpx.HTTPError as exc:
            raise RemoteRetrieverError(f"request to {self.url} failed ({type(exc).__name__}: {exc})") from None
        if response.status_code in _RETRY_STATUS:
            raise _Retryable(f"HTTP {response.status_code}: {_snippet(body)}")
        if response.status_code >= 400:
            raise RemoteRetrieverError(f"{self.url} answered HTTP {response.status_code}: {_snippet(body)}")
        try:
            decoded = loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise RemoteRetrieverError(f"{self.url} answered something that is not JSON: {exc}") from None
        if not isinstance(decoded, Mapping) or "result" not in decoded:
            raise RemoteRetrieverError(f"{self.url} must answer {{'result': [...]}}, got {_snippet(body)}")
        return decoded["result"]

    async def _read_capped(self, response: httpx.Response) -> bytearray:
        """The body, streamed raw and decoded here; abandoned (connection closed) as soon as its *decoded* size
        passes ``max_response_bytes`` (:func:`~agent_gym.core.bodies.read_body`: a small compressed body
        cannot grow past the cap, an encoding not asked for is refused unread)."""
        cap = self.max_response_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise RemoteRetrieverError(f"{self.url} announced a {int(declared):,}-byte answer (limit {cap:,} bytes)")
        try:
            return await read_body(response, cap)  # no bytes() copy: the peak stays near the cap
        except BodyTooLarge:
            raise RemoteRetrieverError(
                f"{self.url} sent more than {cap:,} bytes (max_response_bytes, decoded); abandoned"
            ) from None
        except BodyError as exc:
            raise RemoteRetrieverError(f"{self.url}: {exc}; abandoned") from None

    # --------------------------------------------------------------- parsing
    def _to_hits(self, answer: Any, k: int, keep: frozenset[str] | None) -> list[Hit]:
        """Server hits for one query -> ranked :class:`Hit` objects (filtered by ``keep``)."""
        if not isinstance(answer, list):
            raise RemoteRetrieverError(f"expected a list of hits per query, got {type(answer).__name__}")
        hits: list[Hit] = []
        for item in answer:
            passage, score = _parse_item(item)
            if keep is not None and passage.id not in keep:
                continue
            hits.append(Hit(passage, score, len(hits) + 1))
            if len(hits) == k:
                break
        with self._titles_lock:
            for h in hits:
                self._titles[h.passage.id] = h.passage.title
                self._titles.move_to_end(h.passage.id)
            while len(self._titles) > _TITLE_MEMORY:
                self._titles.popitem(last=False)
        return hits


def _snippet(body: bytes | bytearray, limit: int = 300) -> str:
    text = body[:limit].decode("utf-8", errors="replace").strip()
    return (text or "(empty body)") + ("..." if len(body) > limit else "")


def _parse_item(item: Any) -> tuple[Passage, float]:
    """``{"document": {...}, "score": s}`` (or a bare document, as without ``return_scores``)."""
    doc = item.get("document", item) if isinstance(item, Mapping) else None
    if not isinstance(doc, Mapping):
        raise RemoteRetrieverError(f"malformed hit {item!r:.200}")
    if isinstance(doc.get("title"), str) and isinstance(doc.get("text"), str):
        title, text = doc["title"], doc["text"]
    elif isinstance(doc.get("contents"), str):
        title, text = parse_contents(doc["contents"])
    elif isinstance(doc.get("text"), str):
        title, text = "", doc["text"]
    else:
        raise RemoteRetrieverError(f"hit without 'contents' or 'text': {item!r:.200}")
    raw_id = doc.get("id")
    if raw_id is not None and (isinstance(raw_id, bool) or not isinstance(raw_id, str | int)):
        raise RemoteRetrieverError(f"hit id must be a string or integer: {item!r:.200}")
    pid = str(raw_id) if raw_id not in (None, "") else passage_id(title, text)
    score = item.get("score", 0.0) if isinstance(item, Mapping) else 0.0
    try:
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise TypeError
        return Passage(pid, title, text), float(score)
    except (TypeError, OverflowError):
        raise RemoteRetrieverError(f"score must be a finite-size number in hit {item!r:.200}") from None

"""A client for a Search-R1-compatible retrieval server (``POST /retrieve``).

Search-R1's ``retrieval_server.py`` (and FlashRAG-style servers that copy it)
serve one large index to many rollout workers. The request is
``{"queries": [...], "topk": k, "return_scores": true}``; the response is
``{"result": [[{"document": {"id", "contents"}, "score": s}, ...], ...]}``,
one list per query. Only the standard library is used (``urllib``), with a
timeout, so a dead server gives a clear error instead of a hang (and inside
:class:`~agent_gym.tools.SearchTool` an error observation, never a crash).

``allowed=`` cannot be pushed to the server: the client asks for
``overfetch * k`` hits and keeps the allowed ones, so with a restriction the
result is the top-k among the allowed passages *within the server's top
overfetch * k*, not an exact restricted top-k (use :class:`BM25Retriever` for that).

Example:
    >>> retriever = RemoteRetriever("http://127.0.0.1:8000/retrieve", timeout=5.0)  # doctest: +SKIP
    >>> retriever.search("who wrote Hamlet", k=3)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from agent_gym.retrieval.corpus import Hit, Passage, parse_contents, passage_id

__all__ = ["RemoteRetriever", "RemoteRetrieverError"]


class RemoteRetrieverError(RuntimeError):
    """The retrieval server could not be reached or answered something unexpected."""


class RemoteRetriever:
    """Search through a Search-R1 ``/retrieve`` HTTP endpoint.

    Args:
        url: The full endpoint, e.g. ``"http://127.0.0.1:8000/retrieve"``.
        timeout: Seconds to wait for each HTTP request.
        overfetch: With ``allowed=``, request ``overfetch * k`` hits and filter.
        max_batch: Queries per HTTP request in :meth:`search_batch`.

    Attributes:
        passages: Empty: the corpus lives on the server (so a
            :class:`~agent_gym.tools.SearchTool` over it needs an explicit
            ``distractor_pool`` for distractor noise).
    """

    def __init__(self, url: str, *, timeout: float = 10.0, overfetch: int = 10, max_batch: int = 64) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https:// (got {url!r})")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds (got {timeout})")
        if overfetch < 1 or max_batch < 1:
            raise ValueError(f"overfetch and max_batch must be >= 1 (got {overfetch}, {max_batch})")
        self.url, self.timeout, self.overfetch, self.max_batch = url, float(timeout), overfetch, max_batch
        self.passages: Sequence[Passage] = ()

    def __repr__(self) -> str:
        return f"RemoteRetriever({self.url!r}, timeout={self.timeout})"

    def search(self, query: str, k: int = 5, allowed: Collection[str] | None = None) -> list[Hit]:
        """The top-``k`` hits from the server (see the module note on ``allowed``).

        Raises:
            RemoteRetrieverError: On a network error, a time-out, an HTTP error
                status or a malformed response.
        """
        return self.search_batch([query], k, allowed)[0]

    def search_batch(
        self, queries: Sequence[str], k: int = 5, allowed: Collection[str] | None = None
    ) -> list[list[Hit]]:
        """One HTTP request per ``max_batch`` queries; empty queries get no hits without a request."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer (got {k!r})")
        if isinstance(queries, str) or isinstance(allowed, str):
            raise TypeError("queries must be a sequence of strings and allowed a collection of ids")
        keep = frozenset(allowed) if allowed is not None else None
        topk = k * self.overfetch if keep is not None else k
        todo = [i for i, q in enumerate(queries) if q.strip()]
        results: list[list[Hit]] = [[] for _ in queries]
        for start in range(0, len(todo), self.max_batch):
            chunk = todo[start : start + self.max_batch]
            answers = self._post([queries[i] for i in chunk], topk)
            for i, answer in zip(chunk, answers, strict=True):
                results[i] = _to_hits(answer, k, keep)
        return results

    def _post(self, queries: list[str], topk: int) -> list[Any]:
        body = json.dumps({"queries": queries, "topk": topk, "return_scores": True}).encode()
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            raise RemoteRetrieverError(f"{self.url} answered HTTP {exc.code}: {exc.reason}") from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise RemoteRetrieverError(f"cannot reach {self.url} within {self.timeout} s: {exc}") from exc
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RemoteRetrieverError(f"{self.url} answered something that is not JSON: {exc}") from exc
        result = payload.get("result") if isinstance(payload, Mapping) else None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RemoteRetrieverError(
                f"{self.url} must answer {{'result': [one list per query]}} for {len(queries)} queries"
            )
        return result


def _to_hits(answer: Any, k: int, keep: frozenset[str] | None) -> list[Hit]:
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
    return hits


def _parse_item(item: Any) -> tuple[Passage, float]:
    """``{"document": {...}, "score": s}`` (or a bare document, as without ``return_scores``)."""
    doc = item.get("document", item) if isinstance(item, Mapping) else None
    if not isinstance(doc, Mapping):
        raise RemoteRetrieverError(f"malformed hit {item!r:.200}")
    if isinstance(doc.get("contents"), str):
        title, text = parse_contents(doc["contents"])
    elif isinstance(doc.get("text"), str):
        title, text = str(doc.get("title", "")), doc["text"]
    else:
        raise RemoteRetrieverError(f"hit without 'contents' or 'text': {item!r:.200}")
    pid = str(doc["id"]) if doc.get("id") not in (None, "") else passage_id(title, text)
    score = item.get("score", 0.0) if isinstance(item, Mapping) else 0.0
    if not isinstance(score, int | float):
        raise RemoteRetrieverError(f"non-numeric score in hit {item!r:.200}")
    return Passage(pid, title, text), float(score)

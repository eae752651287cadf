"""A retrieval server speaking Search-R1's ``/retrieve`` API (FastAPI + uvicorn; extra ``server``).

One process holds the index (BM25, Lucene or dense) and serves many rollout
workers, Search-R1 / SkyRL clients or :class:`~agent_gym.retrieval.RemoteRetriever`.

``POST /retrieve`` takes ``{"queries": [str, ...], "topk": int, "return_scores": bool}``
and answers ``{"result": [[hit, ...], ...]}``, one list per query, best first,
where a hit is ``{"document": doc, "score": float}`` with ``return_scores``
and the bare ``doc`` without; ``doc`` is ``{"id", "contents", "title", "text"}``
(``contents`` is the DPR form ``"\\"Title\\"\\ntext"`` that Search-R1 clients
split on the first newline; ``title``/``text`` are what its BM25 path adds).
An extension field ``"allowed_ids": [...]`` restricts every query to those
passages (the distractor setting); Search-R1 servers ignore it.

Validation answers 4xx with a readable ``{"detail": "..."}`` and the server
stays up: malformed JSON (400), a body over the size limit (413), wrong types,
an empty or too long query list, ``topk`` out of range, an oversize query,
unknown ``allowed_ids``, more hits than ``max_results``, an answer over
``max_response_bytes`` (422), no free search slot within ``queue_timeout_s``
(503). :class:`ConnectionLimits` bounds what one connection may hold (head and
body deadlines, keep-alive, a connection cap that closes the oldest waiting
connection first). ``GET /health`` reports the backend and corpus
size. uvicorn stops gracefully on SIGINT/SIGTERM: it stops accepting, lets
in-flight requests finish (up to ``--graceful-timeout`` s), then ends the
process with that signal's status, so a supervisor sees why it stopped.

Usage::

    python -m agent_gym.retrieval.server --corpus wiki18_100w.jsonl --backend bm25 --port 8000
    python -m agent_gym.retrieval.server --qa-data hotpotqa/dev_distractor_sample_a_300.jsonl  # its paragraphs

Example:
    >>> from agent_gym.retrieval import BM25Retriever, Passage, RemoteRetriever
    >>> app = create_app(BM25Retriever([Passage("a", "Paris", "Paris is in France.")]))  # doctest: +SKIP
    >>> with BackgroundServer(app) as server:  # doctest: +SKIP
    ...     RemoteRetriever(server.url).search("France", k=1)[0].passage.title
    'Paris'
"""

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_gym.core.passages import Passage
from agent_gym.core.serving import BackgroundServer, ConnectionLimits
from agent_gym.datasets import load_qa
from agent_gym.retrieval.base import Retriever
from agent_gym.retrieval.corpus import Hit, dedupe_passages, load_corpus

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = [
    "Backend",
    "BackgroundServer",
    "ConnectionLimits",
    "ServerConfig",
    "build_retriever",
    "create_app",
    "main",
    "settings_from_args",
    "to_document",
]


class Backend(StrEnum):
    """Index backends the server can hold."""

    BM25 = "bm25"
    """bm25s + PyStemmer (no extra needed)."""
    LUCENE = "lucene"
    """pyserini / Anserini (extra ``lucene``; Java 21+)."""
    DENSE = "dense"
    """sentence-transformers all-MiniLM-L6-v2 (extra ``dense``)."""


@dataclass(frozen=True)
class ServerConfig:
    """Request limits of the ``/retrieve`` endpoint (each violation is a 4xx answer, never a crash)."""

    max_queries: int = 1024
    """Most queries in one request."""
    max_topk: int = 100
    """Largest ``topk`` (also the ceiling of ``default_topk``)."""
    default_topk: int = 3
    """``topk`` when the request omits it or sends null (Search-R1 falls back the same way)."""
    max_query_chars: int = 4096
    """Longest single query, in characters."""
    max_body_bytes: int = 8 * 2**20
    """Largest request body, in bytes (413 beyond it)."""
    max_allowed_ids: int = 100_000
    """Most ids in the ``allowed_ids`` extension field."""
    max_results: int = 10_240
    """Most hits one request may ask for: ``len(queries) x topk`` (422 beyond it; 1,024 queries x 10)."""
    max_response_bytes: int = 32 * 2**20
    """Largest answer, in bytes of JSON (422 once the answer being built passes it)."""
    max_inflight: int = 4
    """Requests searched at once; later ones wait for a slot (``/health`` never waits)."""
    queue_timeout_s: float = 30.0
    """How long a request waits for a search slot before a 503 (``Retry-After: 1``)."""

    def __post_init__(self) -> None:
        names = ("max_queries", "max_topk", "default_topk", "max_query_chars", "max_body_bytes", "max_allowed_ids",
                 "max_results", "max_response_bytes", "max_inflight")  # fmt: skip
        for name in names:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if not 0 < self.queue_timeout_s < float("inf"):
            raise ValueError(f"queue_timeout_s must be a positive finite number (got {self.queue_timeout_s})")
        if self.default_topk > self.max_topk:
            raise ValueError(f"default_topk must be <= max_topk (got {self.default_topk} > {self.max_topk})")


def to_document(passage: Passage) -> dict[str, str]:
    """A passage as a Search-R1 document: ``id``, DPR-style ``contents``, ``title``, ``text``."""
    contents = f'"{passage.title}"\n{passage.text}' if passage.title else passage.text
    return {"id": passage.id, "contents": contents, "title": passage.title, "text": passage.text}


def _hit_json(hit: Hit, scores: bool) -> dict[str, Any]:
    doc = to_document(hit.passage)
    return {"document": doc, "score": hit.score} if scores else doc


def build_retriever(backend: str | Backend, passages: Sequence[Passage]) -> Retriever:
    """A ``backend`` index over ``passages`` (optional backends imported only when chosen)."""
    backend = Backend(backend)
    if backend is Backend.LUCENE:
        from agent_gym.retrieval.lucene import LuceneRetriever

        return LuceneRetriever(passages)
    if backend is Backend.DENSE:
        from agent_gym.retrieval.dense import DenseRetriever

        return DenseRetriever(passages, show_progress=True)
    from agent_gym.retrieval.bm25 import BM25Retriever

    return BM25Retriever(passages)


class _BodyLimit:
    """ASGI middleware: 413 for a declared or streamed request body over ``limit`` bytes."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await _send_json(send, 413, f"request body of {int(declared):,} bytes exceeds {self.limit:,}")
            return
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                from fastapi import HTTPException

                raise HTTPException(413, f"request body exceeds {self.limit:,} bytes")
            return message

        await self.app(scope, counted, send)


async def _send_json(send: Any, status: int, detail: str) -> None:
    import json

    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _validation_message(errors: Sequence[Any]) -> tuple[int, str]:
    """Pydantic's error list -> (status, one readable line); never echoes the (possibly huge) input."""
    if any(e.get("type") == "json_invalid" for e in errors):
        first = next(e for e in errors if e.get("type") == "json_invalid")
        return 400, f"malformed JSON body: {first.get('ctx', {}).get('error', first.get('msg'))}"
    parts = []
    for e in errors[:5]:
        where = ".".join(str(x) for x in e.get("loc", ()) if x != "body") or "body"
        parts.append(f"{where}: {e.get('msg')}")
    return 422, "; ".join(parts)


def _check_request(request: Any, config: ServerConfig) -> int:
    """Apply the limits; the ``topk`` to use. Raises ``HTTPException(422)`` with a message."""
    from fastapi import HTTPException

    if request.query is not None:
        if request.queries is not None:
            raise HTTPException(422, "give either queries (a list) or query (one string), not both")
        request.queries = [request.query]
    if not request.queries:
        raise HTTPException(422, "queries must hold at least one query")
    if len(request.queries) > config.max_queries:
        raise HTTPException(422, f"too many queries: {len(request.queries)} > max_queries={config.max_queries}")
    longest = max(len(q) for q in request.queries)
    if longest > config.max_query_chars:
        raise HTTPException(422, f"a query has {longest:,} characters > max_query_chars={config.max_query_chars:,}")
    topk = config.default_topk if request.topk is None else request.topk
    if not 1 <= topk <= config.max_topk:
        raise HTTPException(422, f"topk must lie in [1, {config.max_topk}] (got {topk})")
    if len(request.queries) * topk > config.max_results:
        raise HTTPException(
            422,
            f"{len(request.queries)} queries x topk {topk} = {len(request.queries) * topk:,} hits > "
            f"max_results={config.max_results:,}: split the request or ask a smaller topk",
        )
    if request.allowed_ids is not None and len(request.allowed_ids) > config.max_allowed_ids:
        raise HTTPException(422, f"allowed_ids holds {len(request.allowed_ids):,} ids > {config.max_allowed_ids:,}")
    return topk


def _answer(retriever: Retriever, config: ServerConfig, request: Any, topk: int) -> bytes:
    """The ``/retrieve`` answer as JSON bytes, encoded row by row so that an oversized one stops early."""
    from fastapi import HTTPException

    try:
        results = retriever.search_batch(request.queries, k=topk, allowed=request.allowed_ids)
    except ValueError as exc:  # e.g. allowed_ids naming passages the index lacks
        raise HTTPException(422, f"allowed_ids: {exc}") from None
    rows, size = [], 0
    for hits in results:
        row = json.dumps([_hit_json(h, request.return_scores) for h in hits], ensure_ascii=False, allow_nan=False)
        rows.append(row.encode())
        size += len(rows[-1]) + 1
        if size > config.max_response_bytes:
            raise HTTPException(
                422,
                f"the answer exceeds max_response_bytes={config.max_response_bytes:,}: "
                "split the request or ask a smaller topk",
            )
    return b'{"result":[' + b",".join(rows) + b"]}"


async def _search_slot(slots: asyncio.Semaphore, config: ServerConfig) -> None:
    """Wait for one of ``max_inflight`` search slots; 503 with ``Retry-After`` after ``queue_timeout_s``."""
    from fastapi import HTTPException

    try:
        await asyncio.wait_for(slots.acquire(), config.queue_timeout_s)
    except TimeoutError:
        raise HTTPException(
            503,
            f"busy: {config.max_inflight} searches in flight for {config.queue_timeout_s:g} s; retry later",
            headers={"Retry-After": "1"},
        ) from None


def create_app(retriever: Retriever, config: ServerConfig | None = None, *, backend: str = "bm25") -> "FastAPI":
    """The FastAPI application serving ``retriever`` (``/retrieve``, ``/health``).

    Args:
        retriever: Any :class:`~agent_gym.retrieval.Retriever` (thread-safe:
            requests are searched in FastAPI's worker threads).
        config: Request limits (default :class:`ServerConfig`).
        backend: Its name, reported by ``/health``.
    """
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response
    from pydantic import BaseModel, StrictBool, StrictInt, StrictStr
    from starlette.concurrency import run_in_threadpool

    config = config or ServerConfig()

    # (this module has no `from __future__ import annotations`: FastAPI reads these annotations at runtime)
    class RetrieveRequest(BaseModel):
        """Search-R1's request (unknown fields ignored, as Search-R1's own server does).

        ``query`` (one string) is SkyRL-gym's single-query form of the same
        request (its ``SearchEnv`` sends it); give ``queries`` or ``query``.
        """

        queries: list[StrictStr] | None = None
        query: StrictStr | None = None
        topk: StrictInt | None = None
        return_scores: StrictBool = False
        allowed_ids: list[StrictStr] | None = None

    app = FastAPI(title="agent-gym retrieval server", version="1")
    started = time.time()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        status, detail = _validation_message(exc.errors())
        return JSONResponse({"detail": detail}, status_code=status)

    slots = asyncio.Semaphore(config.max_inflight)

    @app.post("/retrieve")
    async def retrieve(request: RetrieveRequest) -> Response:
        topk = _check_request(request, config)
        await _search_slot(slots, config)
        try:
            body = await run_in_threadpool(_answer, retriever, config, request, topk)
        finally:
            slots.release()
        return Response(body, media_type="application/json")

    @app.get("/health")
    def health() -> dict[str, Any]:
        limits = {k: getattr(config, k) for k in ("max_queries", "max_topk", "max_results", "max_inflight")}
        uptime = round(time.time() - started, 1)
        return {"status": "ok", "backend": backend, "passages": len(retriever.passages), "uptime_s": uptime,
                "limits": limits}  # fmt: skip

    app.add_middleware(_BodyLimit, limit=config.max_body_bytes)
    return app


def _passages(args: argparse.Namespace) -> list[Passage]:
    if args.corpus:
        return load_corpus(args.corpus)
    tasks = load_qa(args.qa_data, data_files=args.data_files, include_unanswerable=True)
    return dedupe_passages(p.to_passage() for t in tasks for p in t.paragraphs)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agent_gym.retrieval.server",
        description="Serve a corpus over Search-R1's /retrieve API (FastAPI + uvicorn).",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--corpus", type=Path, help="corpus file: {id, contents} or {title, text} JSONL/JSON (.gz ok)")
    source.add_argument("--qa-data", type=Path, help="serve the pooled context paragraphs of a QA file or folder")
    p.add_argument("--data-files", help="with --qa-data on a folder: a glob choosing its files")
    p.add_argument("--backend", choices=[b.value for b in Backend], default=Backend.BM25.value)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-queries", type=int, default=ServerConfig.max_queries)
    p.add_argument("--max-topk", type=int, default=ServerConfig.max_topk)
    p.add_argument("--default-topk", type=int, default=ServerConfig.default_topk)
    p.add_argument("--max-query-chars", type=int, default=ServerConfig.max_query_chars)
    p.add_argument("--max-body-bytes", type=int, default=ServerConfig.max_body_bytes, help="413 beyond it")
    p.add_argument("--max-allowed-ids", type=int, default=ServerConfig.max_allowed_ids)
    p.add_argument("--max-results", type=int, default=ServerConfig.max_results, help="queries x topk per request")
    p.add_argument("--max-response-bytes", type=int, default=ServerConfig.max_response_bytes)
    p.add_argument("--max-inflight", type=int, default=ServerConfig.max_inflight, help="searches at once")
    p.add_argument("--queue-timeout", type=float, default=ServerConfig.queue_timeout_s, help="s; then 503")
    p.add_argument("--header-timeout", type=float, default=ConnectionLimits.header_timeout_s, help="s per head")
    p.add_argument("--body-timeout", type=float, default=ConnectionLimits.body_timeout_s, help="s per body")
    p.add_argument("--keep-alive-timeout", type=float, default=ConnectionLimits.keep_alive_timeout_s)
    p.add_argument("--max-connections", type=int, default=ConnectionLimits.max_connections)
    p.add_argument("--graceful-timeout", type=float, default=30.0, help="seconds in-flight requests get at shutdown")
    p.add_argument("--log-level", default="info")
    return p


def settings_from_args(args: argparse.Namespace) -> tuple[ServerConfig, ConnectionLimits]:
    """The request limits and the connection limits that the parsed command line asks for."""
    config = ServerConfig(
        max_queries=args.max_queries,
        max_topk=args.max_topk,
        default_topk=args.default_topk,
        max_query_chars=args.max_query_chars,
        max_body_bytes=args.max_body_bytes,
        max_allowed_ids=args.max_allowed_ids,
        max_results=args.max_results,
        max_response_bytes=args.max_response_bytes,
        max_inflight=args.max_inflight,
        queue_timeout_s=args.queue_timeout,
    )
    limits = ConnectionLimits(args.header_timeout, args.body_timeout, args.keep_alive_timeout, args.max_connections)
    return config, limits


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (``python -m agent_gym.retrieval.server``); returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        import uvicorn
    except ImportError:
        print("the retrieval server needs the 'server' extra: pip install 'agent-r1-gym[server]'")
        return 2
    config, limits = settings_from_args(args)
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    need = limits.max_connections + limits.uvicorn_kwargs()["backlog"] + 64
    if soft != resource.RLIM_INFINITY and need > soft:
        print(
            f"[serve] warning: --max-connections {limits.max_connections} with its accept burst needs ~{need} "
            f"open files, over this process's limit of {soft}: raise `ulimit -n` or lower --max-connections"
        )
    t0 = time.perf_counter()
    passages = _passages(args)
    print(f"[serve] {len(passages):,} passages loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    t0 = time.perf_counter()
    retriever = build_retriever(args.backend, passages)
    print(f"[serve] {args.backend} index ready in {time.perf_counter() - t0:.1f} s", flush=True)
    app = create_app(retriever, config, backend=args.backend)
    print(f"[serve] POST http://{args.host}:{args.port}/retrieve  GET /health  (Ctrl-C stops)", flush=True)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=args.graceful_timeout,
        **limits.uvicorn_kwargs(),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The /retrieve server under load, against in-process search in the same run; and the client against hostile servers.

1. **Throughput and latency.** The corpus is the pooled context paragraphs of
   the shared HotpotQA dev samples (10.8k paragraphs; the embedded sample when
   ``../shared/data`` is missing), the queries are the questions. The server
   (``python -m agent_gym.retrieval.server``, bm25 backend) runs in its own
   process; clients are threads sharing one :class:`RemoteRetriever` (one
   pooled httpx client), one query per request, at concurrency 1, 8 and 64.
   Reference: ``BM25Retriever.search`` in this process over the same query
   list. Printed: queries/s, p50 and p99 latency, and the ratio server /
   in-process.
2. **Load test.** ``load_requests`` requests at concurrency 8 (batches of
   ``load_batch`` queries): errors (must be 0) and the server's RSS before
   and after (flat memory: growth should be a few MB at most).
3. **Hostile servers.** The client with a ``hostile_deadline`` s deadline
   against real local servers that drip one byte every 0.5 s, hang without
   answering, send a 300 MB body, answer 500 every time, or answer non-JSON:
   the wait for each (the reference is the deadline: ratio = wait / deadline)
   and the client's RSS growth (the reference is the body size).

Usage:
    python benchmarks/retrieval_server.py
    python benchmarks/retrieval_server.py --queries 500 --load-requests 2000 --no-hostile
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import psutil
import tyro
from tqdm import tqdm

from agent_gym.datasets import embedded_path, load_qa
from agent_gym.retrieval import BM25Retriever, Passage, RemoteRetriever, RemoteRetrieverError, dedupe_passages

HOTPOT_FILES = [
    "hotpotqa/dev_distractor_sample_a_300.jsonl",
    "hotpotqa/dev_distractor_sample_b_300.jsonl",
    "hotpotqa/dev_distractor_sample_c_500.jsonl",
]


@dataclass
class Args:
    """Benchmark settings."""

    data_dir: str = str(Path(__file__).resolve().parents[1].parent / "shared" / "data")
    """Folder with the shared data; the embedded sample is used when the HotpotQA files are missing."""
    queries: int = 2000
    """Queries per concurrency level (questions reused cyclically)."""
    k: int = 5
    """Hits per query."""
    concurrency: str = "1,8,64"
    """Comma-separated client thread counts."""
    load_requests: int = 5000
    """Requests in the load test."""
    load_batch: int = 4
    """Queries per request in the load test."""
    hostile: bool = True
    """Run the hostile-server section."""
    hostile_deadline: float = 2.0
    """The client's total deadline against hostile servers, in seconds."""
    hostile_body_mb: int = 300
    """Size of the huge body the hostile server sends."""


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """The command line's settings: one ``--flag`` per :class:`Args` field (``--help`` shows their docs)."""
    return tyro.cli(Args, description=__doc__, args=argv)


def corpus_and_queries(args: Args) -> tuple[list[Passage], list[str], str]:
    files = [Path(args.data_dir) / f for f in HOTPOT_FILES]
    paths = files if all(f.is_file() for f in files) else [embedded_path("hotpotqa")]
    tasks = [t for p in paths for t in load_qa(p)]
    passages = dedupe_passages(p.to_passage() for t in tasks for p in t.paragraphs)
    label = "shared HotpotQA dev samples" if paths == files else "embedded HotpotQA sample"
    return passages, [t.question for t in tasks], label


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def in_process(retriever: BM25Retriever, queries: list[str], k: int) -> tuple[float, list[float]]:
    latencies = []
    start = time.perf_counter()
    for q in queries:
        t0 = time.perf_counter()
        retriever.search(q, k=k)
        latencies.append(time.perf_counter() - t0)
    return len(queries) / (time.perf_counter() - start), latencies


def through_server(remote: RemoteRetriever, queries: list[str], k: int, threads: int) -> tuple[float, list[float]]:
    def one(q: str) -> float:
        t0 = time.perf_counter()
        remote.search(q, k=k)
        return time.perf_counter() - t0

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        latencies = list(pool.map(one, queries))
    return len(queries) / (time.perf_counter() - start), latencies


def batched(remote: RemoteRetriever, queries: list[str], k: int, size: int) -> float:
    """Queries/s with ``size`` queries per request, one client thread."""
    start = time.perf_counter()
    for i in range(0, len(queries), size):
        remote.search_batch(queries[i : i + size], k=k)
    return len(queries) / (time.perf_counter() - start)


def start_server(passages: list[Passage], tmp: Path) -> tuple[subprocess.Popen, str]:
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"title": p.title, "text": p.text}) for p in passages), encoding="utf-8")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "agent_gym.retrieval.server", "--corpus", str(corpus), "--port", str(port)]
    proc = subprocess.Popen([*cmd, "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            httpx.get(f"{url}/health", timeout=1).raise_for_status()
            return proc, f"{url}/retrieve"
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the retrieval server did not start") from None
            time.sleep(0.2)


def load_test(
    remote: RemoteRetriever, queries: list[str], args: Args, server_pid: int
) -> tuple[int, float, float, float]:
    """(errors, server RSS MB before, after, queries/s) over ``load_requests`` batched requests at concurrency 8."""
    server = psutil.Process(server_pid)
    before = server.memory_info().rss / 2**20
    batches = [
        [queries[(i * args.load_batch + j) % len(queries)] for j in range(args.load_batch)]
        for i in range(args.load_requests)
    ]
    errors = 0
    start = time.perf_counter()

    def one(batch: list[str]) -> int:
        try:
            remote.search_batch(batch, k=args.k)
            return 0
        except RemoteRetrieverError:
            return 1

    with ThreadPoolExecutor(8) as pool:
        for failed in tqdm(pool.map(one, batches), total=len(batches), desc="load test", unit="req"):
            errors += failed
    qps = len(batches) * args.load_batch / (time.perf_counter() - start)
    return errors, before, server.memory_info().rss / 2**20, qps


# ------------------------------------------------------------------ hostile servers
class Hostile(BaseHTTPRequestHandler):
    mode = "drip"
    body_mb = 300

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        try:
            getattr(self, f"_{self.mode}")()
        except OSError:  # the client hung up: what a capped, deadlined client does
            pass

    def _drip(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        for _ in range(100000):
            self.wfile.write(b" ")
            self.wfile.flush()
            time.sleep(0.5)

    def _hang(self) -> None:
        time.sleep(600)

    def _huge(self) -> None:
        self.send_response(200)
        self.send_header("Connection", "close")
        self.end_headers()
        chunk = b"[" * 2**20
        for _ in range(self.body_mb):
            self.wfile.write(chunk)

    def _error500(self) -> None:
        self.send_error(500, "index exploded")

    def _not_json(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "13")
        self.end_headers()
        self.wfile.write(b"<html></html>")

    def log_message(self, *args: object) -> None:
        pass


class HostileServer(ThreadingHTTPServer):
    daemon_threads = True


def hostile_section(args: Args) -> list[tuple[str, float, float]]:
    """(mode, wait s, client RSS growth MB) for each hostile server."""
    Hostile.body_mb = args.hostile_body_mb
    server = HostileServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/retrieve"
    me = psutil.Process(os.getpid())
    rows = []
    for mode in ("drip", "hang", "huge", "error500", "not_json"):
        Hostile.mode = mode
        remote = RemoteRetriever(url, timeout=args.hostile_deadline, retries=2, backoff=0.1)
        rss = me.memory_info().rss
        t0 = time.perf_counter()
        try:
            remote.search("who wrote Hamlet", k=5)
            outcome = "answered (unexpected)"
        except RemoteRetrieverError as exc:
            outcome = " ".join(str(exc).replace(url, "URL").split())[:72]
        wait = time.perf_counter() - t0
        rows.append((f"{mode}: {outcome}", wait, (me.memory_info().rss - rss) / 2**20))
        remote.close()
    server.shutdown()
    return rows


def report(title: str, rows: list[tuple[str, ...]]) -> None:
    print(f"\n{title}")
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)))


def main(args: Args) -> None:
    passages, questions, label = corpus_and_queries(args)
    queries = [questions[i % len(questions)] for i in range(args.queries)]
    print(f"corpus: {len(passages):,} passages ({label}); {len(queries):,} question queries, k={args.k}")
    local = BM25Retriever(passages)
    local.search(queries[0], k=args.k)  # warm-up
    ref_qps, ref_lat = in_process(local, queries, args.k)
    rows = [("client", "queries/s", "p50 ms", "p99 ms", "ratio q/s (server / in-process)")]
    rows.append(("in-process BM25Retriever.search (reference)", f"{ref_qps:,.0f}",
                 f"{percentile(ref_lat, 50) * 1e3:.2f}", f"{percentile(ref_lat, 99) * 1e3:.2f}", "1"))  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(passages, Path(tmp))
        try:
            remote = RemoteRetriever(url, timeout=30)
            remote.search(queries[0], k=args.k)  # warm-up: connection, server threads
            for threads in (int(c) for c in args.concurrency.split(",")):
                print(f"server at concurrency {threads} ...", flush=True)
                qps, lat = through_server(remote, queries, args.k, threads)
                rows.append((f"server, {threads} client threads", f"{qps:,.0f}", f"{percentile(lat, 50) * 1e3:.2f}",
                             f"{percentile(lat, 99) * 1e3:.2f}", f"{qps / ref_qps:.3f}"))  # fmt: skip
            qps = batched(remote, queries, args.k, 64)
            rows.append(("server, 1 client thread, 64 queries per request", f"{qps:,.0f}", "-", "-",
                         f"{qps / ref_qps:.3f}"))  # fmt: skip
            report("Throughput and latency (one query per request unless stated)", rows)
            errors, before, after, qps = load_test(remote, queries, args, proc.pid)
            report(
                "Load test (concurrency 8)",
                [
                    ("requests", "queries", "queries/s", "errors", "server RSS before MB", "after MB", "growth MB"),
                    (
                        f"{args.load_requests:,}",
                        f"{args.load_requests * args.load_batch:,}",
                        f"{qps:,.0f}",
                        str(errors),
                        f"{before:.1f}",
                        f"{after:.1f}",
                        f"{after - before:+.1f}",
                    ),
                ],
            )
        finally:
            proc.terminate()
            proc.wait(30)
    if args.hostile:
        rows = [("hostile server: client error", "wait s", "wait / deadline", "client RSS growth MB")]
        for name, wait, grew in hostile_section(args):
            rows.append((name, f"{wait:.2f}", f"{wait / args.hostile_deadline:.2f}", f"{grew:+.1f}"))
        report(f"Hostile servers (deadline {args.hostile_deadline} s, huge body {args.hostile_body_mb} MB)", rows)


if __name__ == "__main__":
    main(parse_args())

"""The /retrieve server under amplifying requests, a busy index, silent and slow clients (issue 25, item 6)."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from agent_gym.retrieval import BM25Retriever, Passage

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
from agent_gym.retrieval.server import (
    BackgroundServer,
    ConnectionLimits,
    ServerConfig,
    _parser,
    create_app,
    settings_from_args,
)

DOCS = [Passage(str(i), f"T{i}", f"passage number {i} about rivers and {'x' * 40}") for i in range(200)]
LOCAL = BM25Retriever(DOCS)


def _health(server: BackgroundServer, timeout: float = 3.0) -> httpx.Response:
    return httpx.get(server.url.replace("/retrieve", "/health"), timeout=timeout)


def test_queries_times_topk_is_capped_before_any_search() -> None:
    with BackgroundServer(create_app(LOCAL, ServerConfig(max_results=40))) as server:
        ok = httpx.post(server.url, json={"queries": ["rivers"] * 8, "topk": 5})  # 8 x 5 = 40: at the cap
        assert ok.status_code == 200 and [len(r) for r in ok.json()["result"]] == [5] * 8
        over = httpx.post(server.url, json={"queries": ["rivers"] * 8, "topk": 6})  # 48 > 40
        assert over.status_code == 422
        assert over.json()["detail"].startswith("8 queries x topk 6 = 48 hits > max_results=40")
    with BackgroundServer(create_app(LOCAL)) as server:  # the issue's request: 1,024 queries x topk 100
        started = time.perf_counter()
        r = httpx.post(server.url, json={"queries": ["rivers"] * 1024, "topk": 100}, timeout=10)
        assert r.status_code == 422 and "102,400 hits > max_results=10,240" in r.json()["detail"]
        assert time.perf_counter() - started < 2.0 and len(r.content) < 300


def test_an_answer_over_max_response_bytes_is_refused() -> None:
    with BackgroundServer(create_app(LOCAL)) as server:  # the size of one query's answer, through the server
        one = httpx.post(server.url, json={"queries": ["rivers"], "topk": 3})
    limit = len(one.content) * 2  # two queries fit (their rows plus the wrapper), three do not
    with BackgroundServer(create_app(LOCAL, ServerConfig(max_response_bytes=limit))) as server:
        assert httpx.post(server.url, json={"queries": ["rivers"] * 2, "topk": 3}).status_code == 200
        r = httpx.post(server.url, json={"queries": ["rivers"] * 3, "topk": 3})
        assert r.status_code == 422 and f"exceeds max_response_bytes={limit:,}" in r.json()["detail"]


class _Slow:
    passages = DOCS

    def search_batch(self, queries, k=5, allowed=None):
        time.sleep(1.0)
        return LOCAL.search_batch(queries, k, allowed)


def test_searches_in_flight_are_capped_and_health_still_answers() -> None:
    config = ServerConfig(max_inflight=1, queue_timeout_s=0.3)
    with BackgroundServer(create_app(_Slow(), config)) as server:  # type: ignore[arg-type]
        first: dict = {}
        thread = threading.Thread(target=lambda: first.update(r=httpx.post(server.url, json={"queries": ["a"]})))
        thread.start()
        time.sleep(0.2)  # the first request holds the only slot
        started = time.perf_counter()
        busy = httpx.post(server.url, json={"queries": ["b"]})
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
        assert busy.json()["detail"].startswith("busy: 1 searches in flight")
        assert 0.25 < time.perf_counter() - started < 0.9  # it waited queue_timeout_s, not the whole search
        health = _health(server)
        assert health.status_code == 200 and health.json()["limits"]["max_inflight"] == 1
        thread.join(5)
        assert first["r"].status_code == 200


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` within ``seconds`` (recv gives b"" or a reset)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_slow_head_and_a_slow_body_are_cut_at_their_deadlines() -> None:
    limits = ConnectionLimits(header_timeout_s=0.5, body_timeout_s=0.5)
    with BackgroundServer(create_app(LOCAL), limits=limits) as server:
        silent = socket.create_connection((server.host, server.port))
        drip = socket.create_connection((server.host, server.port))
        drip.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\n")  # a head never finished
        body = socket.create_connection((server.host, server.port))
        body.sendall(b'POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"queries"')
        started = time.perf_counter()
        assert _closed_within(silent, 3) and _closed_within(drip, 3) and _closed_within(body, 3)
        assert time.perf_counter() - started < 2.0
        for s in (silent, drip, body):
            s.close()
        # a client that is not slow is not touched: two requests on one kept-alive connection
        with httpx.Client() as client:
            for _ in range(2):
                assert client.post(server.url, json={"queries": ["rivers"]}).status_code == 200
                time.sleep(0.3)


def test_a_flood_of_idle_connections_does_not_starve_health() -> None:
    limits = ConnectionLimits(header_timeout_s=60, max_connections=20)
    with BackgroundServer(create_app(LOCAL), limits=limits) as server:
        idle = [socket.create_connection((server.host, server.port)) for _ in range(60)]
        time.sleep(0.3)
        health = _health(server)  # one more connection: the oldest waiting one makes room
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert _closed_within(idle[0], 2)  # the oldest idle ones were closed ...
        assert not _closed_within(idle[-1], 0.2)  # ... the newest is still open (within the cap)
        for s in idle:
            s.close()


def test_every_limit_is_a_flag() -> None:
    args = _parser().parse_args(["--corpus", "c.jsonl", "--max-body-bytes", "1000", "--max-allowed-ids", "7",
                                 "--max-results", "50", "--max-response-bytes", "9000", "--max-inflight", "2",
                                 "--queue-timeout", "1.5", "--header-timeout", "3", "--body-timeout", "4",
                                 "--keep-alive-timeout", "2", "--max-connections", "64"])  # fmt: skip
    assert (args.max_body_bytes, args.max_allowed_ids, args.max_results, args.max_response_bytes) == (1000, 7, 50, 9000)
    assert (args.max_inflight, args.queue_timeout, args.header_timeout, args.body_timeout) == (2, 1.5, 3, 4)
    assert (args.keep_alive_timeout, args.max_connections) == (2, 64)
    more = _parser().parse_args(["--corpus", "c.jsonl", "--max-queries", "11", "--max-topk", "12",
                                 "--default-topk", "5", "--max-query-chars", "300"])  # fmt: skip
    config, limits = settings_from_args(args)  # each flag reaches its own field (main builds the server so)
    assert (config.max_body_bytes, config.max_allowed_ids, config.max_results, config.max_response_bytes) == (
        1000, 7, 50, 9000)  # fmt: skip
    assert (config.max_inflight, config.queue_timeout_s) == (2, 1.5)
    assert limits == ConnectionLimits(header_timeout_s=3, body_timeout_s=4, keep_alive_timeout_s=2, max_connections=64)
    config, _ = settings_from_args(more)
    assert (config.max_queries, config.max_topk, config.default_topk, config.max_query_chars) == (11, 12, 5, 300)


@pytest.mark.parametrize("bad", [{"header_timeout_s": 0}, {"body_timeout_s": float("inf")}, {"max_connections": 0}])
def test_connection_limits_refuse_nonsense(bad) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        ConnectionLimits(**bad)


def test_health_answers_under_1100_idle_connections_at_a_1024_file_limit(tmp_path) -> None:
    """The issue's probe against the real command: before, accept() failed with EMFILE and /health timed out."""
    import resource
    import subprocess
    import sys

    from agent_gym.datasets import embedded_path

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1300:
        pytest.skip(f"this process may open only {hard} files; the probe needs 1,100 client sockets")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1300), hard))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cmd = [sys.executable, "-m", "agent_gym.retrieval.server", "--qa-data", str(embedded_path("hotpotqa")),
           "--port", str(port), "--log-level", "warning"]  # fmt: skip
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        cmd, stdout=log, stderr=log, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    )
    base = f"http://127.0.0.1:{port}"
    idle: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(base + "/health", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and server.poll() is None, (tmp_path / "server.log").read_text()
                time.sleep(0.2)
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(1100)]
        time.sleep(0.5)
        health = httpx.get(base + "/health", timeout=5)
        assert health.status_code == 200
        assert "Too many open files" not in (tmp_path / "server.log").read_text()
    finally:
        for s in idle:
            s.close()
        server.terminate()
        server.wait(20)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

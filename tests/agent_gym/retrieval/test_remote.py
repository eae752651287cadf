"""RemoteRetriever against real local HTTP servers, honest and hostile (issue 10 point 5)."""

import gzip
import json
import pickle
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent_gym.retrieval import BM25Retriever, Passage, RemoteRetriever, RemoteRetrieverError, Retriever
from agent_gym.tools import SearchTool

DOCS = [
    Passage("0", "Paris", "Paris is the capital of France."),
    Passage("1", "Tokyo", "Tokyo is the capital of Japan."),
    Passage("2", "Lima", "Lima is the capital of Peru."),
    Passage("3", "Seine", "The Seine flows through Paris."),
]
LOCAL = BM25Retriever(DOCS)
GZIP_BOMB = gzip.compress(b"\0" * 64 * 2**20, compresslevel=9)
try:
    import brotli

    BROTLI_BOMB = brotli.compress(b"\0" * 64 * 2**20)
except ImportError:  # brotli is not a dependency: the body is refused by its header, unread, either way
    BROTLI_BOMB = b"\x0b" * 1642


def _answer(body: dict) -> bytes:
    result = [
        [{"document": {"id": h.passage.id, "contents": f'"{h.passage.title}"\n{h.passage.text}'}, "score": h.score}
         for h in LOCAL.search(q, k=min(body["topk"], len(DOCS)))]
        for q in body["queries"]
    ]  # fmt: skip
    return json.dumps({"result": result}).encode()


class Handler(BaseHTTPRequestHandler):
    """A Search-R1-style /retrieve endpoint over LOCAL; ``mode`` selects the misbehaviour."""

    protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse is visible
    mode = "ok"
    requests: list[dict] = []
    ports: list[int] = []
    sent_bytes = 0

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Handler.requests.append(body)
        Handler.ports.append(self.client_address[1])
        getattr(self, f"_{self.mode}")(body)

    def _send(self, status: int, data: bytes, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data) if length is None else length))
        self.end_headers()
        self.wfile.write(data)

    def _ok(self, body):
        self._send(200, _answer(body))

    def _error(self, body):
        self._send(500, b'{"detail": "index exploded"}')

    def _flaky(self, body):  # two 503s, then a good answer
        self._send(503, b"busy") if len(Handler.requests) <= 2 else self._ok(body)

    def _bad_request(self, body):
        self._send(422, b'{"detail": "topk must be <= 100"}')

    def _garbage(self, body):
        self._send(200, b"<html>not json</html>")

    def _deep(self, body):
        self._send(200, b'{"result": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")

    def _huge_int(self, body):
        self._send(200, b'{"result": ' + b"9" * 5000 + b"}")

    def _short(self, body):
        data = json.loads(_answer(body))
        self._send(200, json.dumps({"result": data["result"][:-1]}).encode())

    def _no_contents(self, body):
        self._send(200, json.dumps({"result": [[{"document": {"id": "x"}, "score": 1.0}]]}).encode())

    def _slow(self, body):
        time.sleep(1.0)
        self._ok(body)

    def _drip(self, body):  # headers at once, then one byte every 0.1 s: each read succeeds, the whole never ends
        data = _answer(body)
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        for i in range(len(data)):
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()
            time.sleep(0.1)

    def _huge(self, body):  # 300 MB without a Content-Length: only streaming with a cap stops it
        self.send_response(200)
        self.send_header("Connection", "close")
        self.end_headers()
        chunk = b"x" * 65536
        try:
            for _ in range(300 * 16):
                self.wfile.write(chunk)
                Handler.sent_bytes += len(chunk)
        except OSError:
            pass
        self.close_connection = True

    def _announced_huge(self, body):
        self._send(200, b"{}", length=300 * 2**20)
        self.close_connection = True

    def _encoded(self, encoding: str, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", encoding)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _gzip_bomb(self, body):  # 64 KiB on the wire, 64 MiB decoded
        self._encoded("gzip", GZIP_BOMB)

    def _gzip_ok(self, body):
        self._encoded("gzip", gzip.compress(_answer(body)))

    def _brotli_bomb(self, body):  # never asked for: refused before a byte is decoded
        self._encoded("br", BROTLI_BOMB)

    def _hang_up(self, body):  # close the connection without an answer
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, *args):
        pass


class _Server(ThreadingHTTPServer):
    request_queue_size = 64  # the default listen backlog of 5 resets concurrent connections
    daemon_threads = True


@pytest.fixture
def server() -> Iterator[str]:
    Handler.mode, Handler.requests, Handler.ports, Handler.sent_bytes = "ok", [], [], 0
    httpd = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/retrieve"
    httpd.shutdown()
    httpd.server_close()


def test_matches_the_server_index(server):
    remote = RemoteRetriever(server, timeout=5)
    assert isinstance(remote, Retriever)
    hits = remote.search("capital of Japan", k=2)
    assert [(h.passage, h.rank) for h in hits] == [(h.passage, h.rank) for h in LOCAL.search("capital of Japan", 2)]
    assert Handler.requests[0] == {"queries": ["capital of Japan"], "topk": 2, "return_scores": True}
    assert remote.title_of("1") == "Tokyo" and remote.title_of("nope") is None


def test_batch_allowed_and_empty_queries(server):
    remote = RemoteRetriever(server, timeout=5, overfetch=2, max_batch=2)
    out = remote.search_batch(["Paris", "", "capital", "Peru"], k=1, allowed={"3", "2"})
    # this server ignores allowed_ids (like Search-R1's): "capital" -> its top 2 (= overfetch * k) are
    # Paris and Tokyo, none allowed -> no hit (documented)
    assert [[h.passage.id for h in hits] for hits in out] == [["3"], [], [], ["2"]]
    assert [r["queries"] for r in Handler.requests] == [["Paris", "capital"], ["Peru"]]
    assert all(r["topk"] == 2 and r["allowed_ids"] == ["2", "3"] for r in Handler.requests)


def test_one_connection_is_reused_across_searches(server):
    remote = RemoteRetriever(server, timeout=5)
    for _ in range(5):
        remote.search("Paris")
    assert len(Handler.ports) == 5 and len(set(Handler.ports)) == 1


def test_many_threads_share_one_retriever(server):
    remote = RemoteRetriever(server, timeout=10)
    queries = ["Paris", "capital of Japan", "Peru", "Seine river"] * 20
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda q: [h.passage.id for h in remote.search(q, k=3)], queries))
    assert got == [[h.passage.id for h in LOCAL.search(q, k=3)] for q in queries]


def test_pickles_without_its_connections(server):
    remote = RemoteRetriever(server, timeout=5)
    remote.search("Paris")
    clone = pickle.loads(pickle.dumps(remote))
    assert clone._client is None and clone.url == remote.url
    assert [h.passage.id for h in clone.search("Peru", k=1)] == ["2"]


def test_retries_5xx_with_backoff_then_succeeds(server):
    Handler.mode = "flaky"
    start = time.perf_counter()
    hits = RemoteRetriever(server, timeout=5, retries=2, backoff=0.1).search("Paris", k=1)
    assert [h.passage.id for h in hits] == ["0"]
    assert len(Handler.requests) == 3
    assert time.perf_counter() - start >= 0.1 + 0.2  # backoff 0.1 s, then doubled


@pytest.mark.parametrize(
    ("mode", "message", "attempts"),
    [
        ("error", r"HTTP 500: \{\"detail\": \"index exploded\"\} \(gave up after 3 attempts\)", 3),
        ("bad_request", r"answered HTTP 422: \{\"detail\": \"topk must be <= 100\"\}", 1),
        ("garbage", "not JSON", 1),
        ("deep", "not JSON: JSON nested too deeply", 1),
        ("huge_int", r"not JSON: undecodable JSON value \(Exceeds the limit", 1),
        ("short", "one list per query", 1),
        ("no_contents", "hit without 'contents' or 'text'", 1),
        ("announced_huge", r"announced a 314,572,800-byte answer \(limit 1,048,576 bytes\)", 1),
        ("hang_up", r"cannot reach the server \(RemoteProtocolError.*gave up after 3 attempts", 3),
    ],
)
def test_server_faults_raise_clear_errors(server, mode, message, attempts):
    Handler.mode = mode
    remote = RemoteRetriever(server, timeout=5, retries=2, backoff=0.01, max_response_bytes=2**20)
    with pytest.raises(RemoteRetrieverError, match=message):
        remote.search("Paris")
    assert len(Handler.requests) == attempts


@pytest.mark.parametrize("mode", ["slow", "drip"])
def test_total_deadline_bounds_slow_and_dripping_servers(server, mode):
    """The drip server answers every single read within 0.1 s: only a total deadline stops it."""
    Handler.mode = mode
    start = time.perf_counter()
    with pytest.raises(RemoteRetrieverError, match=r"within the 0\.4 s deadline"):
        RemoteRetriever(server, timeout=0.4).search("Paris")
    assert time.perf_counter() - start < 0.7


def test_huge_body_is_abandoned_at_the_cap(server):
    Handler.mode = "huge"
    start = time.perf_counter()
    with pytest.raises(RemoteRetrieverError, match=r"sent more than 1,048,576 bytes"):
        RemoteRetriever(server, timeout=10, max_response_bytes=2**20).search("Paris")
    assert time.perf_counter() - start < 3.0
    time.sleep(0.2)
    assert Handler.sent_bytes < 100 * 2**20  # the client hung up long before the server's 300 MB


def _peak_mb(call) -> float:
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak / 2**20


def test_a_compressed_body_is_capped_at_its_decoded_size(server):
    """64 KiB of gzip that decodes to 64 MiB: abandoned at the 1 MiB cap, never decoded past it (issue 25.1)."""
    Handler.mode = "gzip_bomb"
    remote = RemoteRetriever(server, timeout=10, max_response_bytes=2**20)

    def search():
        with pytest.raises(RemoteRetrieverError, match=r"sent more than 1,048,576 bytes \(max_response_bytes, decoded"):
            remote.search("Paris")

    start = time.perf_counter()
    assert len(GZIP_BOMB) < 2**17 and _peak_mb(search) < 8  # letting httpx decode it held 64 MiB at once
    assert time.perf_counter() - start < 3.0


def test_an_encoding_not_asked_for_is_refused_unread_and_gzip_is_read(server):
    Handler.mode = "brotli_bomb"
    start = time.perf_counter()
    with pytest.raises(RemoteRetrieverError, match="encoded as 'br', which was not asked for"):
        RemoteRetriever(server, timeout=10).search("Paris")
    assert time.perf_counter() - start < 2.0
    assert Handler.requests  # it did reach the server: the refusal is of the answer
    Handler.mode = "gzip_ok"  # a proxy that compresses anyway: decoded within the cap, same hits
    hits = RemoteRetriever(server, timeout=10).search("capital of Japan", k=2)
    assert [h.passage for h in hits] == [h.passage for h in LOCAL.search("capital of Japan", 2)]


def test_unreachable_server_is_an_error_observation_in_search_tool():
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tool = SearchTool(RemoteRetriever(f"http://127.0.0.1:{port}/retrieve", timeout=2, backoff=0.01))
    result = tool.call({"query": "Paris"})
    assert not result.ok
    assert "cannot reach the server (ConnectError" in result.content and "gave up after 3 attempts" in result.content


def test_constructor_validation():
    with pytest.raises(ValueError, match="http://"):
        RemoteRetriever("127.0.0.1:8000")
    with pytest.raises(ValueError, match="timeout"):
        RemoteRetriever("http://x/retrieve", timeout=0)
    with pytest.raises(ValueError, match="max_response_bytes must be >= 1"):
        RemoteRetriever("http://x/retrieve", retries=-1)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        RemoteRetriever("http://x/retrieve").search("q", k=0)
    with pytest.raises(TypeError, match="not a single string"):
        RemoteRetriever("http://x/retrieve").search_batch("q")

import json
import threading
import time
from collections.abc import Iterator
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


class Handler(BaseHTTPRequestHandler):
    """A Search-R1-style /retrieve endpoint over LOCAL; ``mode`` selects misbehaviour."""

    mode = "ok"
    requests: list[dict] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Handler.requests.append(body)
        if self.mode == "slow":
            time.sleep(1.0)
        if self.mode == "error":
            self.send_error(500, "index exploded")
            return
        result = [
            [{"document": {"id": h.passage.id, "contents": f'"{h.passage.title}"\n{h.passage.text}'}, "score": h.score}
             for h in LOCAL.search(q, k=min(body["topk"], len(DOCS)))]
            for q in body["queries"]
        ]  # fmt: skip
        payload = {"result": result[:-1] if self.mode == "short" else result}
        data = b"not json" if self.mode == "garbage" else json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Handler.mode, Handler.requests = "ok", []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
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


def test_batch_allowed_and_empty_queries(server):
    remote = RemoteRetriever(server, timeout=5, overfetch=2, max_batch=2)
    out = remote.search_batch(["Paris", "", "capital", "Peru"], k=1, allowed={"2", "3"})
    # "capital": the server's top 2 (= overfetch * k) are Paris and Tokyo, none allowed -> no hit (documented)
    assert [[h.passage.id for h in hits] for hits in out] == [["3"], [], [], ["2"]]
    assert [r["queries"] for r in Handler.requests] == [["Paris", "capital"], ["Peru"]]
    assert all(r["topk"] == 2 for r in Handler.requests)


@pytest.mark.parametrize(
    ("mode", "message"),
    [("error", "HTTP 500"), ("garbage", "not JSON"), ("short", "one list per query"), ("slow", "within 0.2 s")],
)
def test_server_faults_raise_clear_errors(server, mode, message):
    Handler.mode = mode
    start = time.perf_counter()
    with pytest.raises(RemoteRetrieverError, match=message):
        RemoteRetriever(server, timeout=0.2).search("Paris")
    assert time.perf_counter() - start < 0.9  # the time-out fires; nothing hangs


def test_unreachable_server_is_an_error_observation_in_search_tool():
    tool = SearchTool(RemoteRetriever("http://127.0.0.1:9/retrieve", timeout=0.5))
    result = tool.call({"query": "Paris"})
    assert not result.ok and "cannot reach" in result.content


def test_constructor_validation():
    with pytest.raises(ValueError, match="http://"):
        RemoteRetriever("127.0.0.1:8000")
    with pytest.raises(ValueError, match="timeout"):
        RemoteRetriever("http://x/retrieve", timeout=0)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        RemoteRetriever("http://x/retrieve").search("q", k=0)

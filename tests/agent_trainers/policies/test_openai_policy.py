"""OpenAIPolicy over a real local HTTP server: text rollouts, retries, total deadline, size cap, clear errors."""

from __future__ import annotations

import gzip
import json
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent_trainers.policies import ChatPolicy, EndpointError, OpenAIPolicy, SamplingParams, TokenPolicy
from agent_trainers.rollout import RolloutConfig, check_trajectory, rollout
from tests.agent_trainers.conftest import LOOKUP_ID

GZIP_BOMB = gzip.compress(b"\0" * 64 * 2**20, compresslevel=9)
REPLY = {"choices": [{"message": {"role": "assistant", "content": "<answer>Paris"}, "finish_reason": "stop"}]}


class _ChatHandler(BaseHTTPRequestHandler):
    """Behaves according to the request's ``model`` field."""

    requests: list[dict] = []
    counts: dict[str, int] = {}

    def _send(self, status: int, data: bytes, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data) if length is None else length))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        model = body["model"]
        type(self).requests.append(
            {
                "path": self.path,
                "auth": self.headers.get("Authorization"),
                "encoding": self.headers.get("Accept-Encoding"),
                **body,
            }
        )
        n = type(self).counts[model] = type(self).counts.get(model, 0) + 1
        if model == "down" or (model in ("flaky", "busy-then-drip") and n == 1):
            self._send(503, b'{"error": "overloaded"}')
        elif model == "bad":
            self._send(400, b'{"error": "max_tokens is too large"}')
        elif model == "parts":  # content as a list of parts, as some OpenAI-compatible servers answer
            parts = [{"type": "text", "text": "<answer>Pa"}, {"type": "image_url"}, {"type": "text", "text": "ris"}]
            self._send(
                200, json.dumps({"choices": [{"message": {"content": parts}, "finish_reason": "length"}]}).encode()
            )
        elif model == "odd-content":
            self._send(200, json.dumps({"choices": [{"message": {"content": 42}}]}).encode())
        elif model == "deep":
            self._send(200, b'{"a":' * 100_000 + b"1" + b"}" * 100_000)
        elif model == "garbage":
            self._send(200, b"<html>not json</html>")
        elif model == "huge":
            self._send(200, b"x" * 2_000_000)
        elif model == "drip":  # one byte every 0.2 s: per-read time-outs never fire, the total deadline must
            self._send(200, b"", length=10_000)
            for _ in range(100):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.2)
        elif model in ("drip-headers", "busy-then-drip"):  # the status line and headers a byte per 0.2 s: no read
            # ever times out
            for i, byte in enumerate(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" * 20):
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.2 if i < 60 else 0)
        elif model in ("gzip-bomb", "br"):  # 64 KiB of gzip that decodes to 64 MiB; an encoding not asked for
            data = GZIP_BOMB if model == "gzip-bomb" else b"\x0b" * 1642
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip" if model == "gzip-bomb" else "br")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif model == "gzip":  # a proxy that compresses though identity was asked for
            data = gzip.compress(json.dumps(REPLY).encode())
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:  # like OpenAI servers: the matched stop string is dropped from the content
            self._send(200, json.dumps(REPLY).encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def chat_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _ChatHandler.requests, _ChatHandler.counts = [], {}
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def ask(policy: OpenAIPolicy) -> str:
    (gen,) = policy.generate_chat([[{"role": "user", "content": "q"}]], SamplingParams(max_new_tokens=4))
    return gen.text or ""


def test_openai_policy_plays_a_text_rollout(chat_server, smollm2_tokenizer):
    policy = OpenAIPolicy(chat_server, "smol", api_key="k")
    assert isinstance(policy, ChatPolicy) and not isinstance(policy, TokenPolicy)
    trajs = rollout(policy, LOOKUP_ID, task_indices=[0, 1], config=RolloutConfig(temperature=0.5))
    assert [t.metrics["answer_em"] for t in trajs] == [1.0, 0.0]
    req = _ChatHandler.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer k"
    assert req["temperature"] == 0.5 and req["stop"] == ["</tool_call>", "</answer>"]
    assert [m["role"] for m in req["messages"]] == ["system", "user"]
    for t in trajs:
        assert t.messages[-1]["content"] == "<answer>Paris</answer>"  # the stripped stop string restored
        check_trajectory(t, smollm2_tokenizer)


def test_transient_errors_are_retried_with_backoff(chat_server):
    assert ask(OpenAIPolicy(chat_server, "flaky", backoff_s=0.05)) == "<answer>Paris"
    assert _ChatHandler.counts["flaky"] == 2


def test_retries_are_bounded(chat_server):
    with pytest.raises(EndpointError, match=r"failed within .*2 retries allowed\): HTTP 503: .*overloaded.*' \(x3\)$"):
        ask(OpenAIPolicy(chat_server, "down", max_retries=2, backoff_s=0.01))
    assert _ChatHandler.counts["down"] == 3


def test_a_time_out_on_the_last_try_does_not_hide_the_server_errors_before_it(chat_server):
    with pytest.raises(EndpointError, match=r"HTTP 503: .*overloaded.*'; then no complete answer within 1\.0 s$"):
        ask(OpenAIPolicy(chat_server, "busy-then-drip", timeout_s=1.0, max_retries=1, backoff_s=0.01))


def test_client_errors_fail_at_once_with_the_servers_message(chat_server):
    with pytest.raises(EndpointError, match=r"HTTP 400.*max_tokens is too large"):
        ask(OpenAIPolicy(chat_server, "bad", max_retries=3))
    assert _ChatHandler.counts["bad"] == 1
    with pytest.raises(EndpointError, match="not JSON"):
        ask(OpenAIPolicy(chat_server, "garbage"))


def test_a_dripping_server_hits_the_total_deadline(chat_server):
    start = time.monotonic()
    with pytest.raises(EndpointError, match=r"failed within 1\.0 s"):
        ask(OpenAIPolicy(chat_server, "drip", timeout_s=1.0, max_retries=1, backoff_s=0.01))
    assert time.monotonic() - start < 2.0


def test_headers_dripped_a_byte_at_a_time_hit_the_total_deadline(chat_server):
    """Headers at one byte per 0.2 s held a 2 s call 61.7 s when only each read had a time-out (issue 25.4)."""
    start = time.monotonic()
    with pytest.raises(EndpointError, match=r"failed within 2\.0 s .*no complete answer within 2\.0 s"):
        ask(OpenAIPolicy(chat_server, "drip-headers", timeout_s=2.0, max_retries=1, backoff_s=0.01))
    assert time.monotonic() - start < 3.0


def test_a_compressed_body_is_capped_at_its_decoded_size(chat_server):
    tracemalloc.start()
    try:
        with pytest.raises(EndpointError, match=r"larger than 1000000 bytes \(decoded\)"):
            ask(OpenAIPolicy(chat_server, "gzip-bomb", max_response_bytes=1_000_000))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20  # letting httpx decode the body held its 64 MiB at once
    with pytest.raises(EndpointError, match="encoded as 'br', which was not asked for"):
        ask(OpenAIPolicy(chat_server, "br"))
    assert ask(OpenAIPolicy(chat_server, "gzip")) == "<answer>Paris"
    assert _ChatHandler.requests[-1]["encoding"] == "identity"


def test_oversized_responses_are_refused(chat_server):
    with pytest.raises(EndpointError, match="larger than 1000000 bytes"):
        ask(OpenAIPolicy(chat_server, "huge", max_response_bytes=1_000_000))


def test_unreachable_server_is_a_clear_error():
    with pytest.raises(EndpointError, match="ConnectError"):
        ask(OpenAIPolicy("http://127.0.0.1:9/v1", "m", timeout_s=1.0, max_retries=1, backoff_s=0.01))


def test_content_parts_are_joined_and_odd_content_is_an_endpoint_error(chat_server):
    assert ask(OpenAIPolicy(chat_server, "parts")) == "<answer>Paris"
    with pytest.raises(EndpointError, match=r"unexpected response .*'content': 42"):
        ask(OpenAIPolicy(chat_server, "odd-content"))


def test_deeply_nested_json_is_an_endpoint_error_not_a_recursion_error(chat_server):
    with pytest.raises(EndpointError, match="nested too deeply"):
        ask(OpenAIPolicy(chat_server, "deep"))


def test_an_endpoint_failing_after_its_retries_ends_agent_r1_eval_in_one_line(chat_server, tmp_path, capsys):
    from agent_trainers.pipeline.cli import main

    # the budget leaves room past the back-off (0.5 + 1.0 s): under load a third 503 must still arrive within it
    argv = ["eval", "--method", "closed-book", "--base-url", chat_server, "--api-model", "down", "--limit", "1",
            "--timeout-s", "20", "--out", str(tmp_path / "o")]  # fmt: skip
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("closed-book:")]
    assert len(err) == 1 and err[0].startswith("agent-r1 eval: error: ") and "HTTP 503" in err[0]  # no traceback

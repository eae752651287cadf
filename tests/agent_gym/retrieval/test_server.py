"""The /retrieve server (issue 13 point 1): Search-R1's JSON, validation, shutdown, and the QA envs through it."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import httpx
import pytest

from agent_gym.datasets import embedded_path, load_qa
from agent_gym.retrieval import BM25Retriever, Passage, RemoteRetriever, dedupe_passages
from agent_gym.testing import run_episode

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
from agent_gym.retrieval.server import BackgroundServer, ServerConfig, create_app, main

DOCS = [
    Passage("0", "Paris", "Paris is the capital of France."),
    Passage("1", "Tokyo", "Tokyo is the capital of Japan."),
    Passage("2", "Lima", "Lima is the capital of Peru."),
    Passage("3", "Seine", "The Seine flows through Paris, the French capital."),
    Passage("4", "", "An untitled passage about rivers."),
]
LOCAL = BM25Retriever(DOCS)
CONFIG = ServerConfig(max_queries=8, max_topk=5, default_topk=2, max_query_chars=100, max_body_bytes=4096)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with BackgroundServer(create_app(LOCAL, CONFIG)) as server:
        yield server.url


def test_search_r1_response_shape_with_and_without_scores(url: str) -> None:
    body = {"queries": ["capital of France", "rivers"], "topk": 2, "return_scores": True}
    got = httpx.post(url, json=body).json()
    expected = [
        [
            {
                "document": {
                    "id": h.passage.id,
                    "contents": f'"{h.passage.title}"\n{h.passage.text}' if h.passage.title else h.passage.text,
                    "title": h.passage.title,
                    "text": h.passage.text,
                },
                "score": h.score,
            }
            for h in LOCAL.search(q, k=2)
        ]
        for q in body["queries"]
    ]
    assert got == {"result": expected}
    assert got["result"][0][0]["document"]["contents"] == '"Paris"\nParis is the capital of France.'
    bare = httpx.post(url, json={**body, "return_scores": False}).json()
    assert bare == {"result": [[hit["document"] for hit in hits] for hits in expected]}
    # SkyRL-gym's SearchEnv sends one query as {"query": q}: the same answer as a one-query list
    single = httpx.post(url, json={"query": "rivers", "topk": 2, "return_scores": True}).json()
    assert single == {"result": [expected[1]]}
    # topk omitted or null -> default_topk (2), as Search-R1's server falls back to its configured topk
    assert [len(x) for x in httpx.post(url, json={"queries": ["capital"], "topk": None}).json()["result"]] == [2]


def test_allowed_ids_extension_is_an_exact_restricted_search(url: str) -> None:
    remote = RemoteRetriever(url, max_topk=CONFIG.max_topk)
    for query in ["capital", "Paris", "rivers of France"]:
        got = remote.search(query, k=2, allowed={"1", "3"})
        assert [(h.passage, h.score) for h in got] == [(h.passage, h.score) for h in LOCAL.search(query, 2, {"1", "3"})]


BAD_REQUESTS = [
    (b'{"queries": [', 400, "malformed JSON body"),
    (b"[1, 2]", 422, "Input should be a valid dictionary"),
    (b'{"queries": "one string"}', 422, "queries: Input should be a valid list"),
    (b'{"queries": [1]}', 422, r"queries\.0: Input should be a valid string"),
    (b'{"topk": 3}', 422, "queries must hold at least one query"),
    (b'{"queries": ["q"], "query": "q"}', 422, "either queries .* or query .*, not both"),
    (b'{"query": 3}', 422, "query: Input should be a valid string"),
    (b'{"queries": []}', 422, "queries must hold at least one query"),
    (json.dumps({"queries": ["q"] * 9}).encode(), 422, "too many queries: 9 > max_queries=8"),
    (b'{"queries": ["q"], "topk": 0}', 422, r"topk must lie in \[1, 5\] \(got 0\)"),
    (b'{"queries": ["q"], "topk": 6}', 422, r"topk must lie in \[1, 5\] \(got 6\)"),
    (b'{"queries": ["q"], "topk": "3"}', 422, "topk: Input should be a valid integer"),
    (b'{"queries": ["q"], "topk": 1e999}', 422, "topk: Input should be a valid integer"),
    (json.dumps({"queries": ["x" * 101]}).encode(), 422, "a query has 101 characters > max_query_chars=100"),
    (b'{"queries": ["q"], "allowed_ids": ["nope"]}', 422, "allowed_ids: allowed names 1 passage id"),
    (json.dumps({"queries": ["q"], "pad": "x" * 5000}).encode(), 413, "request body of 5,0.. bytes exceeds 4,096"),
]


@pytest.mark.parametrize(("body", "status", "detail"), BAD_REQUESTS)
def test_bad_requests_get_4xx_with_a_message_and_the_server_stays_up(url, body, status, detail) -> None:
    response = httpx.post(url, content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == status
    assert len(response.content) < 1000  # the (possibly huge) input is never echoed back
    assert re.search(detail, response.json()["detail"]), response.json()
    assert httpx.get(url.replace("/retrieve", "/health")).json()["status"] == "ok"


def test_streamed_oversize_body_is_cut_off(url: str) -> None:
    chunks = (b" " * 1024 for _ in range(64))  # chunked upload: no Content-Length to check up front
    response = httpx.post(url, content=chunks, headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and "exceeds 4,096 bytes" in response.json()["detail"]


def test_health(url: str) -> None:
    health = httpx.get(url.replace("/retrieve", "/health")).json()
    assert health["status"] == "ok" and health["backend"] == "bm25" and health["passages"] == 5
    assert health["limits"] == {"max_queries": 8, "max_topk": 5, "max_results": 10_240, "max_inflight": 4}


class _SlowRetriever:
    """A retriever that takes 0.5 s per batch, to have a request in flight at shutdown."""

    passages = DOCS

    def search_batch(self, queries, k=5, allowed=None):
        time.sleep(0.5)
        return LOCAL.search_batch(queries, k, allowed)


def test_graceful_shutdown_finishes_the_request_in_flight() -> None:
    server = BackgroundServer(create_app(_SlowRetriever()))  # type: ignore[arg-type]
    server.__enter__()
    answer: dict = {}
    client = threading.Thread(target=lambda: answer.update(r=httpx.post(server.url, json={"queries": ["Peru"]})))
    client.start()
    time.sleep(0.2)  # the request is inside search_batch now
    server.stop()
    client.join(5)
    assert answer["r"].status_code == 200 and answer["r"].json()["result"][0][0]["id"] == "2"
    assert not server._thread.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.post(server.url, json={"queries": ["Peru"]}, timeout=2)


# ----------------------------------------------------------------- the QA envs through the server
def _qa_server(source: str) -> BackgroundServer:
    tasks = load_qa(embedded_path(source))
    passages = dedupe_passages(p.to_passage() for t in tasks for p in t.paragraphs)
    return BackgroundServer(create_app(BM25Retriever(passages)))


def _trajectory(env: gym.Env, index: int) -> tuple[list[tuple], dict]:
    """(action, observation, reward, terminated, truncated, reward terms) per step, and the last info."""
    steps = run_episode(env, env.unwrapped.oracle_action, seed=index, options={"task_index": index}, max_steps=12)
    return [(a, o, r, te, tr, info["reward_terms"]) for a, o, r, te, tr, info in steps[1:]], steps[-1][-1]


@pytest.mark.parametrize("env_id", ["AgentR1/HotpotQA-v0", "AgentR1/2WikiMultihopQA-v0", "AgentR1/MuSiQue-v0"])
@pytest.mark.parametrize("corpus", ["question", "pooled"])
def test_oracle_solves_the_embedded_sample_through_the_server(env_id: str, corpus: str) -> None:
    """Every task, remote vs in-process: the same actions, observations, rewards and terms; the oracle solves all."""
    source = gym.spec(env_id).kwargs["source"]
    with _qa_server(source) as server:
        remote = gym.make(env_id, corpus=corpus, retriever="remote", retriever_url=server.url)
        local = gym.make(env_id, corpus=corpus)
        n = local.unwrapped.num_tasks()
        assert remote.unwrapped.num_tasks() == n
        for i in range(n):
            got, info = _trajectory(remote, i)
            assert got == _trajectory(local, i)[0], f"task {i}"
            assert got[-1][3] and info["metrics"]["answer_em"] == 1.0, f"task {i}: not solved"
            assert info["evidence_found"] == info["evidence_total"] >= 2, f"task {i}: gold paragraphs not all found"
        assert remote.unwrapped.retriever.passages == ()


def test_retriever_url_and_remote_go_together() -> None:
    with pytest.raises(ValueError, match="retriever_url= goes with retriever='remote'"):
        gym.make("AgentR1/HotpotQA-v0", retriever="remote")
    with pytest.raises(ValueError, match="retriever_url= goes with retriever='remote'"):
        gym.make("AgentR1/HotpotQA-v0", retriever_url="http://127.0.0.1:1/retrieve")


def test_open_retrieval_evidence_by_title_through_the_server(shared_data: Path) -> None:
    """2Wiki without context + its passage corpus on the server: gold titles matched from the hits' titles."""
    data = shared_data / "qa_only/2wikimultihopqa_dev_4000_evidences_no_context.json"
    corpus = shared_data / "2wikimultihopqa/corpus_6119_passages.json"
    from agent_gym.retrieval import load_corpus

    passages = load_corpus(corpus)
    titles = {p.title for p in passages}
    with BackgroundServer(create_app(BM25Retriever(passages))) as server:
        kwargs = {"data_path": data, "corpus": str(corpus)}
        remote = gym.make("AgentR1/2WikiMultihopQA-v0", retriever="remote", retriever_url=server.url, **kwargs)
        local = gym.make("AgentR1/2WikiMultihopQA-v0", **kwargs)
        tasks = local.unwrapped.tasks
        # the corpus covers another subset of questions: take the first tasks whose gold titles it all holds
        chosen = [i for i, t in enumerate(tasks) if set(t.missing_supporting) <= titles][:8]
        assert len(chosen) == 8
        for i in chosen:
            got, info = _trajectory(remote, i)
            assert got == _trajectory(local, i)[0], f"task {i}"
            assert info["evidence_found"] > 0, f"task {i}: no gold title credited"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_command_line_server_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = _free_port()
    cmd = [sys.executable, "-m", "agent_gym.retrieval.server", "--qa-data", str(embedded_path("musique"))]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port), "--log-level", "info"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                health = httpx.get(f"{url}/health", timeout=1).json()
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()
                time.sleep(0.2)
        assert health["passages"] == len({p.id for t in load_qa(embedded_path("musique")) for p in t.paragraphs})
        hits = RemoteRetriever(f"{url}/retrieve").search("river", k=2)
        assert len(hits) == 2
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0].decode()
    # uvicorn shuts down gracefully, then re-raises the signal so the exit status tells why it stopped
    assert proc.returncode == -signal.SIGTERM, out
    assert "passages loaded" in out and "Shutting down" in out and "Finished server process" in out


def test_main_rejects_a_missing_corpus_choice(capsys) -> None:
    with pytest.raises(SystemExit):
        main([])
    assert "one of the arguments --corpus --qa-data is required" in capsys.readouterr().err

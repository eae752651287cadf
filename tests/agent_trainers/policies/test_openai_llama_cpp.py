"""OpenAIPolicy against a real OpenAI-compatible server: llama.cpp's (``llama-cpp-python[server]``) on SmolLM2.

Skipped when ``llama_cpp`` is not installed: it builds from source (about 30 minutes
on this project's busy 2-core machines), so ``scripts/setup.sh`` does not install
it; ``pip install 'llama-cpp-python[server]==0.3.36'`` does.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time

import httpx
import pytest

from agent_trainers.policies import EndpointError, OpenAIPolicy, SamplingParams, smollm2_gguf_path
from agent_trainers.rollout import RolloutConfig, rollout
from tests.agent_trainers.conftest import LOOKUP_ID

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason="llama-cpp-python[server]==0.3.36 is not installed (a ~30 min source build; not part of setup.sh)",
)

FEW_SHOT = [
    {"role": "system", "content": "Answer with the city inside <answer></answer> tags."},
    {"role": "user", "content": "Capital of France?"},
    {"role": "assistant", "content": "<answer>Paris</answer>"},
    {"role": "user", "content": "Capital of Japan?"},
    {"role": "assistant", "content": "<answer>Tokyo</answer>"},
    {"role": "user", "content": "Capital of Italy?"},
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server():
    """``python -m llama_cpp.server`` on SmolLM2-135M-Instruct Q4_1 (one thread), its base URL while it runs."""
    port = _free_port()
    cmd = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf_path()), "--model_alias", "smol",
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1", "--verbose", "False",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama.cpp server exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("llama.cpp server did not answer /v1/models within 120 s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_stop_string_the_server_strips_is_restored(llama_server):
    with OpenAIPolicy(llama_server, "smol", timeout_s=120) as policy:
        greedy = SamplingParams(max_new_tokens=16, temperature=0.0)
        stop = SamplingParams(max_new_tokens=16, temperature=0.0, stop=("</answer>",))
        (stopped,) = policy.generate_chat([FEW_SHOT], stop)
        (free,) = policy.generate_chat([FEW_SHOT], greedy)
    # the server ends on </answer> and drops it; the env needs the closed tag, so the policy puts it back
    assert stopped.text.startswith("<answer>") and stopped.text.endswith("</answer>")
    assert stopped.text.count("</answer>") == 1 and stopped.finish_reason == "stop"
    assert free.text.startswith(stopped.text), (free.text, stopped.text)


def test_the_servers_errors_end_in_one_endpoint_error(llama_server):
    bad = [{"role": "user", "content": {"not": "text"}}]
    with OpenAIPolicy(llama_server, "smol", timeout_s=60, max_retries=1, backoff_s=0.1) as policy:
        with pytest.raises(EndpointError, match=r"HTTP (4\d\d|500)"):
            policy.generate_chat([bad], SamplingParams(max_new_tokens=4))


@pytest.mark.slow
def test_text_mode_rollouts_against_llama_cpp(llama_server):
    config = RolloutConfig(max_turns=2, max_new_tokens_per_turn=32, temperature=0.0, tool_timeout_s=60)
    runs = []
    for _ in range(2):
        with OpenAIPolicy(llama_server, "smol", timeout_s=120) as policy:
            runs.append(rollout(policy, LOOKUP_ID, task_indices=[0, 1], config=config))
    first, second = runs
    for t in first:
        assert t.completion_ids == [] and t.loss_mask == [] and 1 <= len(t.turns) <= 2
        replies = [m["content"] for m in t.messages if m["role"] == "assistant"]
        assert len(replies) == len(t.turns) and all(replies), t.messages
        assert t.stop_reason in {"answer", "max_turns"}, (t.stop_reason, t.error)
        assert t.messages[-1]["role"] != "assistant" or t.terminated or t.truncated
    # greedy decoding on one server thread replays exactly
    assert [t.messages for t in first] == [t.messages for t in second]

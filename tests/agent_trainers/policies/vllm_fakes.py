"""Fakes of vLLM for CPU tests: the offline engine's types and the server's endpoints, over a transformers model.

* :func:`fake_vllm_module` - a module object standing in for ``vllm``:
  ``LLM.generate(prompts, sampling_params)`` returns ``RequestOutput`` s whose
  ``CompletionOutput`` carries ``token_ids``, per-position ``{token_id: Logprob}``
  dicts, ``finish_reason`` and ``stop_reason``, as vLLM 0.31 does.
  ``SamplingParams`` accepts only vLLM's field names (a misspelt one is a
  ``TypeError``), and one ``torch.Generator`` is seeded per request from its
  ``seed``, like vLLM's per-request generators (so a shared seed repeats samples).
* :func:`fake_vllm_server` - a FastAPI app with the endpoints TRL's
  ``VLLMClient`` calls for generation (``/health``, ``/v1/models``,
  ``/v1/completions`` with token-id prompts, ``return_token_ids`` and
  ``return_tokens_as_token_ids``, ``/reset_prefix_cache``); request fields
  outside vLLM's completion request are refused (422; vLLM itself ignores
  them with a warning, which would hide a misspelt field).

Sampling follows vLLM's rules: the stop token stays in ``token_ids``; a stop
string stops generation at the token that completes it; log-probs are
"processed" (``log_softmax(logits / T)``, or of the logits when greedy).
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any, TypedDict

import torch
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

MODEL_NAME = "fake/tiny-random"


@dataclass
class SamplingParams:
    """vLLM's sampling fields used by the code under test (unknown names raise TypeError)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    max_tokens: int | None = 16
    logprobs: int | None = None


class TokensPrompt(TypedDict):
    """vLLM's token prompt (a TypedDict there too)."""

    prompt_token_ids: list[int]


@dataclass
class Logprob:
    """vLLM's per-token log-prob entry."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    """vLLM's one completion of a request."""

    index: int
    text: str
    token_ids: tuple[int, ...]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    """vLLM's output of one request."""

    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True


@dataclass
class Sampled:
    """What one fake sampling run produced (internal)."""

    ids: list[int] = field(default_factory=list)
    lps: list[float] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    finish: str = "length"
    stop_reason: int | str | None = None


class FakeEngine:
    """Samples like vLLM from a transformers causal LM (full forward per token; tiny models only).

    Attributes:
        requests: Every ``(prompt_ids, SamplingParams)`` received, in order.
    """

    def __init__(self, model: Any, tokenizer: Any):
        self.model, self.tokenizer = model, tokenizer
        self.requests: list[tuple[list[int], SamplingParams]] = []

    @torch.no_grad()
    def sample(self, prompt: list[int], sp: SamplingParams) -> Sampled:
        self.requests.append((list(prompt), sp))
        gen = torch.Generator().manual_seed(sp.seed if sp.seed is not None else torch.seed())
        out, ids = Sampled(), list(prompt)
        for _ in range(sp.max_tokens or 16):
            logits = self.model(torch.tensor([ids]), logits_to_keep=1).logits[0, -1].float()
            greedy = sp.temperature < 1e-5
            logp = torch.log_softmax(logits if greedy else logits / sp.temperature, dim=-1)
            tok = int(logp.argmax()) if greedy else int(torch.multinomial(_nucleus(logp, sp.top_p), 1, generator=gen))
            out.ids.append(tok)
            out.lps.append(float(logp[tok]))
            out.ranks.append(int((logp > logp[tok]).sum()) + 1)
            ids.append(tok)
            if tok in (sp.stop_token_ids or []) or tok == self.tokenizer.eos_token_id:
                out.finish, out.stop_reason = "stop", tok
                break
            text = self.tokenizer.decode(out.ids, skip_special_tokens=sp.skip_special_tokens)
            hit = next((s for s in sp.stop or [] if s in text), None)
            if hit is not None:
                out.finish, out.stop_reason = "stop", hit
                break
        return out

    def text(self, s: Sampled, sp: SamplingParams) -> str:
        text = self.tokenizer.decode(s.ids, skip_special_tokens=sp.skip_special_tokens)
        if isinstance(s.stop_reason, str) and not sp.include_stop_str_in_output:
            text = text[: text.index(s.stop_reason)]
        return text


def _nucleus(logp: torch.Tensor, top_p: float) -> torch.Tensor:
    probs = logp.exp()
    if top_p >= 1.0:
        return probs
    order = probs.argsort(descending=True)
    keep = probs[order].cumsum(0) - probs[order] < top_p
    filtered = torch.zeros_like(probs)
    filtered[order[keep]] = probs[order[keep]]
    return filtered


class FakeLLM:
    """``vllm.LLM``'s ``generate`` over :class:`FakeEngine`."""

    def __init__(self, model: Any, tokenizer: Any):
        self.engine, self.kwargs = FakeEngine(model, tokenizer), dict[str, Any]()

    def generate(
        self, prompts: list[TokensPrompt], sampling_params: SamplingParams | list[SamplingParams], use_tqdm: bool = True
    ) -> list[RequestOutput]:
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError("the lengths of prompts and sampling_params must be the same")
        outputs = []
        for k, (prompt, sp) in enumerate(zip(prompts, params, strict=True)):
            s = self.engine.sample(prompt["prompt_token_ids"], sp)
            decoded = [self.engine.tokenizer.decode([t]) for t in s.ids]
            lps = [{t: Logprob(lp, r, d)} for t, lp, r, d in zip(s.ids, s.lps, s.ranks, decoded, strict=True)]
            completion = CompletionOutput(
                0, self.engine.text(s, sp), tuple(s.ids), sum(s.lps), lps if sp.logprobs is not None else None,
                s.finish, s.stop_reason,
            )  # fmt: skip
            outputs.append(RequestOutput(str(k), list(prompt["prompt_token_ids"]), [completion]))
        return outputs


def fake_vllm_module(model: Any, tokenizer: Any) -> tuple[types.ModuleType, types.ModuleType]:
    """``(vllm, vllm.inputs)`` stand-ins; ``vllm.LLM(model=<name>)`` builds a :class:`FakeLLM` over ``model``."""
    vllm = types.ModuleType("vllm")
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = TokensPrompt
    vllm.inputs = inputs
    vllm.SamplingParams = SamplingParams
    vllm.RequestOutput, vllm.CompletionOutput = RequestOutput, CompletionOutput

    def llm(**kwargs: Any) -> FakeLLM:
        engine = FakeLLM(model, tokenizer)
        engine.kwargs = kwargs
        return engine

    vllm.LLM = llm
    return vllm, inputs


class CompletionRequest(BaseModel):
    """The fields of vLLM's ``/v1/completions`` request that TRL's client and our policy send (others: 422)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    prompt: list[list[int]]
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = 16
    logprobs: int | None = None
    seed: int | None = None
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False


def fake_vllm_server(model: Any, tokenizer: Any) -> tuple[FastAPI, FakeEngine]:
    """A FastAPI app answering TRL's ``VLLMClient`` generation calls like ``trl vllm-serve`` (processed log-probs)."""
    app, engine = FastAPI(), FakeEngine(model, tokenizer)
    app.state.prefix_cache_resets = 0

    @app.get("/health")
    def health() -> dict[str, str]:
        return {}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]}

    @app.post("/reset_prefix_cache")
    def reset() -> dict[str, bool]:
        app.state.prefix_cache_resets += 1
        return {"success": True}

    @app.post("/v1/completions")
    def completions(req: CompletionRequest) -> JSONResponse:
        fields = {k: getattr(req, k) for k in SamplingParams.__dataclass_fields__ if k != "n"}
        sp = SamplingParams(**fields)
        choices = []
        for prompt in req.prompt:
            for _ in range(req.n):
                s = engine.sample(prompt, sp)
                choices.append(_choice(len(choices), prompt, s, engine.text(s, sp), req))
        return JSONResponse({"id": "cmpl-fake", "object": "text_completion", "model": req.model, "choices": choices})

    return app, engine


def _choice(index: int, prompt: list[int], s: Sampled, text: str, req: CompletionRequest) -> dict[str, Any]:
    name = (lambda t: f"token_id:{t}") if req.return_tokens_as_token_ids else str
    logprobs = None
    if req.logprobs is not None:
        logprobs = {
            "tokens": [name(t) for t in s.ids],
            "token_logprobs": list(s.lps),
            "top_logprobs": [{name(t): lp} for t, lp in zip(s.ids, s.lps, strict=True)],
            "text_offset": list(range(len(s.ids))),
        }
    choice: dict[str, Any] = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": s.finish}
    choice["stop_reason"] = s.stop_reason
    if req.return_token_ids:
        choice |= {"prompt_token_ids": list(prompt), "token_ids": list(s.ids)}
    return choice

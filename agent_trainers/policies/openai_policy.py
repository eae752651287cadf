"""Any OpenAI-compatible ``/chat/completions`` endpoint, for evaluation: :class:`OpenAIPolicy`.

Text only: the server's tokenizer is unknown, so there are no token ids or
log-probs; the rollout engine then runs in text mode (``loss_mask`` and
``logprobs`` stay empty). Use it to evaluate, never to train.

Requests go through one pooled ``httpx.AsyncClient`` on the policy's own event
loop. Each completion has a *total* deadline (``timeout_s``) that covers
connecting, every retry, the headers and the body: each attempt runs under
``asyncio.timeout`` for the time left, so a server that drips its headers or
its body one byte at a time is cut off at the deadline (per-read time-outs
alone never fire on it). The body is read raw and abandoned once its *decoded*
size passes ``max_response_bytes``: the client asks for ``identity``, decodes a
gzip/deflate body itself in bounded pieces and refuses any other encoding
unread (:class:`~agent_gym.core.bodies.BodyReader`).
Connection errors, time-outs and HTTP 408/429/5xx answers are retried at most
``max_retries`` times with exponential back-off, never past the deadline; any
other HTTP error fails at once with the server's message.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx

from agent_gym.core.bodies import BodyError, BodyTooLarge, read_body
from agent_trainers.policies.sampling import FinishReason, Generation, SamplingParams

__all__ = ["EndpointError", "OpenAIPolicy"]

_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class EndpointError(RuntimeError):
    """The endpoint failed (after the allowed retries) or answered something unusable."""


class _Retryable(Exception):
    """An attempt failed in a way worth retrying (internal)."""


class OpenAIPolicy:
    """Chat completions from an OpenAI-compatible server (vLLM, llama.cpp, TGI, OpenAI, ...).

    Args:
        base_url: e.g. ``"http://127.0.0.1:8000/v1"``.
        model: The ``model`` field of each request.
        api_key: Sent as a bearer token when given.
        timeout_s: Total deadline of one completion, retries included.
        max_retries: Retries after the first attempt (connection errors, 408/429/5xx).
        backoff_s: First back-off; doubled after each retry.
        max_response_bytes: Larger response bodies are refused.

    Example:
        >>> from agent_trainers.rollout import rollout
        >>> with OpenAIPolicy("http://127.0.0.1:8000/v1", "smol") as policy:  # doctest: +SKIP
        ...     trajs = rollout(policy, "AgentR1/HotpotQA-v0", task_indices=[0])
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        max_response_bytes: int = 8_000_000,
    ):
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0 or max_response_bytes < 1:
            raise ValueError(
                "timeout_s and max_response_bytes must be > 0, max_retries and backoff_s >= 0 "
                f"(got {timeout_s}, {max_response_bytes}, {max_retries}, {backoff_s})"
            )
        self.base_url, self.model = base_url.rstrip("/"), model
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.max_response_bytes = max_response_bytes
        self._headers = {"Accept-Encoding": "identity"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()  # one request at a time on the private loop
        self._client: httpx.AsyncClient | None = None

    def close(self) -> None:
        """Close the pooled connections and the private event loop."""
        with self._lock:
            if self._loop.is_closed():
                return
            if self._client is not None:
                self._loop.run_until_complete(self._client.aclose())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def __enter__(self) -> OpenAIPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def generate_chat(self, conversations: list[list[dict[str, Any]]], params: SamplingParams) -> list[Generation]:
        """One completion per conversation (sequentially; evaluation is not the hot path)."""
        return [self._complete(c, params) for c in conversations]

    def _complete(self, messages: list[dict[str, Any]], params: SamplingParams) -> Generation:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": params.max_new_tokens}
        body |= {"temperature": params.temperature, "top_p": params.top_p}
        if params.top_k:
            body["top_k"] = params.top_k  # not in the OpenAI API; llama.cpp and vLLM servers read it
        if params.stop:
            body["stop"] = list(params.stop)[:4]  # the OpenAI API takes at most four
        payload = self._post(body)
        try:
            choice = payload["choices"][0]
            text = _content_text(choice["message"].get("content"))
            reason = choice.get("finish_reason") or "stop"
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise EndpointError(f"{self.base_url}: unexpected response {str(payload)[:200]!r}") from exc
        if reason == "stop" and params.stop and not any(s in text for s in params.stop):
            # OpenAI servers drop the matched stop string; the env needs the closed tag.
            text += _closing_stop(text, params.stop)
        finish = FinishReason.LENGTH if reason == "length" else FinishReason.STOP
        return Generation(token_ids=[], logprobs=[], finish_reason=finish, text=text)

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST with retries and back-off under one total deadline."""
        deadline = time.monotonic() + self.timeout_s
        failures: list[str] = []
        for attempt in range(self.max_retries + 1):
            if attempt:
                pause = min(self.backoff_s * 2 ** (attempt - 1), max(0.0, deadline - time.monotonic()))
                time.sleep(pause)
            if time.monotonic() >= deadline:
                break
            try:
                return self._attempt(body, deadline)
            except _Retryable as exc:
                failures.append(str(exc))
        raise EndpointError(
            f"{self.base_url}/chat/completions failed within {self.timeout_s} s "
            f"({self.max_retries} retries allowed): {_failures(failures)}"
        )

    def _attempt(self, body: dict[str, Any], deadline: float) -> dict[str, Any]:
        left = deadline - time.monotonic()
        with self._lock:
            if self._loop.is_closed():
                raise EndpointError("the policy is closed")
            try:
                status, data = self._loop.run_until_complete(asyncio.wait_for(self._fetch(body, left), left))
            except TimeoutError:  # headers or body not complete in time: the request was cancelled
                raise _Retryable(f"no complete answer within {self.timeout_s} s") from None
            except httpx.TransportError as exc:  # connect errors, broken connections
                raise _Retryable(f"{type(exc).__name__}: {exc}") from exc
            finally:  # let the clean-up a cancelled read scheduled (closing its stream) run now
                self._loop.run_until_complete(asyncio.sleep(0))
        if status in _RETRY_STATUS:
            raise _Retryable(f"HTTP {status}: {data[:200]!r}")
        if status >= 400:
            raise EndpointError(f"{self.base_url}: HTTP {status}: {data[:300]!r}")
        try:
            return json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise EndpointError(f"{self.base_url}: response is not JSON: {data[:200]!r}") from exc
        except RecursionError:  # json's decoder recurses once per nesting level
            raise EndpointError(f"{self.base_url}: response JSON is nested too deeply to read") from None

    async def _fetch(self, body: dict[str, Any], left: float) -> tuple[int, bytes]:
        """``(status, decoded body)`` of one POST (the caller bounds its total time)."""
        if self._client is None:
            self._client = httpx.AsyncClient(headers=self._headers)
        url = f"{self.base_url}/chat/completions"
        async with self._client.stream("POST", url, json=body, timeout=httpx.Timeout(max(0.01, left))) as resp:
            try:
                return resp.status_code, bytes(await read_body(resp, self.max_response_bytes))
            except BodyTooLarge:
                raise EndpointError(
                    f"{self.base_url}: response larger than {self.max_response_bytes} bytes (decoded)"
                ) from None
            except BodyError as exc:
                raise EndpointError(f"{self.base_url}: {exc}") from None


def _failures(failures: list[str]) -> str:
    """The attempts' failures in order, a run of equal ones once with its count: ``HTTP 503: ... (x2); then no
    complete answer within 2.0 s`` (a time-out on the last try does not hide the server errors before it)."""
    runs = [(text, len(list(same))) for text, same in itertools.groupby(failures)]
    return "; then ".join(text + (f" (x{n})" if n > 1 else "") for text, n in runs) or "no attempt"


def _content_text(content: Any) -> str:
    """A message's ``content``: a string, null, or a list of content parts (``{"type": "text", "text": ...}``,
    as some OpenAI-compatible servers answer), whose text parts are joined; anything else is a ValueError."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        texts = [p.get("text") for p in content if p.get("type", "text") == "text"]
        if all(isinstance(t, str) for t in texts):
            return "".join(texts)
    raise ValueError(f"message content is neither text nor a list of text parts: {str(content)[:100]!r}")


def _closing_stop(text: str, stop: Sequence[str]) -> str:
    """The stop string a server stripped from ``text``: the one whose opening tag is still open."""
    for s in stop:
        opening = s.replace("</", "<", 1)
        if s.startswith("</") and text.rfind(opening) > text.rfind(s):
            return s
    return ""

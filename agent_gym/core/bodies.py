"""Bounded HTTP bodies: the *decoded* size of a response is capped as it streams.

An HTTP client that lets its library decode ``Content-Encoding`` caps only
what it is handed after decoding, one decoded chunk at a time: a 1.6 KB Brotli
body can decode to 1 GiB in a single chunk before any check runs. The clients
here (:class:`~agent_gym.retrieval.remote.RemoteRetriever`,
``agent_trainers.policies.OpenAIPolicy``) ask for ``identity``, read the raw
bytes and pass them through :class:`BodyReader`, which

* takes ``identity`` as is, and ``gzip``/``deflate`` (what a proxy may add even
  when not asked) through :mod:`zlib` with a bound on each call's output, so no
  more than the cap plus one byte is ever decoded;
* refuses any other encoding (``br``, ``zstd``, a chain of several) before
  reading a byte of it.

Example:
    >>> import gzip
    >>> reader = BodyReader("gzip", cap=10)
    >>> reader.feed(gzip.compress(b"hello"))
    >>> bytes(reader.finish())
    b'hello'
    >>> BodyReader("gzip", cap=10).feed(gzip.compress(b"x" * 1000))
    Traceback (most recent call last):
    ...
    agent_gym.core.bodies.BodyTooLarge: the body decodes to more than 10 bytes
"""

from __future__ import annotations

import zlib
from typing import Any

__all__ = ["BodyError", "BodyReader", "BodyTooLarge", "UnsupportedEncoding", "read_body"]

IDENTITY = "identity"
DECODED = frozenset({"gzip", "x-gzip", "deflate"})


class BodyError(ValueError):
    """A response body that cannot be read within its bounds."""


class BodyTooLarge(BodyError):
    """The body (decoded) passed its cap."""


class UnsupportedEncoding(BodyError):
    """A ``Content-Encoding`` this reader does not decode (it was not asked for)."""


class BodyReader:
    """Accumulate a body's raw bytes, decoding ``encoding`` with at most ``cap`` decoded bytes kept.

    Args:
        encoding: The response's ``Content-Encoding`` header (``""`` or ``identity``: none).
        cap: The most decoded bytes allowed.

    Raises:
        UnsupportedEncoding: ``encoding`` is not identity, gzip or deflate.
    """

    def __init__(self, encoding: str | None, cap: int):
        if cap < 1:
            raise ValueError(f"cap must be >= 1 (got {cap})")
        name = (encoding or IDENTITY).strip().lower()
        if name != IDENTITY and name not in DECODED:
            raise UnsupportedEncoding(
                f"the body is encoded as {name!r}, which was not asked for (identity, gzip, deflate)"
            )
        self.cap = cap
        self.body = bytearray()
        # wbits 32 + 15: a zlib or gzip header, detected; deflate servers send zlib-wrapped data (RFC 9110)
        self._inflate = None if name == IDENTITY else zlib.decompressobj(zlib.MAX_WBITS | 32)

    def feed(self, raw: bytes) -> None:
        """Add raw bytes off the wire.

        Raises:
            BodyTooLarge: The decoded body passed ``cap``.
            BodyError: The compressed data is corrupt.
        """
        if self._inflate is None:
            self._keep(raw)
            return
        try:
            self._keep(self._inflate.decompress(raw, self.cap - len(self.body) + 1))
        except zlib.error as exc:
            raise BodyError(f"the compressed body is corrupt ({exc})") from None

    def finish(self) -> bytearray:
        """The whole decoded body (the stream ended).

        Raises:
            BodyTooLarge: What the decoder held back passes ``cap``.
            BodyError: The compressed data is corrupt or cut short.
        """
        if self._inflate is not None:
            try:
                self._keep(self._inflate.flush())
            except zlib.error as exc:
                raise BodyError(f"the compressed body is corrupt ({exc})") from None
            if not self._inflate.eof:
                raise BodyError("the compressed body was cut short (no end of stream)")
        return self.body

    def _keep(self, data: bytes) -> None:
        if len(self.body) + len(data) > self.cap:
            raise BodyTooLarge(f"the body decodes to more than {self.cap:,} bytes")
        self.body += data


async def read_body(response: Any, cap: int) -> bytearray:
    """The decoded body of a streamed ``httpx`` response (its ``aiter_raw()``), at most ``cap`` bytes.

    Raises:
        UnsupportedEncoding: An encoding other than identity, gzip or deflate (no byte is read).
        BodyTooLarge: The decoded body passed ``cap`` (reading stops there; the caller's ``stream`` context
            closes the connection).
        BodyError: The compressed data is corrupt or cut short.
    """
    reader = BodyReader(response.headers.get("content-encoding"), cap)
    async for chunk in response.aiter_raw():
        reader.feed(chunk)
    return reader.finish()

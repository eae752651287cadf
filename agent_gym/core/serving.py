"""Serving ASGI apps with bounded connections: :class:`ConnectionLimits` (head and body deadlines, keep-alive,
a connection cap) and :class:`BackgroundServer` (uvicorn in a daemon thread on a free port).

uvicorn has no deadline for a request's head or body: a client that opens a socket and sends nothing, or a
byte at a time, holds it for ever, and enough of them exhaust the process's open files. The retrieval server
(:mod:`agent_gym.retrieval.server`) runs under these limits.
"""

import asyncio
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

if TYPE_CHECKING:  # the mixin is only ever combined with uvicorn's H11Protocol (see ConnectionLimits.protocol)
    from uvicorn.protocols.http.h11_impl import H11Protocol as _GuardBase
else:
    _GuardBase = object

__all__ = ["BackgroundServer", "ConnectionLimits"]


_LOG = logging.getLogger("agent_gym.core.serving")
_WARNED = [float("-inf")]  # when the last "too many connections" line was logged (one per 10 s under a flood)


class _Guard(_GuardBase):
    """The deadlines and the connection cap, mixed in before uvicorn's ``H11Protocol`` (see ``protocol()``)."""

    limits: "ConnectionLimits"
    _phase: str | None = None
    _timer: asyncio.TimerHandle | None = None
    _upgraded = False

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._opened = self.loop.time()
        if len(self.connections) <= self.limits.max_connections:  # the common case: no scan of the others
            self._update_deadline()
            return
        # every connection of the server is one of these (the server's only protocol class mixes this in)
        others = cast("set[_Guard]", self.connections)
        live = [c for c in others if c.transport is not None and not c.transport.is_closing()]
        excess = len(live) - self.limits.max_connections
        if excess > 0:  # asyncio accepts a burst before any connection_made runs: close them all
            waiting = sorted((c for c in live if c is not self and getattr(c, "_phase", None) == "head"),
                             key=lambda c: c._opened)  # fmt: skip
            victims = waiting[:excess] + [self] * max(0, excess - len(waiting))
            if self.loop.time() - _WARNED[0] > 10:  # one line per 10 s under a flood, not one per socket
                _WARNED[0] = self.loop.time()
                _LOG.warning(
                    "%d connections open (max_connections=%d): closing %d, the oldest waiting first",
                    len(live), self.limits.max_connections, excess,
                )  # fmt: skip
            for victim in victims[:excess]:
                victim._close("max_connections")
        self._update_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        self._update_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._update_deadline()

    def handle_websocket_upgrade(self, event: Any) -> None:
        self._upgraded = True  # the WebSocket protocol owns the transport from here
        self._cancel()
        super().handle_websocket_upgrade(event)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _update_deadline(self) -> None:
        if self._upgraded or self.transport is None or self.transport.is_closing():
            return
        cycle = self.cycle
        phase = "head" if cycle is None or cycle.response_complete else "body" if cycle.more_body else "serve"
        if phase == self._phase:
            return
        self._phase = phase
        self._cancel()
        if phase != "serve":
            wait = self.limits.header_timeout_s if phase == "head" else self.limits.body_timeout_s
            self._timer = self.loop.call_later(wait, self._close, f"{phase} timeout ({wait:g} s)")

    def _close(self, why: str) -> None:
        self._cancel()
        if not self.transport.is_closing():
            _LOG.info("closing a connection from %s: %s", self.client, why)
            self.transport.close()


@dataclass(frozen=True)
class ConnectionLimits:
    """What one HTTP connection may hold of the server (uvicorn has no header or body deadline of its own).

    A connection that has not sent a whole request head within ``header_timeout_s`` (from its opening, or
    from the end of its previous answer), or a whole body within ``body_timeout_s`` after the head, is
    closed; so are idle keep-alive connections after ``keep_alive_timeout_s``. At ``max_connections`` open
    connections a new one closes the oldest that is *waiting* (no request being served), so a flood of
    silent or slow clients cannot starve ``/health`` or real clients of sockets; when every connection is
    serving a request, the new one is closed. Keep ``max_connections`` below the process's open-file limit.
    """

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_timeout_s: float = 5.0
    max_connections: int = 512

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_timeout_s"):
            if not 0 < getattr(self, name) < float("inf"):
                raise ValueError(f"{name} must be a positive finite number (got {getattr(self, name)})")
        if self.max_connections < 1:
            raise ValueError(f"max_connections must be >= 1 (got {self.max_connections})")

    def protocol(self) -> type:
        """uvicorn's h11 protocol class enforcing these limits (``uvicorn.Config(http=...)``)."""
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return type("GuardedH11", (_Guard, H11Protocol), {"limits": self})

    def uvicorn_kwargs(self) -> dict[str, Any]:
        """``uvicorn.Config``/``uvicorn.run`` keyword arguments for these limits."""
        # asyncio accepts up to `backlog` sockets in one go before any is seen: keep that burst small, so
        # open sockets stay near max_connections + backlog, under the open-file limit
        backlog = max(16, min(2048, self.max_connections // 4))
        return {"http": self.protocol(), "timeout_keep_alive": self.keep_alive_timeout_s, "backlog": backlog}


class BackgroundServer:
    """Run an ASGI app under uvicorn in a daemon thread on a free port (tests, benchmarks, notebooks).

    Args:
        app: The application (e.g. from :func:`create_app`).
        host: Interface to bind.
        port: Port to bind; 0 picks a free one.
        lifespan: uvicorn's ``lifespan`` (``"on"`` runs the app's startup and shutdown events, e.g. the
            OpenEnv server's idle-session reaper).
        limits: Per-connection deadlines and the connection cap (:class:`ConnectionLimits`); None keeps
            uvicorn's own behaviour.

    Attributes:
        url: ``http://host:port/retrieve`` once started.
    """

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        lifespan: Literal["auto", "on", "off"] = "off",
        limits: ConnectionLimits | None = None,
    ) -> None:
        import uvicorn

        self._sock = socket.create_server((host, port))
        self.host, self.port = host, self._sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}/retrieve"
        extra = limits.uvicorn_kwargs() if limits is not None else {}
        config = uvicorn.Config(app, log_level="warning", lifespan=lifespan, timeout_graceful_shutdown=10, **extra)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> "BackgroundServer":
        self._thread.start()
        deadline = time.monotonic() + 30.0
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the retrieval server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 15.0) -> None:
        """Ask uvicorn to shut down gracefully (in-flight requests finish) and wait for it."""
        self.server.should_exit = True
        self._thread.join(timeout)
        self._sock.close()

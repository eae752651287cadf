"""Run an ASGI app with uvicorn from a background thread (tests, benchmarks, notebooks)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

__all__ = ["background_uvicorn"]


@contextlib.contextmanager
def background_uvicorn(app: Any, host: str = "127.0.0.1", port: int = 0, start_timeout: float = 30.0) -> Iterator[str]:
    """Serve an ASGI app from a thread (``port=0``: a free port); yields ``http://host:port``."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the server did not start within {start_timeout} s")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)

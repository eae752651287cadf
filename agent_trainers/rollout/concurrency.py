"""Run env steps concurrently on threads, each with its own time-out: :func:`run_with_timeouts`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["run_with_timeouts"]


@dataclass
class _Call:
    fn: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    started: float | None = None
    value: Any = None
    error: BaseException | None = None
    released: bool = False


def run_with_timeouts(fns: Sequence[Callable[[], Any]], workers: int, timeout_s: float) -> list[tuple[str, Any]]:
    """Run ``fns`` on at most ``workers`` daemon threads; never waits past each call's time-out.

    Each call's clock starts when it starts running. Returns, per call,
    ``("ok", value)``, ``("error", exception)`` or ``("timeout", None)``. A
    timed-out call keeps its (daemon) thread until it returns by itself; the
    caller must not use its object again.
    """
    calls = [_Call(fn) for fn in fns]
    gate, lock = threading.Semaphore(workers), threading.Lock()

    def release(c: _Call) -> None:
        with lock:
            if not c.released:
                c.released = True
                gate.release()

    def work(c: _Call) -> None:
        gate.acquire()
        c.started = time.monotonic()
        try:
            c.value = c.fn()
        except BaseException as exc:  # reported to the caller as an episode-ending error
            c.error = exc
        finally:
            c.done.set()
            release(c)

    for c in calls:
        threading.Thread(target=work, args=(c,), daemon=True).start()
    results: list[tuple[str, Any] | None] = [None] * len(calls)
    while any(r is None for r in results):
        for i, c in enumerate(calls):
            if results[i] is not None:
                continue
            if c.done.is_set():
                results[i] = ("error", c.error) if c.error is not None else ("ok", c.value)
            elif c.started is not None and time.monotonic() - c.started > timeout_s:
                results[i] = ("timeout", None)
                release(c)  # the hung call's slot goes to the next call
        if any(r is None for r in results):
            time.sleep(0.002)
    return [r for r in results if r is not None]

"""Shutting down without dropping clients: on SIGTERM the server starts no new processes, gives
running ones `config.drain_s` seconds to finish, then cancels what still runs and wakes every
waiter (a `GET …/result?wait=` still waiting answers 503 in the JSON error format, as does a
later `result` for a process the drain cancelled). The HTTP
server keeps accepting connections meanwhile — a new program is refused with a JSON 503, a
WebSocket session gets its program's result or error — and closes them only after that.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from .state import State

log = logging.getLogger("symphony.server")


_tasks: set[asyncio.Task] = set()  # the loop keeps only weak references to tasks


DRAIN_GRACE_S = 0.5  # after the drain's cancels: for WebSocket sessions and waiters to send their answers


def start_drain(state: State, then: Callable[[], None] | None = None) -> None:
    """Begin draining from a signal handler (any thread); `then` runs once the drain is done and
    its answers are sent (the HTTP server keeps accepting until then: new requests get 503)."""

    loop = state.loop
    if loop is None or state.draining:
        if then is not None:
            then()
        return

    async def drain_then() -> None:
        await drain(state)
        if then is not None:
            await asyncio.sleep(DRAIN_GRACE_S)
            then()

    def start() -> None:
        t = loop.create_task(drain_then())
        _tasks.add(t)
        t.add_done_callback(_tasks.discard)

    loop.call_soon_threadsafe(start)


async def drain(state: State) -> None:
    if state.draining:
        return
    state.draining = True
    end = time.monotonic() + state.config.drain_s
    while state.registry.live() and time.monotonic() < end:
        await asyncio.sleep(0.05)
    state.drained = True
    late = [r for r in state.registry.all() if not r.proc.done]
    if late:
        log.info("drain deadline passed: cancelling %d process(es)", len(late))
    for r in late:
        r.cut_by_drain = True
        r.proc.cancel(f"the server is shutting down (it gave running processes {state.config.drain_s:g} s to finish)")
    for r in state.registry.all():
        r._notify()


__all__ = ["drain", "start_drain"]

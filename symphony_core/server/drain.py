"""Shutting down without dropping clients: on SIGTERM the server starts no new processes, gives
running ones `config.drain_s` seconds to finish, then cancels what still runs and wakes every
waiter (a `GET …/result?wait=` still waiting answers 503 in the JSON error format, as does a
later `result` for a process the drain cancelled). The HTTP
server itself closes its connections only after that (serve.py gives it the drain plus a margin).
"""

from __future__ import annotations

import asyncio
import logging
import time

from .state import State

log = logging.getLogger("symphony.server")


_tasks: set[asyncio.Task] = set()  # the loop keeps only weak references to tasks


def start_drain(state: State) -> None:
    """Begin draining from a signal handler (any thread)."""

    loop = state.loop
    if loop is None or state.draining:
        return

    def start() -> None:
        t = loop.create_task(drain(state))
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

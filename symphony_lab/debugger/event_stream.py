"""The debugger's event stream: subscribers and the typed event messages they get.

One part of `Debugger`, composed rather than mixed in: the core and its other parts publish
through `emit(name, body)`; front-ends attach with `subscribe` / `event_queue` (the Debugger's
methods of the same names hand them on). A broken subscriber never takes a LIP down.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable

from symphony_core.events import now

from .viewdata import jsonable

log = logging.getLogger(__name__)


class EventStream:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: list[tuple[Callable[[dict], None], frozenset | None]] = []
        self._seq = itertools.count(1)

    @property
    def active(self) -> bool:
        return bool(self._subs)

    def subscribe(self, fn: Callable[[dict], None], kinds: list[str] | None = None) -> Callable[[], None]:
        """Call `fn(message)` for every event message (optionally only these event names)."""
        entry = (fn, None if kinds is None else frozenset(kinds))
        with self._lock:
            self._subs = self._subs + [entry]

        def unsubscribe() -> None:
            with self._lock:
                self._subs = [s for s in self._subs if s is not entry]

        return unsubscribe

    def event_queue(
        self, kinds: list[str] | None = None, maxsize: int = 100_000
    ) -> tuple[queue.Queue, Callable[[], None]]:
        """`subscribe` into a queue: returns `(queue, unsubscribe)`; events past `maxsize` are dropped."""
        q: queue.Queue = queue.Queue(maxsize)

        def put(m: dict) -> None:
            try:
                q.put_nowait(m)
            except queue.Full:
                pass

        return q, self.subscribe(put, kinds)

    def emit(self, name: str, body: dict | Callable[[], dict]) -> None:
        """Send an event message to the subscribers that want `name` (`body` may be a function,
        called only if someone does)."""
        subs = self._subs
        if not subs:
            return
        msg = None
        for fn, kinds in subs:
            if kinds is not None and name not in kinds:
                continue
            if msg is None:
                b = body() if callable(body) else body
                msg = {"type": "event", "event": name, "seq": next(self._seq), "ts": now(), "body": jsonable(b)}
            try:
                fn(msg)
            except Exception:  # a broken front-end must never take a LIP down: it is logged, the LIP goes on
                log.warning("an event subscriber failed on a %r event", name, exc_info=True)


__all__ = ["EventStream"]

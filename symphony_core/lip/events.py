"""Structured events from the kernel and the schedulers, and the bus that carries them.

An event is a plain dict-like dataclass so every front-end (TUI, notebook, WebSocket) can
serialise it the same way. With no subscriber, `publish` is one attribute test.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

_T0 = time.perf_counter()


def now() -> float:
    """Seconds since the engine module loaded; the clock of every event and record."""
    return time.perf_counter() - _T0


@dataclass
class Event:
    kind: str  # syscall_enter | syscall_exit | process_start | process_exit | batch | message | thread_start | thread_exit
    ts: float
    pid: int | None = None
    tid: int | None = None
    call: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    error: str | None = None
    file: str | None = None
    line: int | None = None
    seq: int = 0  # per-thread syscall counter
    duration: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


class EventBus:
    def __init__(self) -> None:
        self._subs: list[Callable[[Event], None]] = []
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return bool(self._subs)

    def publish(self, ev: Event) -> None:
        for fn in self._subs:
            try:
                fn(ev)
            except Exception:  # a broken viewer must never take a LIP down
                pass

    def subscribe(self, fn: Callable[[Event], None]) -> Callable[[], None]:
        """Call `fn(event)` for every event from now on; returns the unsubscribe function."""
        with self._lock:
            self._subs = self._subs + [fn]

        def unsubscribe() -> None:
            with self._lock:
                self._subs = [s for s in self._subs if s is not fn]

        return unsubscribe

    def queue(self, maxsize: int = 0) -> tuple["queue.Queue[Event]", Callable[[], None]]:
        """A queue that receives every event (drops when full, never blocks the engine)."""
        q: queue.Queue[Event] = queue.Queue(maxsize)

        def put(ev: Event) -> None:
            try:
                q.put_nowait(ev)
            except queue.Full:
                pass

        return q, self.subscribe(put)

"""Structured events from the kernel and the schedulers, and the bus that carries them.

An event is a plain record with a dict form (`to_dict`) so every front-end (TUI, notebook,
WebSocket) can serialise it the same way. With no subscriber, `publish` is never reached: the
callers test `bus.active` (one attribute read) before building anything.

An event's `args` may be given as a function: it is called on first access, so an event whose
arguments are costly to build (a batch's member list) costs nothing when no subscriber looks.
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

_T0 = time.perf_counter()
_perf = time.perf_counter


def now() -> float:
    """Seconds since the engine module loaded; the clock of every event and record."""
    return _perf() - _T0


_ATOMS = (str, int, float, bool, type(None))


def _copy(x: Any) -> Any:
    """What `dataclasses.asdict` did to a field: containers copied recursively, the rest deep-copied."""
    if isinstance(x, _ATOMS):
        return x
    if isinstance(x, dict):
        return {_copy(k): _copy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_copy(v) for v in x]
    if isinstance(x, tuple):
        return type(x)(*[_copy(v) for v in x]) if hasattr(x, "_fields") else tuple(_copy(v) for v in x)
    return copy.deepcopy(x)


class Event:
    """kind: syscall_enter | syscall_exit | process_start | process_exit | batch | message |
    thread_start | thread_exit. `seq` is the thread's syscall counter."""

    __slots__ = ("kind", "ts", "pid", "tid", "call", "_args", "result", "error", "file", "line", "seq", "duration")
    FIELDS = ("kind", "ts", "pid", "tid", "call", "args", "result", "error", "file", "line", "seq", "duration")

    def __init__(
        self,
        kind: str,
        ts: float,
        pid: int | None = None,
        tid: int | None = None,
        call: str | None = None,
        args: dict[str, Any] | Callable[[], dict] | None = None,
        result: Any = None,
        error: str | None = None,
        file: str | None = None,
        line: int | None = None,
        seq: int = 0,
        duration: float | None = None,
    ) -> None:
        self.kind = kind
        self.ts = ts
        self.pid = pid
        self.tid = tid
        self.call = call
        self._args = {} if args is None else args
        self.result = result
        self.error = error
        self.file = file
        self.line = line
        self.seq = seq
        self.duration = duration

    @property
    def args(self) -> dict[str, Any]:
        a = self._args
        if not isinstance(a, dict):  # built on first access
            a = self._args = a()
        return a

    @args.setter
    def args(self, value: dict[str, Any]) -> None:
        self._args = value

    def to_dict(self) -> dict:
        return {f: _copy(getattr(self, f)) for f in self.FIELDS}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self.FIELDS)

    __hash__ = None  # type: ignore[assignment]  # like the dataclass it replaces

    def __repr__(self) -> str:
        return "Event(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in self.FIELDS) + ")"


class EventBus:
    def __init__(self) -> None:
        self._subs: list[Callable[[Event], None]] = []
        self._lock = threading.Lock()
        self.active = False  # a plain attribute: the hot paths read it once per syscall

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
            self.active = True

        def unsubscribe() -> None:
            with self._lock:
                self._subs = [s for s in self._subs if s is not fn]
                self.active = bool(self._subs)

        return unsubscribe

    def queue(self, maxsize: int = 0) -> tuple[queue.Queue[Event], Callable[[], None]]:
        """A queue that receives every event (drops when full, never blocks the engine)."""
        q: queue.Queue[Event] = queue.Queue(maxsize)

        def put(ev: Event) -> None:
            try:
                q.put_nowait(ev)
            except queue.Full:
                pass

        return q, self.subscribe(put)

"""Collect what a LIP profile is made of, from the engine's event bus.

The collector is a bus subscriber. Syscall and thread events are published by the LIP thread
itself, so at each of them the collector reads that thread's own CPU clock
(`time.thread_time`): between two syscalls of a thread, the CPU seconds are the program's own
Python and the rest of the wall time is blocking (sleeps, sockets, tools). Batch events (from
the scheduler thread, or from a lone caller's own thread inside its `pred`: sched/batch_scheduler.py)
charge each member's thread a share of the forward pass, by tokens.

Which line a stretch between two syscalls belongs to is found by sampling: a small thread reads
`sys._current_frames()` every `interval` seconds for the LIP threads that are outside any
syscall, and a stretch's time is divided among the stacks it saw (a stretch too short to be
sampled goes to the stack of the syscall that ends it). Nothing runs while no collector is
attached; while one is, memory is bounded by `max_records` per thread.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from symphony_core.events import Event, now

from .profile import Profile, Stack, build_profile

_CORE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["symphony_core"].__file__)))
_CORE_PKG = os.path.join(_CORE_DIR, "symphony_core")
_LAB_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_kept: dict[str, bool] = {}  # file name -> is it the LIP's (cached: a frame walk per syscall)


def lip_stack(frame) -> Stack:
    """The LIP's frames of a Python stack: everything outside symphony_core, symphony_lab and
    the thread machinery, outermost first (the standard library's frames are kept: a tool that
    waits in `socket.recv` shows there)."""
    out: list[tuple[str, int, str]] = []
    kept = _kept
    f = frame
    while f is not None:
        code = f.f_code
        name = code.co_filename
        keep = kept.get(name)
        if keep is None:
            keep = kept[name] = not (name.startswith((_CORE_PKG, _LAB_PKG)) or name.endswith("threading.py"))
        if keep:
            out.append((name, f.f_lineno, code.co_name))
        f = f.f_back
    out.reverse()
    return tuple(out)


@dataclass
class SyscallSpan:
    """One syscall of a thread: [t0, t1] on the engine clock; `forward` is filled by batches."""

    call: str
    t0: float
    stack: Stack
    t1: float | None = None
    forward: float = 0.0
    tokens: int = 0
    batches: int = 0


@dataclass
class GapSpan:
    """Between two syscalls of a thread: its own CPU seconds and the stacks the sampler saw."""

    t0: float
    t1: float
    own: float
    samples: dict[Stack, int]
    end_stack: Stack


@dataclass
class ThreadLog:
    pid: int
    tid: int
    name: str
    t_start: float
    t_end: float | None = None
    ident: int | None = None
    mark_t: float = 0.0  # wall and CPU clocks at the last boundary
    mark_cpu: float = 0.0
    in_syscall: bool = False
    samples: dict[Stack, int] = field(default_factory=dict)
    syscalls: deque = field(default_factory=deque)
    gaps: deque = field(default_factory=deque)
    dropped: int = 0


class ProfileCollector:
    """Attach to an engine's bus (`attach(bus)`), run programs, `detach()`, then `profile()`."""

    def __init__(self, pids: set[int] | None = None, interval: float = 0.005, max_records: int = 50_000) -> None:
        self.pids = pids  # None: every process
        self.interval = interval
        self.max_records = max_records
        self.threads: dict[tuple[int, int], ThreadLog] = {}
        self.pages: deque = deque(maxlen=max_records)  # (t, pages used, pages total) at each batch
        self.batches: deque = deque(maxlen=max_records)  # (t_start, t_end, tokens, size, member threads)
        self._main: dict[int, tuple[int, int]] = {}  # pid -> its main thread's key
        self._lock = threading.Lock()
        self._unsub = None
        self._sampler: threading.Thread | None = None
        self._stop = threading.Event()

    # --- attaching ------------------------------------------------------------------------------
    def attach(self, bus) -> ProfileCollector:
        if self._unsub is not None:
            raise RuntimeError("this collector is already attached")
        self._stop.clear()
        self._unsub = bus.subscribe(self.on_event)
        self._sampler = threading.Thread(target=self._sample_loop, name="lip-profiler", daemon=True)
        self._sampler.start()
        return self

    def detach(self) -> None:
        if self._unsub is not None:
            self._unsub()
            self._unsub = None
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(2.0)
            self._sampler = None

    def __enter__(self) -> ProfileCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    # --- events ---------------------------------------------------------------------------------
    def on_event(self, ev: Event) -> None:
        kind = ev.kind
        if kind == "batch":
            self._on_batch(ev)
            return
        if ev.pid is None or (self.pids is not None and ev.pid not in self.pids):
            return
        if kind in ("process_start", "thread_start"):
            t = self._thread(ev, start=True)
            if kind == "process_start":
                self._main[ev.pid] = (ev.pid, ev.tid)
            t.ident = threading.get_ident()
            t.mark_t, t.mark_cpu = ev.ts, time.thread_time()
        elif kind == "syscall_enter":
            t = self._thread(ev)
            stack = lip_stack(sys._getframe(1))
            self._close_gap(t, ev.ts, stack)
            span = SyscallSpan(ev.call or "?", ev.ts, stack)
            with self._lock:
                t.in_syscall = True
                self._keep(t, t.syscalls, span)
        elif kind == "syscall_exit":
            t = self._thread(ev)
            with self._lock:
                for span in reversed(t.syscalls):
                    if span.t1 is None:
                        span.t1 = ev.ts
                        break
                t.in_syscall = False
                t.samples = {}
            t.mark_t, t.mark_cpu = ev.ts, time.thread_time()
        elif kind in ("thread_exit", "process_exit"):
            key = (ev.pid, ev.tid) if kind == "thread_exit" else self._main.get(ev.pid)
            t = self.threads.get(key) if key is not None else None
            if t is not None and t.t_end is None and t.ident == threading.get_ident():
                self._close_gap(t, ev.ts, ())
                t.t_end = ev.ts

    def _thread(self, ev: Event, start: bool = False) -> ThreadLog:
        key = (ev.pid, ev.tid)
        t = self.threads.get(key)
        if t is None:  # attached while the thread already ran: start it at this event
            name = ev.args.get("name", "") if start else ""
            t = ThreadLog(
                ev.pid, ev.tid, name, ev.ts, ident=threading.get_ident(), mark_t=ev.ts, mark_cpu=time.thread_time()
            )
            with self._lock:
                self.threads[key] = t
                if ev.tid == 1:  # the main thread, met mid-run: its process's exit ends it
                    self._main.setdefault(ev.pid, key)
        return t

    def _close_gap(self, t: ThreadLog, ts: float, end_stack: Stack) -> None:
        cpu = time.thread_time()
        with self._lock:
            gap = GapSpan(t.mark_t, ts, max(0.0, min(cpu - t.mark_cpu, ts - t.mark_t)), t.samples, end_stack)
            t.samples = {}
            self._keep(t, t.gaps, gap)

    def _keep(self, t: ThreadLog, log: deque, item: Any) -> None:
        log.append(item)
        if len(log) > self.max_records:
            log.popleft()
            t.dropped += 1

    def _on_batch(self, ev: Event) -> None:
        d = ev.args
        t1 = d["t_end"]
        t0 = d["t_start"]
        total = d["tokens"] or 1
        with self._lock:
            self.pages.append((t1, d["pages_used"], d["pages_total"]))
            self.batches.append((t0, t1, d["tokens"], d["size"], {(m["pid"], m["tid"]) for m in d["members"]}))
            for m in d["members"]:
                t = self.threads.get((m["pid"], m["tid"]))
                if t is None:
                    continue
                for span in reversed(t.syscalls):  # the pred this batch ran for started before it
                    if span.t0 <= t0:
                        span.forward += (t1 - t0) * m["tokens"] / total
                        span.tokens += m["tokens"]
                        span.batches += 1
                        break

    # --- sampling -------------------------------------------------------------------------------
    def _sample_loop(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                running = {
                    t.ident: t
                    for t in self.threads.values()
                    if t.t_end is None and not t.in_syscall and t.ident is not None
                }
            if not running:
                continue
            frames = sys._current_frames()
            for ident, t in running.items():
                f = frames.get(ident)
                if f is None:
                    continue
                stack = lip_stack(f)
                with self._lock:
                    if not t.in_syscall:
                        t.samples[stack] = t.samples.get(stack, 0) + 1
            del frames

    def wait_ended(self, pid: int, timeout: float = 5.0) -> bool:
        """Wait until every thread of `pid` has its end event (the exit event follows the result)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                ts = [t for t in self.threads.values() if t.pid == pid]
                if ts and all(t.t_end is not None for t in ts) and pid in self._main:
                    return True
            time.sleep(0.005)
        return False

    def profile(self, end_ts: float | None = None) -> Profile:
        with self._lock:
            return build_profile(self, now() if end_ts is None else end_ts)

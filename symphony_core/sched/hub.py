"""The greenlet runner: many LIP threads as greenlets on the engine's own thread, resumed once per batch.

With the default runner every LIP thread is an OS thread, and every `pred` ends with the kernel
waking that thread (a futex hand-off, ~13 µs) and the CPU switching stacks, caches and all. With
`Engine(lip_runner="greenlets")` a process's threads are greenlets instead, all on the batch
scheduler's thread, which drives this hub the way an event loop drives its tasks: it resumes every
greenlet whose wait has fired, each runs until it waits again (in `pred`, `recv` or `join`), and
when none is left to run — every program has said what it wants next — the scheduler fires the
batch on the same thread and resumes its members after it. No thread hands work to another and the
batch is as full as it can be. The stub-model bench (bench/runtime_overhead.py) measures the
difference.

What it costs: greenlets take turns only at those waits. A program that computes for long in its
own Python, or blocks in the OS (`time.sleep`, a socket), holds up every other program and the
forward passes until it waits again; that is why it is not the default. A kill still stops a program
stuck in a loop of its own (an asynchronous exception into the engine's thread, sent only while that
program is the one running; see `interrupt`).

Every wait is a `HubWait`: created by the greenlet that will wait, fired once (by the scheduler,
a sender, a finished thread, a kill or its timeout), after which the hub switches back into it
exactly once.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import logging
import threading
import time
from typing import Any

import greenlet

logger = logging.getLogger(__name__)

# CPython's asynchronous exception as a C function: calling it runs no Python frame, so an exception
# already pending for the thread cannot land in the middle of the call that takes it back.
SET_ASYNC_EXC = ctypes.pythonapi.PyThreadState_SetAsyncExc


class _Runner:
    """A LIP thread's greenlet and the one wait it is parked on (None while it runs)."""

    __slots__ = ("th", "glet", "wait")

    def __init__(self, th: Any) -> None:
        self.th = th
        self.glet: greenlet.greenlet | None = None
        self.wait: HubWait | None = None


class HubWait:
    """One wait of one greenlet: fired at most once; `timed_out` says whether its timeout fired it."""

    __slots__ = ("hub", "runner", "fired", "timed_out", "timed")

    def __init__(self, hub: Hub, runner: _Runner) -> None:
        self.hub = hub
        self.runner = runner
        self.fired = False
        self.timed_out = False
        self.timed = False  # it has an entry in the hub's timer heap

    def interrupt(self) -> None:
        """Wake the waiter now (its process was killed); what it waited for stays unset."""
        self.hub.fire(self)


class Hub:
    """The greenlet LIP threads of an engine, run by the thread that drives it (see the module docstring).

    The driver (the batch scheduler's thread) calls `bind` once, then `run_ready` whenever it may
    run programs; `wake` is how the hub tells it that a wait fired from another thread."""

    def __init__(self, wake) -> None:
        # Plain locks taken with `with`: an asynchronous exception cannot land between taking one and
        # its `with` block, as it can inside a Python-level `Condition.__enter__` (leaving it held).
        self._lock = threading.Lock()
        self._wake = wake  # called after a wait fires: the driver looks again
        self._ready: list[HubWait] = []
        self._timers: list[tuple[float, int, HubWait]] = []
        self._stale_timers = 0  # heap entries of waits fired some other way, dropped once they are many
        self._seq = itertools.count()
        self._runner: _Runner | None = None  # the greenlet running now (None: the driver's own code)
        self._runner_lock = threading.Lock()  # `_runner` and the asynchronous exception move together under it
        self._async_sent = False
        self._main: greenlet.greenlet | None = None
        self.ident = 0  # the driver thread's id, for its asynchronous exceptions
        self.thread: threading.Thread | None = None
        self.live = 0  # greenlets started and not ended

    def bind(self) -> None:
        """Called once, on the driver's thread, before any greenlet starts."""
        self._main = greenlet.getcurrent()
        self.ident = threading.get_ident()
        self.thread = threading.current_thread()

    # --- from any thread ---------------------------------------------------------------------
    def start(self, th: Any, run) -> None:
        """Run `run()` as LIP thread `th`'s greenlet, from the hub's next turn."""
        r = _Runner(th)

        def body() -> None:
            self._enter(r)
            try:
                run()
            finally:
                self._leave()
                with self._lock:
                    self.live -= 1

        assert self._main is not None, "Hub.start before its driver bound it"
        r.glet = greenlet.greenlet(body, parent=self._main)
        first = r.wait = HubWait(self, r)
        with self._lock:
            self.live += 1
        self.fire(first)

    def fire(self, w: HubWait) -> None:
        self.fire_many((w,))

    def fire_many(self, waits) -> None:
        """Resume each not-yet-fired wait's greenlet (one hub wake-up for all of them)."""
        woke = False
        with self._lock:
            for w in waits:
                if not w.fired:
                    w.fired = True
                    self._stale_timers += w.timed
                    self._ready.append(w)
                    woke = True
        if woke and not self.on_hub():  # the driver itself runs the ready ones before it waits again
            self._wake()

    def interrupt(self, th: Any, exc_type: type[BaseException]) -> None:
        """Raise `exc_type` in `th` if it is the greenlet running now, in its own code (a program
        stuck in a loop). It is sent while the thread is running its own code (`LIPThread.while_running`), and
        entering a syscall or ending (lip/runtime.py) changes the state under that lock, so it lands
        in the program's code or at the entry of the call it makes next. Should it not have landed
        when the greenlet stops running, `_leave` or the thread's end takes it back: it never lands
        in another program or in the hub's loop."""

        def send() -> None:
            with self._runner_lock:
                r = self._runner
                if r is not None and r.th is th:
                    SET_ASYNC_EXC(ctypes.c_ulong(self.ident), ctypes.py_object(exc_type))
                    self._async_sent = True

        th.while_running(send)

    # --- on the hub thread, from a LIP greenlet ------------------------------------------------
    def on_hub(self) -> bool:
        return threading.get_ident() == self.ident

    def current_thread(self) -> Any:
        """The LIP thread whose greenlet runs now (None in the hub's own loop or off the hub)."""
        r = self._runner
        return r.th if r is not None and self.on_hub() else None

    def new_wait(self) -> HubWait:
        """A wait for the calling greenlet, to hand to whoever will fire it before `park`."""
        r = self._runner
        assert r is not None, "new_wait outside a LIP greenlet"
        w = r.wait = HubWait(self, r)
        return w

    def park(self, w: HubWait, timeout: float | None = None) -> bool:
        """Switch back to the hub until `w` fires; True unless its timeout fired it."""
        r = w.runner
        try:
            if timeout is not None:
                with self._lock:
                    if not w.fired:
                        heapq.heappush(self._timers, (time.monotonic() + max(0.0, timeout), next(self._seq), w))
                        w.timed = True
            self._leave()
            assert self._main is not None
            self._main.switch()
            self._enter(r)
        except BaseException:  # a kill's exception landed on the way out: this wait is over
            r.wait = None
            raise
        return not w.timed_out

    def withdraw(self, w: HubWait) -> None:
        """The waiter no longer waits on `w`: a later fire (or one queued already) resumes nobody."""
        with self._lock:
            if not w.fired:
                w.fired = True
                self._stale_timers += w.timed
        if w.runner.wait is w:
            w.runner.wait = None

    def _enter(self, r: _Runner) -> None:
        with self._runner_lock:
            self._runner = r

    def _leave(self) -> None:
        with self._runner_lock:
            self._runner = None
            if self._async_sent:  # sent for this greenlet and not landed: take it back
                self._async_sent = False
                SET_ASYNC_EXC(ctypes.c_ulong(self.ident), None)

    # --- on the driver's thread -----------------------------------------------------------------
    def run_ready(self) -> bool:
        """Resume every greenlet whose wait has fired (and whatever fires while they run) until none
        is left ready. True if any ran."""
        ran = False
        while True:
            with self._lock:
                self._expire_timers()
                if not self._ready:
                    return ran
                batch, self._ready = self._ready, []
            for w in batch:
                r = w.runner
                if r.wait is not w or r.glet is None or r.glet.dead:
                    continue  # withdrawn, or its greenlet was resumed another way
                r.wait = None
                ran = True
                try:
                    r.glet.switch()
                except BaseException:  # a greenlet's body catches its own; this is a bug
                    logger.exception("LIP greenlet raised into the hub")

    def has_ready(self) -> bool:
        with self._lock:
            return bool(self._ready)

    def next_timer(self) -> float | None:
        """Seconds until the earliest timed wait fires (0 when one is due), or None."""
        with self._lock:
            left = self._expire_timers()
            return 0.0 if self._ready else left

    def _expire_timers(self) -> float | None:
        """Move the waits whose timeout has come to the ready list (the lock is held); seconds to the next one."""
        timers = self._timers
        if self._stale_timers > 64 and 2 * self._stale_timers > len(timers):  # fired ones behind a long wait
            timers[:] = [e for e in timers if not e[2].fired]
            heapq.heapify(timers)
            self._stale_timers = 0
        t = time.monotonic()
        while timers and (timers[0][0] <= t or timers[0][2].fired):
            _, _, w = heapq.heappop(timers)
            if w.fired:
                self._stale_timers -= 1
            else:
                w.fired = w.timed_out = True
                self._ready.append(w)
        return None if not timers else max(0.0, timers[0][0] - t)

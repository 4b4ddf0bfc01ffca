"""The greenlet runner: many LIP threads as greenlets on one OS thread, resumed once per batch.

With the default runner every LIP thread is an OS thread, and every `pred` ends with the kernel
waking that thread (a futex hand-off, ~13 µs) and the CPU switching stacks, caches and all. With
`Engine(lip_runner="greenlets")` a process's threads are greenlets on the runtime's one hub
thread instead: a waiting greenlet (in `pred`, `recv` or `join`) switches back to the hub, and the
batch scheduler hands the hub all of a batch's finished calls at once, which it resumes one after
the other in the same OS thread. The stub-model bench (bench/runtime_overhead.py) measures the
difference.

What it costs: greenlets take turns only at those waits. A program that computes for long in its
own Python, or blocks in the OS (`time.sleep`, a socket), holds up every other program on the hub
until it waits again; that is why it is not the default. A kill still stops a program stuck in a
loop of its own (an asynchronous exception into the hub thread, sent only while that program is
the one running; see `interrupt`).

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
    """The OS thread that runs greenlet LIP threads (see the module docstring)."""

    def __init__(self, name: str = "symphony-lip-hub") -> None:
        # Plain locks taken with `with`: an asynchronous exception cannot land between taking one and
        # its `with` block, as it can inside a Python-level `Condition.__enter__` (leaving it held).
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._ready: list[HubWait] = []
        self._timers: list[tuple[float, int, HubWait]] = []
        self._stale_timers = 0  # heap entries of waits fired some other way, dropped once they are many
        self._seq = itertools.count()
        self._stop = False
        self._runner: _Runner | None = None  # the greenlet running now (None: the hub's own loop)
        self._runner_lock = threading.Lock()  # `_runner` and the asynchronous exception move together under it
        self._async_sent = False
        self._main: greenlet.greenlet | None = None
        self.ident = 0  # the hub thread's id, for its asynchronous exceptions
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()
        self._started.wait()

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

        r.glet = greenlet.greenlet(body, parent=self._main)
        first = r.wait = HubWait(self, r)
        self.fire(first)

    def fire(self, w: HubWait) -> None:
        self.fire_many((w,))

    def fire_many(self, waits) -> None:
        """Resume each not-yet-fired wait's greenlet (one hub wake-up for all of them)."""
        with self._lock:
            woke = False
            for w in waits:
                if not w.fired:
                    w.fired = True
                    self._stale_timers += w.timed
                    self._ready.append(w)
                    woke = True
            if woke:
                self._cv.notify()

    def interrupt(self, th: Any, exc_type: type[BaseException]) -> None:
        """Raise `exc_type` in `th` if it is the greenlet running now, in its own code (a program
        stuck in a loop). It is sent under the process's lock while `th.state == "running"`, and
        entering a syscall or ending (lip/runtime.py) changes the state under that lock, so it lands
        in the program's code or at the entry of the call it makes next. Should it not have landed
        when the greenlet stops running, `_leave` or the thread's end takes it back: it never lands
        in another program or in the hub's loop."""
        with th.proc.lock:
            if th.state != "running" or th.done.is_set():
                return
            with self._runner_lock:
                r = self._runner
                if r is not None and r.th is th:
                    SET_ASYNC_EXC(ctypes.c_ulong(self.ident), ctypes.py_object(exc_type))
                    self._async_sent = True

    def stop(self) -> None:
        with self._lock:
            self._stop = True
            self._cv.notify()

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
                        self._cv.notify()
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

    # --- the hub's own loop --------------------------------------------------------------------
    def _loop(self) -> None:
        self._main = greenlet.getcurrent()
        self.ident = threading.get_ident()
        self._started.set()
        while True:
            with self._lock:
                wait_s = self._expire_timers()
                while not self._ready and not self._stop:
                    self._cv.wait(wait_s)
                    wait_s = self._expire_timers()
                if self._stop and not self._ready:
                    return
                batch, self._ready = self._ready, []
            for w in batch:
                r = w.runner
                if r.wait is not w or r.glet is None or r.glet.dead:
                    continue  # withdrawn, or its greenlet was resumed another way
                r.wait = None
                try:
                    r.glet.switch()
                except BaseException:  # a greenlet's body catches its own; this is a bug
                    logger.exception("LIP greenlet raised into the hub")

    def _expire_timers(self) -> float | None:
        """Fire the waits whose timeout has come (the lock is held); seconds to the next one."""
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

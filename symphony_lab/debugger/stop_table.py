"""The stopped threads: one `Stop` per (pid, tid), the threads asked to pause at their next stop
point, and the condition that every waiter (`wait_stopped`) and every resumer shares.

The debugger core owns one `StopTable` and gives it to each part that acts on stops (the kernel
hook holds threads in it, the inspector and the overrides find stops in it, the replayer steps
back from one); none of them reaches into another's state.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from .errors import DebuggerError
from .stops import Stop, stop_view


class StopTable:
    """Thread-safe. `info(stop)` is a stop's protocol view (its distribution's top `topk`)."""

    def __init__(self, tokenizer, topk: int, summarize_result: Callable[[str, Any], Any]) -> None:
        self.tokenizer = tokenizer
        self.topk = topk
        self._summarize = summarize_result
        self._cv = threading.Condition(threading.RLock())
        self._ids = itertools.count(1)
        self._last_id = 0
        self._stops: dict[tuple[int, int], Stop] = {}
        self._pause_req: set = set()  # LIPThreads to stop at their next stop point

    def info(self, stop: Stop) -> dict:
        return stop_view(stop, self.tokenizer, self.topk, self._summarize)

    def next_id(self) -> int:
        with self._cv:
            self._last_id = next(self._ids)
            return self._last_id

    @property
    def last_id(self) -> int:
        """The newest stop's id (0 before the first): a step's `after`."""
        with self._cv:
            return self._last_id

    # ---------------------------------------------------------------- holding and resuming
    def hold(self, stop: Stop) -> None:
        with self._cv:
            self._stops[(stop.pid, stop.tid)] = stop
            self._cv.notify_all()

    def let_go(self, stop: Stop) -> None:
        """`stop`'s thread runs again (however it was resumed): it leaves the table."""
        with self._cv:
            if self._stops.get((stop.pid, stop.tid)) is stop:
                del self._stops[(stop.pid, stop.tid)]
            self._cv.notify_all()

    def resume(self, stops: list[Stop], action: str) -> list[list[int]]:
        """Resume `stops` with `action` ("continue", "step", …, "detach"); their [pid, tid]s."""
        with self._cv:
            for s in stops:
                if self._stops.get((s.pid, s.tid)) is s:
                    del self._stops[(s.pid, s.tid)]
                self._pause_req.discard(s.thread)
                s.action = action
                s.resumed.set()
            self._cv.notify_all()
        return [[s.pid, s.tid] for s in stops]

    def retag(self, stop: Stop, step: int | None) -> None:
        """A step lands on `stop`, already held (the thread a stepping thread joins)."""
        with self._cv:
            stop.lands(step)
            self._cv.notify_all()

    def resume_all(self, action: str) -> list[list[int]]:
        """Resume every stop and forget every pause request (at detach)."""
        with self._cv:
            stops = list(self._stops.values())
            self._pause_req.clear()
        return self.resume(stops, action)

    def changed(self) -> None:
        """Wake the waiters (a process ended: `wait` answers `exited`)."""
        with self._cv:
            self._cv.notify_all()

    # ---------------------------------------------------------------- finding
    def matching(self, pid: int | None = None, tid: int | None = None) -> list[Stop]:
        """The stops of `pid` / `tid` (None: any), oldest first."""
        with self._cv:
            found = [s for s in self._stops.values() if (pid is None or s.pid == pid) and (tid is None or s.tid == tid)]
        return sorted(found, key=lambda s: s.id)

    def find(self, pid: int | None, tid: int | None) -> Stop:
        """The one stop of `pid` / `tid`, or a `DebuggerError` saying there is none or several."""
        cands = self.matching(pid, tid)
        if not cands:
            where = "" if pid is None else f" in process {pid}" + ("" if tid is None else f" thread {tid}")
            raise DebuggerError(f"no stopped thread{where}")
        if len(cands) > 1:
            raise DebuggerError(
                "several threads are stopped: say which (pid and tid): " + ", ".join(f"{s.pid}.{s.tid}" for s in cands)
            )
        return cands[0]

    def by_thread(self) -> dict[tuple[int, int], Stop]:
        with self._cv:
            return dict(self._stops)

    def is_stopped(self, pid: int, tid: int) -> bool:
        return (pid, tid) in self._stops

    def wait(
        self,
        pid: int | None,
        tid: int | None,
        timeout: float,
        ended: Callable[[int], dict | None],
        after: int | None = None,
        step: int | None = None,
        lost: Callable[[int], bool] | None = None,
    ) -> Stop | dict:
        """The oldest stop matching `pid` / `tid` (newer than stop `after`, if given, and ending
        step `step` or no step, if given) once there is one, or `ended(pid)` once that says the process is over; with `after`, when `lost(pid)` says
        the step had nowhere to land, the oldest stop of `pid` still held. TimeoutError after
        `timeout` s."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                found = self.matching(pid, tid)
                newer = [
                    s
                    for s in found
                    if (after is None or s.id > after)
                    and (step is None or s.step in (None, step))
                    or (step is not None and s.step == step)
                ]
                if newer:
                    return newer[0]
                if found and pid is not None and lost is not None and lost(pid):
                    return found[0]
                gone = ended(pid) if pid is not None else None
                if gone is not None:
                    return gone
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no stop{'' if pid is None else f' of process {pid}'} within {timeout}s")
                self._cv.wait(min(left, 0.1))

    # ---------------------------------------------------------------- pause requests
    @property
    def pausing(self) -> bool:
        return bool(self._pause_req)

    def ask_pause(self, threads: list) -> list[list[int]]:
        """Stop each of `threads` at its next stop point (unless it is stopped or done); those asked."""
        asked = []
        with self._cv:
            for t in threads:
                if not t.done.is_set() and (t.proc.pid, t.tid) not in self._stops:
                    self._pause_req.add(t)
                    asked.append([t.proc.pid, t.tid])
        return asked

    def take_pause(self, th) -> bool:
        """Whether `th` was asked to pause (asked once)."""
        with self._cv:
            if th in self._pause_req:
                self._pause_req.discard(th)
                return True
            return False

    def forget_pauses(self, pid: int | None = None) -> None:
        """Drop the pause requests of process `pid` (None: of every process)."""
        with self._cv:
            self._pause_req = {t for t in self._pause_req if pid is not None and t.proc.pid != pid}


__all__ = ["StopTable"]

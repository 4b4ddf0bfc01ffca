"""Scheduler step mode, made for teaching: the batch scheduler fires one batch per command, and
before each the batch it is about to fire (members, token counts, the queue behind it) is shown.

It works through the batch scheduler's `gate`: called with the chosen members just before a
forward pass, it holds the scheduler's thread until `step_batch` releases that batch.

One part of `Debugger`, composed through an explicit interface: it is given the runtime, where
to emit events and how to tell that the debugger is still attached; the debugger's bus
subscriber reports each fired batch (`batch_fired`); the Debugger's commands of the same names
hand on to it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

from . import viewdata as ins
from .errors import DebuggerError


class SchedulerStepMode:
    def __init__(self, runtime, emit: Callable[[str, dict], None], attached: Callable[[], bool]) -> None:
        self.runtime = runtime
        self._emit = emit
        self._is_attached = attached
        self._gate_cv = threading.Condition()
        self._gate_on = False
        self._gate_ids = itertools.count(1)
        self._gate_pending: dict | None = None
        self._gate_released = 0
        self._last_batch: dict | None = None  # the newest batch record (kept by the bus subscriber)
        self._prev_gate = None

    def batch_fired(self, record: dict) -> None:
        with self._gate_cv:
            self._last_batch = record
            self._gate_cv.notify_all()

    def scheduler_step_mode(self, enabled: bool = True) -> dict:
        """In step mode the batch scheduler fires one batch per `step_batch`; before each, the
        batch it is about to fire is shown (`pending_batch`, event "batch_pending")."""
        batch = self.runtime.batch
        with self._gate_cv:
            if enabled and not self._gate_on:
                self._prev_gate = batch.gate
                batch.gate = self._gate
                self._gate_on = True
            elif not enabled and self._gate_on:
                if batch.gate == self._gate:
                    batch.gate = self._prev_gate
                self._gate_on = False
                self._gate_cv.notify_all()
        return {"scheduler_step_mode": self._gate_on}

    def _gate(self, chosen: list) -> None:
        batch = self.runtime.batch
        prev = self._prev_gate
        if prev is not None:
            prev(chosen)
        gid = next(self._gate_ids)
        queued = batch.queued()
        info = {
            "gate_id": gid,
            "members": ins.batch_plan(chosen, batch.token_budget),
            "queue": [ins.pending_view(p) for p in queued],
            "queue_depth": len(queued),
            "pages_used": batch.kvfs.pool.used_pages,
            "batches_so_far": batch.log.total_batches,
        }
        with self._gate_cv:
            if not self._gate_on:
                return
            self._gate_pending = info
            self._gate_cv.notify_all()
        self._emit("batch_pending", info)
        with self._gate_cv:
            while self._gate_on and self._is_attached() and self._gate_released < gid:
                self._gate_cv.wait(0.1)
            self._gate_pending = None

    def pending_batch(self) -> dict:
        """The batch waiting at the gate in scheduler step mode (its members), or none."""
        with self._gate_cv:
            return {"pending": self._gate_pending, "scheduler_step_mode": self._gate_on}

    def wait_batch_pending(self, timeout: float = 30.0) -> dict:
        """Block until a batch waits at the gate (scheduler step mode); returns it."""
        deadline = time.monotonic() + timeout
        with self._gate_cv:
            while self._gate_pending is None:
                left = deadline - time.monotonic()
                if left <= 0 or not self._gate_on:
                    return {"pending": None, "scheduler_step_mode": self._gate_on}
                self._gate_cv.wait(min(left, 0.1))
            return {"pending": self._gate_pending, "scheduler_step_mode": True}

    def step_batch(self, wait: bool = True, timeout: float = 30.0) -> dict:
        """Fire the batch that is waiting at the gate (waits up to `timeout` for one to arrive);
        with `wait`, return its record once it has run."""
        if not self._gate_on:
            raise DebuggerError("scheduler step mode is off (scheduler_step_mode(True) first)")
        info = self.wait_batch_pending(timeout)["pending"]
        if info is None:
            return {"fired": None, "shown": None}
        with self._gate_cv:
            before = info["batches_so_far"]
            self._gate_released = max(self._gate_released, info["gate_id"])
            self._gate_cv.notify_all()
            if not wait:
                return {"fired": None, "shown": info}
            deadline = time.monotonic() + timeout

            def fired() -> bool:
                return self._last_batch is not None and self._last_batch["bid"] > before

            while not fired() and time.monotonic() < deadline:
                self._gate_cv.wait(0.05)
            rec = self._last_batch if fired() else None
        return {"fired": rec, "shown": info}


__all__ = ["SchedulerStepMode"]

"""A batch's host time: the CPU seconds of the thread that chose, assembled, completed and woke it, less
the forward pass's (`BatchLog.host_s`; bench/runtime_overhead.py's "scheduler host µs per batch")."""

from __future__ import annotations

import time

from .batch_log import BatchLog, BatchRecord

_thread_time = time.thread_time


class HostClock:
    """Charges each batch its host time (on the thread that fired it)."""

    __slots__ = ("_mark", "_lip", "_lip_mark")

    def __init__(self) -> None:
        self._mark: float | None = None  # the loop thread's CPU clock at the end of its last batch
        # With greenlets the loop's thread also runs the programs between batches (sched/hub.py): its CPU
        # seconds in them, which are the programs' and not the scheduler's.
        self._lip = 0.0
        self._lip_mark = 0.0

    def start(self) -> None:
        """On the loop's thread, as it starts."""
        self._mark = _thread_time()

    def add_programs(self, seconds: float) -> None:
        """The loop's thread ran greenlets for `seconds` of its CPU time."""
        self._lip += seconds

    def charge(
        self, log: BatchLog, rec: BatchRecord | None, fwd_wall: float, fwd_cpu: float, cpu_from: float | None
    ) -> None:
        """Charge the loop thread's CPU time since its last batch, less the forward's and the greenlets',
        to this batch: select, assemble, complete and wake, and the policy checks in between. A lone
        caller's batch (`cpu_from`: its thread's CPU clock at its submit) is charged its own thread's CPU
        since then, less the forward's."""
        t = _thread_time()
        if cpu_from is not None:
            host = max(0.0, t - cpu_from - fwd_cpu)
        else:
            mark = self._mark if self._mark is not None else t
            self._mark = t
            lip, self._lip_mark = self._lip - self._lip_mark, self._lip
            host = max(0.0, (t - mark) - fwd_cpu - lip)
        log.host_s += host
        log.forward_s += fwd_wall
        log.forward_cpu_s += fwd_cpu
        if rec is not None:
            rec.host_s = host

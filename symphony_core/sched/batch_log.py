"""What every fired batch leaves behind, for the live views, the debugger and the tests.

Records are written once per batch by the scheduler thread, on its hot path, so they are cheap
to make: the scheduler hands over its members as plain tuples, which become `BatchMember`s only
when someone reads `members` (a named tuple costs several times a plain one to build, and most
records are never read); the dict form (`to_dict`, for events and views) is likewise built on demand.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple, cast


class BatchMember(NamedTuple):
    pid: int | None
    tid: int | None
    user: str
    file: int  # KV file id
    tokens: int  # tokens this member fed in this batch
    kind: str  # "decode" | "prefill"
    chunk: tuple[int, int, int]  # (start, end, total) of the call's tokens run here

    def to_dict(self) -> dict:
        return {
            "pid": self.pid,
            "tid": self.tid,
            "user": self.user,
            "file": self.file,
            "tokens": self.tokens,
            "kind": self.kind,
            "chunk": self.chunk,
        }


class BatchRecord:
    __slots__ = (
        "bid",
        "t_start",
        "t_end",
        "_members",
        "tokens",
        "queue_depth",
        "pages_used",
        "pages_total",
        "policy",
        "errors",
        "host_s",
    )

    def __init__(
        self,
        bid: int,
        t_start: float,
        t_end: float,
        members: list[tuple],
        tokens: int,
        queue_depth: int,
        pages_used: int,
        pages_total: int,
        policy: str,
        errors: int = 0,
        host_s: float | None = None,
    ) -> None:
        self.bid = bid
        self.t_start = t_start
        self.t_end = t_end
        self._members = members  # BatchMember field tuples, wrapped on first read of `members`
        self.tokens = tokens
        self.queue_depth = queue_depth  # calls queued when it fired (members included)
        self.pages_used = pages_used
        self.pages_total = pages_total
        self.policy = policy
        self.errors = errors
        # The scheduler thread's own CPU seconds for this batch (select, assemble, complete, wake),
        # the model's forward excluded; None when not measured.
        self.host_s = host_s

    @property
    def members(self) -> list[BatchMember]:
        ms = self._members
        if ms and type(ms[0]) is not BatchMember:
            ms = self._members = [BatchMember._make(m) for m in ms]
        return cast("list[BatchMember]", ms)  # wrapped just above when they were bare tuples

    @property
    def size(self) -> int:
        return len(self._members)

    def to_dict(self) -> dict:
        return {
            "bid": self.bid,
            "t_start": self.t_start,
            "t_end": self.t_end,
            "members": [m.to_dict() for m in self.members],
            "tokens": self.tokens,
            "queue_depth": self.queue_depth,
            "pages_used": self.pages_used,
            "pages_total": self.pages_total,
            "policy": self.policy,
            "errors": self.errors,
            "size": len(self._members),
        }

    def __repr__(self) -> str:
        return f"BatchRecord(bid={self.bid}, size={self.size}, tokens={self.tokens}, policy={self.policy!r})"


@dataclass
class BatchLog:
    """The most recent batch records (bounded), plus running totals that never roll over."""

    maxlen: int = 20000
    records: deque = field(default_factory=deque)
    total_batches: int = 0
    total_tokens: int = 0
    total_members: int = 0
    # The scheduler's own host cost, summed over every batch (see BatchScheduler: CPU seconds of
    # its thread outside the forward pass, and the forward's own wall and CPU seconds).
    host_s: float = 0.0
    forward_s: float = 0.0
    forward_cpu_s: float = 0.0
    # Called with every record as it is added (the server's metrics), on the scheduler thread:
    # they must be quick and must not raise.
    observers: list = field(default_factory=list)

    def add(self, r: BatchRecord) -> None:
        self.records.append(r)
        if len(self.records) > self.maxlen:
            self.records.popleft()
        self.total_batches += 1
        self.total_tokens += r.tokens
        self.total_members += len(r._members)
        for f in self.observers:
            f(r)

    def since(self, bid: int) -> list[BatchRecord]:
        return [r for r in list(self.records) if r.bid > bid]


_thread_time = time.thread_time


class HostClock:
    """Charges each batch its host time: the CPU seconds of the thread that chose, assembled, completed
    and woke it, less the forward pass's (`BatchLog.host_s`; bench/runtime_overhead.py's "scheduler host
    µs per batch"). On the thread that fired it."""

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

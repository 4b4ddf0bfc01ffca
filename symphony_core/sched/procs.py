"""Level 1: the process scheduler. Admission, priority, fair share, parking, limits.

- Admission: a process starts when fewer than `max_running` run and the pool has more than
  `admit_reserve` free pages; otherwise it waits in a queue (ordered by priority, then by how
  little its user has running), instead of crashing the engine later.
- Batch order: higher priority first, then the user who was served fewer tokens lately.
- Parking: when every queued `pred` waits for pages and nothing can free them, the process
  with the lowest priority (then the most private pages) whose threads all wait is parked —
  its private pages move to host memory — and resumed when they fit again.
- Limits: wall time (a watchdog), threads, tokens and pages per process.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Callable

from ..errors import OutOfPages
from ..kvfs import KVFS
from ..kvfs.swap import pages_to_swap_in, swap_in, swap_out
from ..lip.events import now
from ..lip.process import LimitExceeded, Process
from .batch import PendingPred


class ProcessScheduler:
    def __init__(self, kvfs: KVFS, *, max_running: int = 4096, admit_reserve: int | None = None) -> None:
        self.kvfs = kvfs
        self.max_running = max_running
        self.admit_reserve = admit_reserve if admit_reserve is not None else max(2, kvfs.pool.n_pages // 50)
        self.lock = threading.RLock()
        self.waiting: list[Process] = []  # admitted later
        self.running: dict[int, Process] = {}
        self.parked: list[Process] = []
        self.served: dict[str, float] = defaultdict(float)  # decayed tokens per user
        self.parks = 0  # processes parked so far (metrics, tests)
        self.start: Callable[[Process], None] = lambda p: None
        self.batch = None  # the BatchScheduler, set by the runtime
        self._watchdog = threading.Thread(target=self._watch, name="symphony-watchdog", daemon=True)
        self._stop = threading.Event()
        self._watchdog.start()

    # --- admission -----------------------------------------------------------------------------
    def admit(self, proc: Process) -> None:
        with self.lock:
            self.waiting.append(proc)
        self.pump()

    def pump(self) -> None:
        """Start queued processes while there is room."""
        while True:
            with self.lock:
                if not self.waiting or len(self.running) >= self.max_running:
                    return
                if self.kvfs.pool.free_pages <= self.admit_reserve and self.running:
                    return
                per_user = defaultdict(int)
                for p in self.running.values():
                    per_user[p.user] += 1
                self.waiting.sort(key=lambda p: (-p.priority, per_user[p.user], p.created_at))
                proc = self.waiting.pop(0)
                self.running[proc.pid] = proc
                proc.status = "running"
                proc.started_at = now()
            self.start(proc)

    def exited(self, proc: Process) -> None:
        with self.lock:
            self.running.pop(proc.pid, None)
            if proc in self.parked:
                self.parked.remove(proc)
        self.pump()

    # --- batch order ---------------------------------------------------------------------------
    def rank(self, p: PendingPred) -> tuple:
        return (-p.priority, self.served[p.user], p.submitted)

    def charge(self, user: str, tokens: int) -> None:
        with self.lock:
            for u in self.served:
                self.served[u] *= 0.98
            self.served[user] += tokens

    # --- limits --------------------------------------------------------------------------------
    def check_pred_limits(self, proc: Process, n_tokens: int) -> None:
        lim = proc.limits
        if lim.max_tokens is not None and proc.tokens_used + n_tokens > lim.max_tokens:
            raise LimitExceeded(
                f"process {proc.pid} ({proc.name}): token limit of {lim.max_tokens} reached "
                f"({proc.tokens_used} used, pred asks {n_tokens} more)"
            )
        if lim.max_pages is not None:
            ps = self.kvfs.pool.page_size
            with self.kvfs.lock:
                held = {p for h in proc.handles if not h.closed for p in h.file.pages if p >= 0}
            if len(held) + -(-n_tokens // ps) > lim.max_pages:
                raise LimitExceeded(
                    f"process {proc.pid} ({proc.name}): page quota of {lim.max_pages} reached "
                    f"({len(held)} pages held, pred needs up to {-(-n_tokens // ps)} more)"
                )

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            t = now()
            with self.lock:
                procs = list(self.running.values())
            for p in procs:
                lim = p.limits.max_wall_time
                if lim is not None and p.started_at is not None and t - p.started_at > lim:
                    p.kill(LimitExceeded(f"process {p.pid} ({p.name}): wall-time limit of {lim}s exceeded"))
                    if self.batch is not None:
                        self.batch.wake()

    def stop(self) -> None:
        self._stop.set()

    # --- parking -------------------------------------------------------------------------------
    def _private_files(self, proc: Process):
        """Unnamed files only this process holds open: safe to move out of the pool."""
        counts: dict[int, int] = defaultdict(int)
        for h in proc.handles:
            if not h.closed:
                counts[h.file.fid] += 1
        return [h.file for h in proc.handles if not h.closed and h.file.path is None
                and h.file.open_handles == counts[h.file.fid]]

    def on_stall(self, waiting: list[PendingPred]) -> None:
        """Every queued pred waits for pages. Park someone, or fail calls that can never fit."""
        with self.lock:
            waiting_pids = {p.pid for p in waiting}
            queued_pids = {p.pid for p in self.batch.queued()} if self.batch else set()
            busy = any(
                t.state == "running" for pr in self.running.values() if pr not in self.parked for t in pr.threads
            )
            if busy:
                return  # someone is still running code and may free pages: wait for them
            candidates = [
                pr for pr in self.running.values()
                if pr not in self.parked and pr.pid in queued_pids and len(self.running) - len(self.parked) > 1
            ]
            candidates.sort(key=lambda pr: (pr.priority, -sum(len(f.pages) for f in self._private_files(pr))))
            for victim in candidates:
                files = self._private_files(victim)
                if swap_out(self.kvfs, files) > 0:
                    self.parks += 1
                    victim.status = "parked"
                    self.parked.append(victim)
                    for p in self.batch.queued():
                        if p.pid == victim.pid:
                            p.parked = True
                    return
            if not self.parked:
                # Nothing left to park and nothing runs: these calls can never fit.
                for p in waiting:
                    if p.pid in waiting_pids:
                        need = -(-p.remaining // self.kvfs.pool.page_size) + 1
                        self.batch.fail(p, OutOfPages(
                            f"out of KV pages: pred needs about {need} pages, {self.kvfs.pool.free_pages} free "
                            f"of {self.kvfs.pool.n_pages}, and no other process can give pages back"
                        ))

    def resume_parked(self) -> None:
        """Before each batch: bring back parked processes whose pages fit again (oldest first)."""
        with self.lock:
            if not self.parked:
                return
            others_waiting = any(p.waiting_pages and not p.parked for p in self.batch.queued())
            if others_waiting and len(self.parked) < len(self.running):
                return  # resuming now would only take pages from those still short of them
            for proc in list(self.parked):
                files = [f for f in self._private_files(proc) if f.swapped is not None]
                need = pages_to_swap_in(files)
                if self.kvfs.pool.free_pages - need < self.admit_reserve and len(self.parked) < len(self.running):
                    break
                try:
                    swap_in(self.kvfs, files)
                except OutOfPages:
                    break
                self.parked.remove(proc)
                proc.status = "running"
                for p in self.batch.queued():
                    if p.pid == proc.pid:
                        p.parked = False

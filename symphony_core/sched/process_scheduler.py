"""Level 1: the process scheduler. Admission, priority, fair share, parking, limits.

- Admission: a process starts when fewer than `max_running` run and the pool has more than
  `admit_reserve` free pages; otherwise it waits in a queue (ordered by priority, then by how
  little its user has running), instead of crashing the engine later.
- Batch order: higher priority first, then the user who was served fewer tokens lately.
- Parking: when every queued `pred` waits for pages and nothing can free them, the process
  with the lowest priority (then the most private pages) whose threads all wait is parked —
  its private pages move to host memory — and resumed when they fit again.
- Limits: wall time (a watchdog), threads, tokens and pages per process.

The batch scheduler (level 2) holds this one and asks it, once per batch, whom to serve first
(`rank`), whether parked processes may come back (`before_batch`) and what to do when every
queued call waits for pages (`on_stall`); it hands over its queue each time, so this level
never calls back into the other. Starting a process is the runtime's job: `admit` and `exited`
return the processes that may start now.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from operator import attrgetter

from ..errors import OutOfPages
from ..events import now
from ..kvfs import KVFS
from ..kvfs.swap import pages_to_swap_in, swap_in, swap_out
from .pending import PendingPred
from .process import LimitExceeded, Process, ThreadState

_threads_may_pred = attrgetter("threads_may_pred")

DECAY = 0.98  # fair share: what each charge leaves of a user's earlier tokens


class ProcessScheduler:
    def __init__(self, kvfs: KVFS, *, max_running: int = 4096, admit_reserve: int | None = None) -> None:
        self.kvfs = kvfs
        self.max_running = max_running
        self.admit_reserve = admit_reserve if admit_reserve is not None else max(2, kvfs.pool.n_pages // 50)
        self.lock = threading.RLock()
        self.waiting: list[Process] = []  # admitted later
        self.running: dict[int, Process] = {}
        self.parked: list[Process] = []
        # Tokens served per user, each charge decaying all earlier ones by DECAY. Kept scaled: a charge adds
        # tokens / DECAY^k (k charges so far) instead of decaying every user's count, so ranks compare the
        # stored values as they are (the same factor divides them all); `served_tokens` gives the true ones.
        self.served: dict[str, float] = defaultdict(float)
        self._served_scale = 1.0
        self.parks = 0  # processes parked so far (metrics, tests)
        # LIP threads alive on OS threads (the runtime counts them in and out); with none, every program
        # is a greenlet on the batch scheduler's thread, and `runnable` needs no look at the threads.
        self.os_threads = 0
        self._watchdog = threading.Thread(target=self._watch, name="symphony-watchdog", daemon=True)
        self._stop = threading.Event()
        self._watchdog.start()

    # --- admission -----------------------------------------------------------------------------
    def admit(self, proc: Process) -> list[Process]:
        """Queue `proc`; returns the queued processes that may start now (the caller starts them)."""
        with self.lock:
            self.waiting.append(proc)
        return self.pump()

    def pump(self) -> list[Process]:
        """Take queued processes off the queue while there is room; returns them, to be started."""
        started: list[Process] = []
        with self.lock:
            while self.waiting and len(self.running) < self.max_running:
                if self.kvfs.pool.free_pages <= self.admit_reserve and self.running:
                    break
                per_user: dict[str, int] = defaultdict(int)
                for p in self.running.values():
                    per_user[p.user] += 1
                self.waiting.sort(key=lambda p: (-p.priority, per_user[p.user], p.created_at))
                proc = self.waiting.pop(0)
                self.running[proc.pid] = proc
                proc.status = "running"
                proc.started_at = now()
                started.append(proc)
        return started

    def exited(self, proc: Process) -> list[Process]:
        """`proc` ended; returns the queued processes that may start in its place."""
        with self.lock:
            self.running.pop(proc.pid, None)
            if proc in self.parked:
                self.parked.remove(proc)
        return self.pump()

    def os_thread_started(self) -> None:
        with self.lock:
            self.os_threads += 1

    def os_thread_ended(self) -> None:
        with self.lock:
            self.os_threads -= 1

    def runnable(self) -> int:
        """LIP threads that are running code or queued for `pred`: the batch policy's "how many
        calls may still join". Threads blocked in `recv`, `join` or a debugger stop do not count."""
        with self.lock:
            return sum(map(_threads_may_pred, self.running.values()))

    # --- batch order ---------------------------------------------------------------------------
    def rank(self, p: PendingPred) -> tuple:
        return (-p.priority, self.served[p.user], p.submitted)

    def charge(self, user: str, tokens: int) -> None:
        with self.lock:
            self._served_scale /= DECAY
            self.served[user] += tokens * self._served_scale
            if self._served_scale > 1e100:  # renormalise long before floats run out
                for u in self.served:
                    self.served[u] /= self._served_scale
                self._served_scale = 1.0

    def served_tokens(self, user: str) -> float:
        """`user`'s tokens served, each charge having decayed the earlier ones by DECAY."""
        with self.lock:
            return self.served.get(user, 0.0) / self._served_scale

    # --- limits --------------------------------------------------------------------------------
    def account_pred(self, proc: Process, n_tokens: int) -> None:
        """A `pred` of `n_tokens` is about to be queued: check the process's limits (raises
        LimitExceeded), count its tokens and charge its user's fair share."""
        self.check_pred_limits(proc, n_tokens)
        proc.tokens_used += n_tokens
        self.charge(proc.user, n_tokens)

    def check_pred_limits(self, proc: Process, n_tokens: int) -> None:
        lim = proc.limits
        if lim.max_tokens is not None and proc.tokens_used + n_tokens > lim.max_tokens:
            raise LimitExceeded(
                f"process {proc.pid} ({proc.name}): token limit of {lim.max_tokens} reached "
                f"({proc.tokens_used} used, pred asks {n_tokens} more)"
            )
        if lim.max_pages is not None:
            ps = self.kvfs.pool.page_size
            held = self.kvfs.pages_held(proc.handles)
            if held + -(-n_tokens // ps) > lim.max_pages:
                raise LimitExceeded(
                    f"process {proc.pid} ({proc.name}): page quota of {lim.max_pages} reached "
                    f"({held} pages held, pred needs up to {-(-n_tokens // ps)} more)"
                )

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            t = now()
            with self.lock:
                procs = list(self.running.values())
            for p in procs:
                lim = p.limits.max_wall_time
                if lim is not None and p.started_at is not None and t - p.started_at > lim:
                    # kill wakes its threads asleep in pred, recv or a sandbox twin; they wake the batch scheduler.
                    p.kill(LimitExceeded(f"process {p.pid} ({p.name}): wall-time limit of {lim}s exceeded"))

    def stop(self) -> None:
        """Stop the watchdog and wait for it: a thread still running at interpreter exit may be the one
        that drops the engine's last references, and freeing tensors there aborts the process."""
        self._stop.set()
        if self._watchdog.is_alive() and self._watchdog is not threading.current_thread():
            self._watchdog.join(timeout=5)

    # --- parking -------------------------------------------------------------------------------
    def _private_files(self, proc: Process):
        """Unnamed files only this process holds open: safe to move out of the pool."""
        counts: dict[int, int] = defaultdict(int)
        for h in proc.handles:
            if not h.closed:
                counts[h.file.fid] += 1
        return [
            h.file
            for h in proc.handles
            if not h.closed and h.file.path is None and h.file.open_handles == counts[h.file.fid]
        ]

    def on_stall(self, waiting: list[PendingPred], queued: list[PendingPred]) -> list[tuple[PendingPred, OutOfPages]]:
        """Every call in `waiting` waits for pages (`queued`: the whole queue). Park someone, or
        return the calls that can never fit, each with its error, for the batch scheduler to fail."""
        with self.lock:
            waiting_pids = {p.pid for p in waiting}
            queued_pids = {p.pid for p in queued}
            busy = any(
                t.state is ThreadState.RUNNING
                for pr in self.running.values()
                if pr not in self.parked
                for t in pr.threads
            )
            if busy:
                return []  # someone is still running code and may free pages: wait for them
            candidates = [
                pr
                for pr in self.running.values()
                if pr not in self.parked and pr.pid in queued_pids and len(self.running) - len(self.parked) > 1
            ]
            candidates.sort(key=lambda pr: (pr.priority, -sum(len(f.pages) for f in self._private_files(pr))))
            for victim in candidates:
                files = self._private_files(victim)
                if swap_out(self.kvfs, files) > 0:
                    self.parks += 1
                    victim.status = "parked"
                    self.parked.append(victim)
                    for p in queued:
                        if p.pid == victim.pid:
                            p.parked = True
                    return []
            if self.parked:
                return []
            # Nothing left to park and nothing runs: these calls can never fit.
            pool = self.kvfs.pool
            return [
                (
                    p,
                    OutOfPages(
                        f"out of KV pages: pred needs about {-(-p.remaining // pool.page_size) + 1} pages, "
                        f"{pool.free_pages} free of {pool.n_pages}, and no other process can give pages back"
                    ),
                )
                for p in waiting
                if p.pid in waiting_pids
            ]

    def before_batch(self, queued: list[PendingPred]) -> None:
        """Before each batch (`queued`: the batch scheduler's queue): bring back parked processes
        whose pages fit again (oldest first), marking their queued calls ready."""
        with self.lock:
            if not self.parked:
                return
            others_waiting = any(p.waiting_pages and not p.parked for p in queued)
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
                for p in queued:
                    if p.pid == proc.pid:
                        p.parked = False

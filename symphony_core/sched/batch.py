"""Level 2: the batch scheduler. Fuses pending `pred` calls into forward passes.

One thread owns the model. LIP threads `submit` prepared calls and sleep; the scheduler picks
a batch under a token budget — every waiting decode first, then prefill *chunks* with what is
left — so a 2,000-token prompt is fed a slice at a time while others keep decoding. Whom to
pick first is the process scheduler's word (priority, then the user's fair share).
"""

from __future__ import annotations

import itertools
import logging
import threading
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..errors import OutOfPages, SymphonyError
from ..executor import Executor, PredCall
from ..kvfs import Reservation
from ..lip.events import Event, EventBus, now
from ..model.dist import Dist
from .policy import AdaptiveWatermark
from .records import BatchLog, BatchMember, BatchRecord

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class PendingPred:
    call: PredCall  # prepared (validated) by the caller
    pid: int | None
    tid: int | None
    user: str
    priority: int
    start_len: int
    submitted: float = field(default_factory=now)
    done_tokens: int = 0
    done_rows: int = 0
    logits: list = field(default_factory=list)
    picks: list = field(default_factory=list)
    result: Dist | BaseException | None = None
    finished: threading.Event = field(default_factory=threading.Event)
    waiting_pages: bool = False
    parked: bool = False
    cancelled: bool = False  # its thread gave up (process killed); drop it at the next look

    @property
    def remaining(self) -> int:
        return len(self.call.tokens) - self.done_tokens


class BatchScheduler:
    def __init__(
        self,
        executor: Executor,
        bus: EventBus,
        *,
        token_budget: int = 512,
        max_batch: int = 256,
        policy=None,
        runnable: Callable[[], int] = lambda: 0,
        rank: Callable[[PendingPred], tuple] | None = None,
        on_stall: Callable[[list[PendingPred]], None] | None = None,
        before_batch: Callable[[], None] | None = None,
        run_batch: Callable[[list[PredCall]], list] | None = None,
    ) -> None:
        self.executor = executor
        self.run_batch = run_batch or executor.run
        self.kvfs = executor.kvfs
        self.bus = bus
        self.token_budget = token_budget
        self.max_batch = max_batch
        self.policy = policy or AdaptiveWatermark()
        self.runnable = runnable
        self.rank = rank or (lambda p: (-p.priority, p.submitted))
        self.on_stall = on_stall  # every queued call waits for pages: the process scheduler acts
        self.before_batch = before_batch  # the process scheduler's turn (resume parked processes)
        self.gate: Callable[[list[PendingPred]], None] | None = None  # debugger's scheduler step mode
        self.log = BatchLog()
        self.last_forward = 0.0
        self.idle_since = 0.0
        self._queue: list[PendingPred] = []
        self._cv = threading.Condition()
        self._bids = itertools.count(1)
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="symphony-batch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # --- LIP side ------------------------------------------------------------------------------
    def submit(self, p: PendingPred) -> None:
        with self._cv:
            self._queue.append(p)
            self._cv.notify()

    def wake(self) -> None:
        """Pages were freed or a thread changed state: look again."""
        with self._cv:
            self._cv.notify()

    def queued(self) -> list[PendingPred]:
        with self._cv:
            return list(self._queue)

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(timeout=5)

    # --- the loop --------------------------------------------------------------------------------
    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        while not self._stop:
            try:
                self._iteration()
            except Exception:  # the scheduler must outlive any bug in one iteration
                logger.exception("batch scheduler iteration failed")

    def _iteration(self) -> None:
        while True:
            if self.before_batch is not None:
                self.before_batch()  # may resume parked processes, making their calls ready
            with self._cv:
                if self._stop:
                    return
                ready = [p for p in self._queue if not p.parked or p.cancelled]
                # A call queued while the model was busy has waited only since the model came free.
                oldest = max(min((p.submitted for p in ready), default=now()), self.idle_since)
                d = self.policy.decide(len(ready), self.runnable(), now() - oldest, self.last_forward)
                if d.fire:
                    break
                self._cv.wait(d.wait if ready else 0.1)
        chosen = self._select()
        if not chosen:
            return
        if self.gate is not None:
            self.gate(chosen)
        progressed = self._fire(chosen)
        if not progressed:
            self._stalled()

    def _select(self) -> list[PendingPred]:
        with self._cv:
            dropped = [p for p in self._queue if p.cancelled]
        for p in dropped:
            self.fail(p, SymphonyError("pred abandoned: its process was stopped"))
        with self._cv:
            ready = sorted((p for p in self._queue if not p.parked), key=self.rank)
        chosen: list[PendingPred] = []
        files: set[int] = set()
        budget = self.token_budget
        # Decodes first: they are latency-bound and cost one token each.
        for p in sorted(ready, key=lambda p: p.remaining > 1):
            if len(chosen) >= self.max_batch or budget <= 0:
                break
            fid = p.call.kv.file.fid
            if fid in files:
                continue
            files.add(fid)
            chosen.append(p)
            budget -= min(p.remaining, budget)
        return chosen

    def _fire(self, chosen: list[PendingPred]) -> bool:
        budget = self.token_budget
        calls, spans = [], []
        for p in chosen:
            n = min(p.remaining, max(budget, 1))
            budget -= n
            a, b = p.done_tokens, p.done_tokens + n
            calls.append(self._chunk_call(p, a, b))
            spans.append((a, b))
        with self._cv:
            depth = len(self._queue)
        t0 = now()
        try:
            results = self.run_batch(calls)
        except Exception as e:  # the model itself failed: every member gets the error
            results = [SymphonyError(f"forward pass failed: {type(e).__name__}: {e}")] * len(calls)
        t1 = now()
        self.last_forward = t1 - t0
        self.idle_since = t1
        progressed = False
        members, errors = [], 0
        for p, c, (a, b), r in zip(chosen, calls, spans, results):
            if isinstance(r, OutOfPages):
                p.waiting_pages = True
                continue
            p.waiting_pages = False
            progressed = True
            members.append(BatchMember(p.pid, p.tid, p.user, p.call.kv.file.fid, b - a,
                                       "decode" if len(p.call.tokens) == 1 else "prefill", (a, b, len(p.call.tokens))))
            if isinstance(r, BaseException):
                errors += 1
                if a > 0:  # undo the chunks already written: a failed pred changes nothing
                    self._truncate_quietly(p)
                self._finish(p, r)
                continue
            p.done_tokens = b
            if a == 0 and p.remaining == 0:  # the whole call ran in one piece
                self._finish(p, r)
                continue
            rows = r.logits if r.logits.dim() == 2 else r.logits[None]
            if rows.shape[0]:
                p.logits.append(rows)
                if r.token is not None:
                    p.picks.extend(r.token if isinstance(r.token, list) else [r.token])
            if p.remaining == 0:
                self._finish(p, self._assemble(p))
        if members:
            pool = self.kvfs.pool
            rec = BatchRecord(next(self._bids), t0, t1, members, sum(m.tokens for m in members), depth,
                              pool.used_pages, pool.n_pages, self.policy.name, errors)
            self.log.add(rec)
            if self.bus.active:
                self.bus.publish(Event("batch", t1, args=rec.to_dict(), duration=t1 - t0))
        return progressed

    def _chunk_call(self, p: PendingPred, a: int, b: int) -> PredCall:
        c = p.call
        if a == 0 and b == len(c.tokens):
            return c
        out = [i - a for i in c.out_index if a <= i < b]
        mask = c.mask_tensor
        if mask is not None and mask.dim() == 2:
            mask = mask[p.done_rows : p.done_rows + len(out)]
        p.done_rows += len(out)
        sub = PredCall(c.kv, c.tokens[a:b], c.pos[a:b], out, c.sampler, None)
        sub.tokens, sub.pos, sub.out_index, sub.mask_tensor = c.tokens[a:b], c.pos[a:b], out, mask
        return sub

    def _assemble(self, p: PendingPred) -> Dist:
        logits = torch.cat(p.logits) if p.logits else torch.empty(0, self.executor.vocab)
        picks = p.picks or None
        if p.call.outputs == "last":
            return Dist(logits[0], picks[0] if picks else None)
        return Dist(logits, picks)

    def _truncate_quietly(self, p: PendingPred) -> None:
        with self.kvfs.lock:
            if not p.call.kv.closed and p.call.kv.file.length > p.start_len:
                self.kvfs.rollback(Reservation(p.call.kv, p.start_len, []))

    def _finish(self, p: PendingPred, result) -> None:
        with self._cv:
            if p in self._queue:
                self._queue.remove(p)
        p.result = result
        p.finished.set()

    def fail(self, p: PendingPred, error: BaseException) -> None:
        """End a queued call with an error (its process was killed, or it can never fit)."""
        if p.done_tokens > 0:
            self._truncate_quietly(p)
        self._finish(p, error)

    def _stalled(self) -> None:
        waiting = [p for p in self.queued() if p.waiting_pages and not p.parked]
        if waiting and self.on_stall is not None:
            self.on_stall(waiting)
        with self._cv:
            self._cv.wait(0.01)

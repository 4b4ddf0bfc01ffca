"""Level 2: the batch scheduler. Fuses pending `pred` calls into forward passes.

One thread owns the model. A LIP thread hands its prepared call to `pred`, which queues it and
sleeps until the distribution is ready. The scheduler thread picks a batch under a token
budget — every waiting decode first, then prefill *chunks* with what is left — so a
2,000-token prompt is fed a slice at a time while others keep decoding, runs it on the
executor and wakes the members' threads. Whom to pick first is the process scheduler's word
(priority, then the user's fair share), asked through the `ProcessScheduler` it is given.

Host cost matters here: with a fast model the scheduler's own Python is the bottleneck. So a
submit wakes the scheduler only when its policy could now say "fire" (the policy's
`fire_threshold`), a finished call wakes its thread through a bare lock (`Signal`), and the
queue is rebuilt once per batch rather than searched once per member. `log.host_s` adds up the
scheduler thread's own CPU time outside the model's forward: what "host time per batch" means
in bench/runtime_overhead.py.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from operator import attrgetter, is_
from typing import cast

import torch

from ..errors import SymphonyError
from ..events import Event, EventBus, now
from ..executor import Executor
from ..model.dist import Dist
from .batch_choice import choose_ranked
from .batch_log import BatchLog, BatchRecord, HostClock
from .batch_outcome import take_results
from .fair_chunks import SHARED_CHUNK, chunk_caps, runs_whole
from .hub import Hub
from .lone_threads import LoneThreads
from .pending import PendingPred, PromptHead, Signal
from .policy import AdaptiveWatermark, ask
from .process import LIPThread
from .process_scheduler import ProcessScheduler

logger = logging.getLogger(__name__)

_thread_time = time.thread_time
STOP_GRACE_S = 2.0  # how long `stop` lets cancelled greenlets run to their end
RAN_HEADS_KEPT = 1 << 16  # prompt heads remembered as run (PendingPred.prompt_head), then forgotten
# With greenlets the loop never blocks while programs keep it busy: it lets go of the GIL at least this
# often (wall seconds), so that the process's other threads wait for it at most this long.
GIL_YIELD_EVERY_S = 0.001


class BatchScheduler:
    def __init__(
        self,
        executor: Executor,
        procs: ProcessScheduler,
        bus: EventBus,
        *,
        token_budget: int = 512,
        max_batch: int = 256,
        policy=None,
        greenlets: bool = False,
    ) -> None:
        self.executor = executor  # runs each batch (it holds the forward lock)
        self.procs = procs  # level 1: ranks calls, resumes parked processes, acts on a stall
        self.kvfs = executor.kvfs
        self.bus = bus
        self.token_budget = token_budget
        self.max_batch = max_batch
        self.shared_chunk: int | None = SHARED_CHUNK  # fair_chunks.py (None: a prompt takes the whole budget)
        self.policy = policy or AdaptiveWatermark()
        self.gate: Callable[[list[PendingPred]], None] | None = None  # debugger's scheduler step mode
        self.log = BatchLog()
        self.last_forward = 0.0
        self.idle_since = 0.0
        self._queue: list[PendingPred] = []
        self._cv = threading.Condition()
        self._firing = threading.Lock()  # held by whoever chooses and runs a batch: the loop, or a lone caller
        # While the loop waits, a submit wakes it only once the queue holds this many calls: the
        # policy cannot fire on fewer (0: wake on every submit, for policies that do not say).
        self._notify_at = 0
        self._bids = itertools.count(1)
        self._stop = False
        self._clock = HostClock()
        # `Engine(lip_runner="greenlets")`: this thread also runs the programs' greenlets (sched/hub.py).
        self.hub = Hub(self.wake) if greenlets else None
        # `_fire_alone` on the CPU only, on a few threads: each keeps an OpenMP team (lone_threads.py); on CUDA
        # each would keep cuBLAS's handle and workspace.
        self._lone_ok = not greenlets and executor.model.device.type == "cpu"
        self._lone = LoneThreads()
        self._gil_let_go = 0.0  # time.monotonic() when this thread last let go of the GIL (a wait or a yield)
        # Prompt heads that have run: their prompts are in the prefix cache.
        self._ran_heads: set[PromptHead] = set()
        self._bound = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="symphony-batch", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._bound.wait()  # greenlets may start from now on

    # --- LIP side ------------------------------------------------------------------------------
    def pred(self, p: PendingPred, th: LIPThread) -> Dist:
        """On the LIP thread (an OS thread or a greenlet): queue `p` and sleep until its distribution is
        ready; returns it or raises its error, or the process's kill reason if it was killed first."""
        p.arm(th)
        if p.hub_wait is not None:
            self.submit_from_hub(p)
        else:
            self.submit(p)
        if not p.await_result(th):
            self.wake()  # the loop drops the cancelled call
            raise th.proc.kill_reason or SymphonyError("pred: woken without a result")
        if th.proc.kill_reason is not None:  # killed while its call ran (on this very thread, for a lone call)
            raise th.proc.kill_reason
        return p.outcome()

    def submit(self, p: PendingPred) -> None:
        """Queue an OS thread's call, waking the loop when its policy could fire; or run the call's
        batch here, on the caller's thread, when it is the only call that can come (`_fire_alone`)."""
        if self._fire_alone(p):
            return
        with self._cv:
            q = self._queue
            q.append(p)
            if len(q) >= self._notify_at:
                self._cv.notify()

    def _fire_alone(self, p: PendingPred) -> bool:
        """Run `p` as a batch of its own on the calling thread, as `Engine.pred_batch` would, when it is the
        only call that can come (`_alone`). Through the loop, one program's step pays two hand-offs (its submit
        wakes the loop; the loop wakes it), ~0.15 ms of a 4-5 ms q4 decode step on the 2-core VM. Whoever
        chooses and runs a batch holds `_firing`, the loop too, so a lone caller never races it. The call is
        not queued while it runs; one left waiting for pages is queued for the loop. False: queue `p`."""
        if not self._lone_ok or self._queue or not self._firing.acquire(False):
            return False  # (the queue read unlocked, as a hint: most calls of a batch of many stop here)
        try:
            c0 = _thread_time()
            with self._cv:
                if not self._alone(p):
                    return False
            if not self._lone.admit(threading.current_thread()):
                return False
            try:
                progressed = self._fire([p], True, cpu_from=c0)
            except Exception:  # as in the loop: logged, and the call left to the loop
                logger.exception("batch scheduler: a lone caller's batch failed")
                progressed = False
            if not progressed and p.result is None:  # it waits for pages (or failed above)
                with self._cv:
                    self._queue.append(p)
                    self._cv.notify()
            return True
        finally:
            self._firing.release()

    def _alone(self, p: PendingPred) -> bool:
        """Under `_cv`: nothing is queued, no other LIP thread could join (`runnable` is 1), the policy
        fires on one call, the call runs whole in one pass, and neither the debugger's gate, a parked
        process nor a kill of `p`'s own process asks for the loop."""
        th = p.thread
        if (
            self._stop
            or self._queue
            or self.gate is not None
            or self.procs.parked
            or (th is not None and th.proc.kill_reason is not None)
            or not runs_whole([p], self.token_budget, self.shared_chunk)
            or self.procs.runnable() != 1
        ):
            return False
        try:
            return ask(self.policy, 1, 1, 0.0, self.last_forward, 0.0).fire
        except Exception:  # a lab's or a user's policy: the loop logs it too, and goes on
            logger.exception("batch policy failed")
            return False

    def submit_from_hub(self, p: PendingPred) -> None:
        """Queue a greenlet's call: it runs on this scheduler's own thread, which looks at the queue
        once every greenlet waits, so there is nobody to notify."""
        with self._cv:
            self._queue.append(p)

    def wake(self) -> None:
        """Pages were freed or a thread changed state: look again."""
        with self._cv:
            self._cv.notify()

    def queued(self) -> list[PendingPred]:
        with self._cv:
            return list(self._queue)

    def stop(self) -> None:
        """Stop the loop (with greenlets: once they have ended, or after STOP_GRACE_S; cancel their
        processes first) and wait for it."""
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(timeout=5 + (STOP_GRACE_S if self.hub is not None else 0))

    # --- the loop --------------------------------------------------------------------------------
    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        if self.hub is not None:
            self.hub.bind()
        self._bound.set()
        self._clock.start()
        while not self._stop:
            try:
                self._iteration()
            except Exception:  # the scheduler must outlive any bug in one iteration
                logger.exception("batch scheduler iteration failed")
        if self.hub is not None:
            self._finish_greenlets()

    def _run_greenlets(self) -> None:
        """Run every greenlet that can run now (until each waits again), its CPU time kept apart."""
        hub = self.hub
        assert hub is not None
        c0 = _thread_time()
        if hub.run_ready():
            self._clock.add_programs(_thread_time() - c0)

    def _finish_greenlets(self) -> None:
        """After `stop`: let the greenlets (their processes cancelled) run to their end, for STOP_GRACE_S at most."""
        hub = self.hub
        assert hub is not None
        deadline = time.monotonic() + STOP_GRACE_S
        while hub.live and time.monotonic() < deadline:
            hub.run_ready()
            with self._cv:
                if hub.live and not hub.has_ready():
                    left = hub.next_timer()
                    self._cv.wait(0.01 if left is None else min(0.01, left))

    def _iteration(self) -> None:
        policy, procs, hub = self.policy, self.procs, self.hub
        while True:
            if hub is not None:
                self._run_greenlets()
            if procs.parked:
                procs.before_batch(self.queued())  # may resume parked processes, making their calls ready
            with self._cv:
                if self._stop:
                    return
                queue = self._queue
                ready, oldest, newest = 0, None, None
                for p in queue:
                    if not p.parked or p.cancelled:
                        ready += 1
                        if oldest is None or p.submitted < oldest:
                            oldest = p.submitted
                        if newest is None or p.submitted > newest:
                            newest = p.submitted
                t = now()
                # A call queued while the model was busy has waited only since the model came free.
                oldest = max(t if oldest is None else oldest, self.idle_since)
                newest = max(t if newest is None else newest, self.idle_since)
                # Every program a greenlet, all of them run until they waited: only those queued here can join.
                runnable = ready if hub is not None and not procs.os_threads else procs.runnable()
                d = ask(policy, ready, runnable, t - oldest, self.last_forward, t - newest)
                if d.fire:
                    self._notify_at = 0
                    break
                threshold = getattr(policy, "fire_threshold", None)
                # Parked calls sit in the queue without counting as ready: a submit compares the
                # queue's length, so they are added to the threshold.
                self._notify_at = 0 if threshold is None else threshold(runnable) + (len(queue) - ready)
                wait = d.wait if ready else 0.1
                if hub is not None:  # a greenlet to run, or a timed wait to fire, comes first
                    left = hub.next_timer()
                    if left is not None:
                        wait = min(wait, left)
                if wait > 0:
                    self._cv.wait(wait)
                    self._gil_let_go = time.monotonic()
                self._notify_at = 0
        with self._firing:
            chosen, whole = self._select()
            if not chosen:
                return
            if self.gate is not None:
                self.gate(chosen)
            progressed = self._fire(chosen, whole)
            if not progressed:
                self._stalled()
                return
        if self.hub is not None and time.monotonic() - self._gil_let_go >= GIL_YIELD_EVERY_S:
            # Between batches this thread runs the greenlets and fires again without ever blocking:
            # let the process's other threads (a launcher, a notebook's kernel) have the GIL at least
            # every GIL_YIELD_EVERY_S rather than only at the interpreter's 5 ms switch interval.
            # time.sleep(0) sleeps out the kernel's timer slack (~55 µs of wall time), long enough for
            # a waiting thread to take the GIL; os.sched_yield lets go of it for ~1 µs, and a launcher
            # of 64 programs then still lost the race often enough to start half of them a whole run
            # late. Not after every batch: the sleep costs ~20 µs of this thread's CPU (measured on
            # the 2-core VM), a tenth of a 64-program batch's host time with the stub forward.
            time.sleep(0)
            self._gil_let_go = time.monotonic()

    def _select(self) -> tuple[list[PendingPred], bool]:
        """The calls of the next batch, and whether each runs whole (else `_fire` cuts chunks)."""
        dropped: list[PendingPred] = []
        ready: list[PendingPred] = []
        with self._cv:
            for p in self._queue:
                if p.cancelled:
                    dropped.append(p)
                elif not p.parked:
                    ready.append(p)
        for p in dropped:
            self.fail(p, SymphonyError("pred abandoned: its process was stopped"))
        budget = self.token_budget
        if len(ready) <= self.max_batch:
            # The whole queue fits (most batches): every call goes, in the order they came, and
            # nobody's rank matters. Two calls on one file need two batches, as below.
            if runs_whole(ready, budget, self.shared_chunk):
                return ready, True
        ran = self._ran_heads if self.kvfs.prefix_cache is not None else None
        if ran is not None and len(ran) > RAN_HEADS_KEPT:
            ran.clear()
        return choose_ranked(ready, budget, self.max_batch, self.procs.rank, ran), False

    def _fire(self, chosen: list[PendingPred], whole: bool = False, cpu_from: float | None = None) -> bool:
        """Run `chosen` as one forward pass and complete what finished. `whole`: every call runs
        whole within the token budget (`_select` checked), so none is cut into chunks. `cpu_from`:
        a lone caller's thread CPU clock when it began (`_fire_alone`); else this is the loop's thread."""
        if whole and not any(map(attrgetter("done_tokens"), chosen)):
            calls = list(map(attrgetter("call"), chosen))
            spans = None
        else:
            budget = self.token_budget
            calls, spans = [], []
            caps = chunk_caps(chosen, self.shared_chunk)
            for p in chosen:
                total = len(p.call.tokens)
                a = p.done_tokens
                n = min(total - a, max(budget, 1), caps.get(p.user, total))
                budget -= n
                b = a + n
                calls.append(p.call if a == 0 and b == total else p.chunk(a, b))
                spans.append((a, b))
        with self._cv:
            depth = len(self._queue) + (cpu_from is not None)  # a lone call is not queued while it runs
        executor = self.executor
        fwd_cpu0 = executor.forward_cpu_s
        t0 = now()
        try:
            # Someone watching the events gets each pred's argmax in its summary: take them all in one call.
            results = executor.run(calls, argmax=self.bus.active, prepared_apart=True)
        except Exception as e:  # the model itself failed: every member gets the error
            results = [SymphonyError(f"forward pass failed: {type(e).__name__}: {e}")] * len(calls)
        t1 = now()
        fwd_cpu = executor.forward_cpu_s - fwd_cpu0
        self.last_forward = t1 - t0
        self.idle_since = t1
        members: list[tuple] = []  # BatchMember fields, as plain tuples (see BatchRecord)
        finished: list[tuple[PendingPred, Dist | BaseException]] = []
        if spans is None and set(map(type, results)) == {Dist} and not any(map(attrgetter("waiting_pages"), chosen)):
            # Every call ran whole and got its distribution: the member tuples were made at submit.
            self._finish_many(chosen, results)
            members = list(map(attrgetter("member"), chosen))
            tokens, errors = sum(map(attrgetter("n_tokens"), chosen)), 0
        else:
            members, finished, tokens, errors = take_results(chosen, spans, results, self.executor.vocab, self.kvfs)
            if finished:
                self._finish_many([p for p, _ in finished], [r for _, r in finished])
        if members:
            pool = self.kvfs.pool
            rec = BatchRecord(
                next(self._bids),
                t0,
                t1,
                members,
                tokens,
                depth,
                pool.used_pages,
                pool.n_pages,
                self.policy.name,
                errors,
            )
            self._clock.charge(self.log, rec, t1 - t0, fwd_cpu, cpu_from)
            self.log.add(rec)
            if self.bus.active:
                self.bus.publish(Event("batch", t1, args=rec.to_dict, duration=t1 - t0))
        else:
            self._clock.charge(self.log, None, t1 - t0, fwd_cpu, cpu_from)
        return bool(members)

    def _finish_many(self, done: list[PendingPred], results: list[Dist | BaseException]) -> None:
        """Take finished calls off the queue (one pass for all of them) and wake their threads,
        one after the other (see `Signal`); `results[k]` is `done[k]`'s."""
        with self._cv:
            q = self._queue
            if len(done) == len(q) and all(map(is_, q, done)):
                self._queue = []  # the batch took the whole queue, in its order
            else:
                gone = set(done)
                self._queue = [p for p in q if p not in gone]
        for p, result in zip(done, results):
            p.result = result
        waits = list(map(attrgetter("hub_wait"), done))
        if waits and None not in waits:  # greenlets only: the hub resumes them all in one pass
            waits[0].hub.fire_many(waits)
            return
        signals = [cast(Signal, p.finished) for p, w in zip(done, waits) if w is None]  # OS threads' calls
        for a, b in zip(signals, signals[1:]):
            a.next = b
        if signals:
            signals[0].set()  # the rest follow down the chain (Signal)
        hub_waits = [w for w in waits if w is not None]
        if hub_waits:
            hub_waits[0].hub.fire_many(hub_waits)

    def fail(self, p: PendingPred, error: BaseException) -> None:
        """End a queued call with an error (its process was killed, or it can never fit)."""
        if p.done_tokens > 0:  # undo the chunks already written: a failed pred changes nothing
            self.kvfs.cut_back(p.call.kv, p.start_len)
        self._finish_many([p], [error])

    def _stalled(self) -> None:
        queued = self.queued()
        waiting = [p for p in queued if p.waiting_pages and not p.parked]
        if waiting:
            for p, error in self.procs.on_stall(waiting, queued):
                self.fail(p, error)
        with self._cv:
            if self.hub is None or not self.hub.has_ready():
                self._cv.wait(0.01)
                self._gil_let_go = time.monotonic()

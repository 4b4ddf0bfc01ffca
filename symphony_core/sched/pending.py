"""What passes between a LIP thread and the batch scheduler for one `pred`: the queued call
(`PendingPred`) and the one-shot signal its thread sleeps on (`Signal`)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import torch

from ..events import now
from ..executor import PredCall
from ..model.dist import Dist
from .thread_state import KILL_CHECK_S

if TYPE_CHECKING:
    from .hub import HubWait
    from .process import LIPThread


class Signal:
    """A one-shot event, set once by the scheduler and awaited by one LIP thread.

    The contract of `threading.Event` (`set`, `is_set`, `wait(timeout) -> bool`) on one bare
    lock, which costs a fraction of an Event's Condition to create, set and wait on.

    Signals of one batch form a wake-up chain (`next`): the scheduler sets only the first, and
    each woken thread `pass_on`s to the next before it runs any LIP code. Under the GIL the
    threads run one at a time anyway; waking them all at once only makes 64 threads fight for
    it (and for the scheduler's own next batch). A waiter that gives up `abandon`s its signal so
    the chain never stops at it: whichever of `set` and `abandon` comes second passes on.

    `interrupt` wakes the waiter without setting the signal (its process was killed): a killed
    thread learns of it at once, so a waiting thread never has to wake up to look. (With a
    thousand LIPs each polling twenty times a second, the wake-ups alone took the GIL away
    from the forward pass every few microseconds.)
    """

    __slots__ = ("_lock", "_set", "next", "abandoned")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False
        self.next: Signal | None = None
        self.abandoned = False

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        try:
            self._lock.release()
        except RuntimeError:  # a concurrent set() released it first
            pass
        if self.abandoned:  # nobody will wake up to pass the chain on
            self.pass_on()

    def pass_on(self) -> None:
        """Set the next signal of the chain (once)."""
        n = self.next
        if n is not None:
            self.next = None
            n.set()

    def abandon(self) -> None:
        """The waiter leaves without waiting for the result (its process is being stopped)."""
        self.abandoned = True
        if self._set:
            self.pass_on()

    def interrupt(self) -> None:
        """Wake the waiter with the signal still unset (`wait` returns False)."""
        try:
            self._lock.release()
        except RuntimeError:  # already released: set, or interrupted before
            pass

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """True once set; False when `timeout` passed first or the waiter was interrupted."""
        if self._set:
            return True
        if self._lock.acquire(True, -1 if timeout is None else timeout):
            try:
                self._lock.release()  # let any other waiter through too
            except RuntimeError:
                pass
        return self._set


# How many first tokens make two prompts "alike" for the scheduler (PendingPred.prompt_head).
PROMPT_HEAD = 4
PromptHead = tuple[str, tuple[int, ...]]  # (user, the prompt's first PROMPT_HEAD tokens)


class PendingPred:
    """One prepared `pred` call waiting for (or part-way through) the batch scheduler."""

    __slots__ = (
        "call",
        "pid",
        "tid",
        "user",
        "priority",
        "start_len",
        "submitted",
        "done_tokens",
        "done_rows",
        "logits",
        "picks",
        "result",
        "finished",
        "waiting_pages",
        "parked",
        "cancelled",
        "thread",
        "hub_wait",
        "fid",
        "member",
        "prompt_head",
        "n_tokens",
    )

    def __init__(
        self,
        call: PredCall,
        pid: int | None,
        tid: int | None,
        user: str,
        priority: int,
        start_len: int,
        submitted: float | None = None,
        hub_wait: HubWait | None = None,
    ) -> None:
        self.call = call  # prepared (validated) by the caller
        self.pid = pid
        self.tid = tid
        self.user = user
        self.priority = priority
        self.start_len = start_len
        self.submitted = now() if submitted is None else submitted
        self.done_tokens = 0  # of a call run in chunks, the tokens run so far (a call run whole keeps 0)
        self.done_rows = 0
        self.logits: list = []
        self.picks: list = []
        self.result: Dist | BaseException | None = None
        # What the waiting thread sleeps on: its own Signal, or for a greenlet (sched/hub.py) its hub wait.
        self.finished: Signal | None = None if hub_wait is not None else Signal()
        self.hub_wait = hub_wait
        self.waiting_pages = False
        self.parked = False
        self.cancelled = False  # its thread gave up (process killed); drop it at the next look
        self.thread: LIPThread | None = None  # the LIPThread asleep on it (BatchScheduler.pred), for its state
        f = call.kv.file
        self.fid = f.fid
        n = self.n_tokens = len(call.tokens)
        # Its batch record's member tuple when it runs whole (`BatchMember`'s fields), made here on the
        # caller's thread rather than by the scheduler for every member of every batch.
        self.member = (pid, tid, user, self.fid, n, "decode" if n == 1 else "prefill", (0, n, n))
        # A prompt into an empty file at positions 0.. (what the prefix cache serves): its user and first
        # tokens, so that the scheduler runs one of several alike prompts first (batch_scheduler.py).
        self.prompt_head: PromptHead | None = (
            (user, tuple(call.tokens[:PROMPT_HEAD])) if n > 1 and start_len == 0 and call.positions is None else None
        )

    # --- the waiting side, driven by the batch scheduler (BatchScheduler.pred) ----------------------
    def arm(self, th: LIPThread) -> None:
        """On the calling LIP thread `th`, before the call is queued: from now on a kill of its process
        wakes the wait (`Process.kill` interrupts `th.waiting`)."""
        self.thread = th
        th.waiting = self.hub_wait if self.hub_wait is not None else self.finished
        if th.proc.kill_reason is not None:  # killed before the line above: Process.kill did not see it
            th.waiting.interrupt()

    def await_result(self, th: LIPThread) -> bool:
        """Sleep until the scheduler has set the result (True) or the process was killed (False: the
        call is marked cancelled, and the scheduler drops it at its next look). An OS thread sleeps
        on its `Signal` and passes the batch's wake-up chain on; a greenlet parks on its hub."""
        w = self.hub_wait
        if w is not None:
            w.hub.park(w)
            th.waiting = None
            if self.result is None:  # the wait was fired by a kill, not by the batch
                self.cancelled = True
                return False
            return True
        fin = self.finished
        assert fin is not None  # a thread's call has its Signal
        proc = th.proc
        while not fin.wait(KILL_CHECK_S):
            if proc.kill_reason is not None:
                th.waiting = None
                self.cancelled = True
                fin.abandon()
                return False
        th.waiting = None
        fin.pass_on()  # wake the next thread of the batch (the scheduler woke only the first)
        return True

    def mark_waiting_pages(self, waiting: bool) -> None:
        """The call waits for free pages (or no longer does); its thread's state says so too."""
        self.waiting_pages = waiting
        if self.thread is not None:
            self.thread.set_waiting_pages(waiting)

    def outcome(self) -> Dist:
        """The result the scheduler set: the distribution, or its error raised."""
        result = self.result
        if isinstance(result, BaseException):
            raise result
        assert result is not None  # set before the thread is woken
        return result

    @property
    def remaining(self) -> int:
        return len(self.call.tokens) - self.done_tokens

    def __repr__(self) -> str:
        return (
            f"PendingPred(pid={self.pid}, tid={self.tid}, file={self.call.kv.file.fid}, "
            f"{self.done_tokens}/{len(self.call.tokens)} tokens)"
        )

    def chunk(self, a: int, b: int) -> PredCall:
        """The call for tokens a..b of this one (a prefill fed a slice at a time), with the
        output rows and mask rows that fall in the slice."""
        c = self.call
        out = [i - a for i in c.out_index if a <= i < b]
        mask = c.mask_tensor
        if mask is not None and mask.dim() == 2:
            mask = mask[self.done_rows : self.done_rows + len(out)]
        self.done_rows += len(out)
        sub = PredCall(c.kv, c.tokens[a:b], c.pos[a:b], out, c.sampler, None)
        sub.tokens, sub.pos, sub.out_index, sub.mask_tensor = c.tokens[a:b], c.pos[a:b], out, mask
        return sub

    def assemble(self, vocab: int) -> Dist:
        """The whole call's distribution from its chunks' rows."""
        logits = torch.cat(self.logits) if self.logits else torch.empty(0, vocab)
        picks = self.picks or None
        if self.call.outputs == "last":
            return Dist(logits[0], picks[0] if picks else None)
        return Dist(logits, picks)

"""Processes and threads of LIPs, as their launcher and the schedulers see them."""

from __future__ import annotations

import ctypes
import itertools
import os
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import threadsafe_ast
from ..errors import SymphonyError
from ..events import now
from .limits import LimitExceeded, Limits
from .thread_state import PRED_STATES, ThreadState, next_look

# A scale-out replica (symphony_core/scaleout) starts its pids at its own base, so a pid names its replica.
_pids = itertools.count(int(os.environ.get("SYMPHONY_PID_BASE", "0")) + 1)


class LIPError(SymphonyError):
    """A LIP ended with an exception; `.traceback_text` holds its traceback."""

    error_type: str | None = None  # the failing exception's type name, when set by the sandbox

    def __init__(self, message: str, traceback_text: str = "") -> None:
        super().__init__(message)
        self.traceback_text = traceback_text


class Cancelled(SymphonyError):
    """The process was cancelled by its user (or killed by a limit)."""


class _Done:
    """Marks the end of a process's message stream."""


DONE = _Done()


class _KillWake:
    """Put in a killed process's inbox: wakes a thread asleep in `recv` to see the kill."""


_KILL_WAKE = _KillWake()


# Every syscall enters and leaves: the members as plain globals (an enum member's lookup costs more).
_IN_SYSCALL, _RUNNING, _WAITING_PAGES = ThreadState.IN_SYSCALL, ThreadState.RUNNING, ThreadState.WAITING_PAGES


@dataclass(eq=False)
class LIPThread:
    proc: Process
    tid: int
    name: str
    os_thread: threading.Thread | None = None
    state: ThreadState = ThreadState.NEW
    current_call: str | None = None
    seq: int = 0  # syscalls made so far
    preds: int = 0
    waiting: Any = None  # the `Signal` it sleeps on inside `pred` (a kill interrupts it), else None
    result: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    joiners: list = field(default_factory=list)  # HubWaits of greenlets waiting for this thread to end

    def join(self, timeout: float | None = None) -> Any:
        """Wait for the thread; return its result or raise its exception (the paper's pthread_join)."""
        hub = self.proc.hub
        if hub is not None and hub.on_hub():
            self._join_on_hub(hub, timeout)
        else:
            deadline = None if timeout is None else now() + timeout
            while not self.done.wait(next_look(deadline)):
                self.proc.checkpoint()
                if deadline is not None and now() >= deadline:
                    raise TimeoutError(f"thread {self.tid} of process {self.proc.pid} did not finish in {timeout}s")
        if self.error is not None:
            raise self.error
        return self.result

    def _join_on_hub(self, hub, timeout: float | None, check_kill: bool = True) -> None:
        """`join` from a greenlet: park until this thread's end fires the wait (or a kill, or the
        timeout). `check_kill=False`: the waiter is the process's own clean-up, waiting out a kill."""
        deadline = None if timeout is None else now() + timeout
        me = hub.current_thread()
        while not self.done.is_set():
            w = hub.new_wait()
            self.joiners.append(w)
            if me is not None and check_kill:
                me.waiting = w  # before the kill check: a kill from now on fires the wait
            try:
                if check_kill:
                    self.proc.checkpoint()
                left = None if deadline is None else deadline - now()
                if left is not None and left <= 0:
                    raise TimeoutError(f"thread {self.tid} of process {self.proc.pid} did not finish in {timeout}s")
                hub.park(w, left)
            finally:
                if me is not None and check_kill:
                    me.waiting = None
                if w in self.joiners:
                    self.joiners.remove(w)
                hub.withdraw(w)
        if check_kill:
            self.proc.checkpoint()

    # --- its state, changed under its process's lock ----------------------------------------------
    def _become(self, state: ThreadState, call: str | None) -> None:
        """Set its state and call (its process's lock held), keeping the process's count of threads
        that may pred soon (`Process.threads_may_pred`) in step."""
        was = self.may_pred_soon
        self.state, self.current_call = state, call
        if self.may_pred_soon is not was:
            self.proc.threads_may_pred += 1 if not was else -1

    def start_running(self) -> None:
        with self.proc.lock:
            self._become(_RUNNING, self.current_call)

    def enter_syscall(self, call: str) -> None:
        """The thread enters syscall `call`; a killed process's thread raises its kill reason instead."""
        proc = self.proc
        with proc.lock:
            if proc.kill_reason is not None:
                raise proc.kill_reason
            if call == "pred" and self.state is _RUNNING:  # it may pred soon before and after
                self.state, self.current_call = _IN_SYSCALL, call
            else:
                self._become(_IN_SYSCALL, call)

    def leave_syscall(self) -> None:
        with self.proc.lock:
            if self.current_call == "pred" and self.state is _IN_SYSCALL:  # as in enter_syscall
                self.state, self.current_call = _RUNNING, None
            else:
                self._become(_RUNNING, None)

    def set_waiting_pages(self, waiting: bool) -> None:
        """Its `pred` waits for free pages (or no longer does); a thread in another state keeps it."""
        with self.proc.lock:
            if self.state in PRED_STATES:
                self._become(ThreadState.WAITING_PAGES if waiting else ThreadState.IN_SYSCALL, self.current_call)

    def hold_stopped(self) -> ThreadState:
        """A debugger holds the thread at a stop; returns the state to give back (`release_stopped`)."""
        with self.proc.lock:
            prev = self.state
            self._become(ThreadState.STOPPED, self.current_call)
            return prev

    def release_stopped(self, prev: ThreadState) -> None:
        with self.proc.lock:
            if self.state is ThreadState.STOPPED:
                self._become(prev, self.current_call)

    def finish(self, result: Any, error: BaseException | None, then: Callable[[], None] | None = None) -> None:
        """Its function returned `result` or raised `error`; `then` runs under the same lock (before `ended`)."""
        with self.proc.lock:
            self._become(ThreadState.FAILED if error is not None else ThreadState.FINISHED, self.current_call)
            self.result, self.error = result, error
            if then is not None:
                then()

    def while_running(self, act: Callable[[], None]) -> bool:
        """Run `act` under the process's lock if the thread is running its own code (not ended):
        the state cannot change until `act` returns. Whether it ran."""
        with self.proc.lock:
            if self.state is not ThreadState.RUNNING or self.done.is_set():
                return False
            act()
            return True

    @property
    def may_pred_soon(self) -> bool:
        """Running its code, or inside `pred`: a call the batch policy may wait for."""
        s = self.state
        return s is _RUNNING or ((s is _IN_SYSCALL or s is _WAITING_PAGES) and self.current_call == "pred")

    def ended(self) -> None:
        """The thread's function has returned or raised: mark it done and wake its joiners."""
        self.done.set()
        waits, self.joiners = self.joiners, []
        for w in waits:
            w.interrupt()

    def wait_ended(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the thread to end, from its hub's greenlets as from any thread."""
        if self.done.is_set():
            return True
        hub = self.proc.hub
        if hub is None or not hub.on_hub():
            return self.done.wait(timeout)
        try:
            self._join_on_hub(hub, timeout, check_kill=False)
        except TimeoutError:
            pass
        return self.done.is_set()

    def raise_async(self, exc_type: type[BaseException]) -> None:
        """Interrupt the thread even in a pure-Python loop (CPython's async exception)."""
        if self.proc.hub is not None:  # a greenlet: only while it is the one running (Hub.interrupt)
            self.proc.hub.interrupt(self, exc_type)
            return
        t = self.os_thread
        if t is not None and t.ident is not None and not self.done.is_set():
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(exc_type))


class Process:
    """A running LIP: its messages, its result, its threads and its state.

    What `Engine.run` / `Engine.launch` return.

    Attributes:
        pid: the process id.
        name: its name (the function's, unless `launch(name=)` said otherwise).
        user: the user it runs as.
        status: `queued` (waiting for admission), `running`, `parked` (its pages moved to host
            memory while the pool is short), `finished`, `failed` or `cancelled`.
        tokens_used: tokens fed to `pred` so far, all threads together.
    """

    def __init__(
        self, fn: Callable, args: tuple, kwargs: dict, user: str, name: str | None, priority: int, limits: Limits
    ):
        self.pid = next(_pids)
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.user = user
        self.name = name or getattr(fn, "__name__", "lip")
        self.priority = priority
        self.limits = limits
        self.status = "queued"  # queued | running | parked | finished | failed | cancelled
        self.threads: list[LIPThread] = []
        # Its threads running code or inside `pred` (`LIPThread.may_pred_soon`), kept by their state
        # changes under `lock`: the batch policy's count (ProcessScheduler.runnable) without a scan.
        self.threads_may_pred = 0
        self.handles: set = set()  # open KV handles, closed when the process ends
        self.tokens_used = 0
        self.created_at = now()
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.kill_reason: BaseException | None = None
        self._tids = itertools.count(1)
        self._outbox: queue.Queue = queue.Queue()
        self._inbox: queue.Queue = queue.Queue()
        self._done = threading.Event()
        self._result: Any = None
        self._error: LIPError | None = None
        self.lock = threading.Lock()
        # Called by `kill` to wake a thread asleep somewhere the runtime does not see (a sandboxed
        # program's in-engine thread waiting for its worker's next request).
        self.kill_wakers: list[Callable[[], None]] = []
        self.hub: Any = None  # the greenlet runner's Hub its threads run on (sched/hub.py), or None: OS threads
        self._recv_waits: list = []  # HubWaits of its greenlets asleep in recv

    # --- the launcher's side ----------------------------------------------------------------
    def messages(self, timeout: float | None = None) -> Iterator[Any]:
        """Everything the LIP `send`s, in order, until it ends.

        Args:
            timeout: seconds to wait for each message; `None` waits for ever.

        Raises:
            TimeoutError: `process <pid>: no message within <timeout>s`.
        """
        while True:
            try:
                item = self._outbox.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"process {self.pid}: no message within {timeout}s") from None
            if item is DONE:
                self._outbox.put(DONE)  # later callers see the end too
                return
            yield item

    def send(self, obj: Any) -> None:
        """Deliver `obj` to the LIP's `sym.recv()`."""
        self._inbox.put(obj)
        if self._recv_waits:
            self._wake_receivers()

    def _wake_receivers(self) -> None:
        with self.lock:
            waits, self._recv_waits = self._recv_waits, []
        for w in waits:
            w.interrupt()

    def unread(self) -> int:
        """Messages sent to the LIP that it has not `recv`d yet."""
        return self._inbox.qsize()

    def result(self, timeout: float | None = None) -> Any:
        """The LIP's return value, once it has ended.

        Args:
            timeout: seconds to wait; `None` waits for ever.

        Raises:
            LIPError: the LIP raised (or was cancelled, or killed by a limit): `process <pid>
                (<name>) failed: <ExceptionType>: <message>`, with the LIP's traceback in
                `.traceback_text` and its own exception as `__cause__`.
            TimeoutError: `process <pid> (<name>) still running after <timeout>s`.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"process {self.pid} ({self.name}) still running after {timeout}s")
        if self._error is not None:
            raise self._error
        return self._result

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the process ends; False if `timeout` passed first."""
        return self._done.wait(timeout)

    def cancel(self, reason: str = "cancelled by user") -> None:
        """Stop the process: its threads raise `Cancelled` at their next syscall (or at once in
        a pure-Python loop), its handles are closed, and `result()` raises a `LIPError` naming
        `reason`. Cancelling an ended process does nothing."""
        self.kill(Cancelled(f"process {self.pid} ({self.name}): {reason}"))

    @property
    def done(self) -> bool:
        """True once the process has ended (finished, failed or cancelled)."""
        return self._done.is_set()

    @property
    def error(self) -> LIPError | None:
        """The `LIPError` it failed with, or None."""
        return self._error

    # --- the runtime's side ---------------------------------------------------------------------
    def kill(self, reason: BaseException) -> None:
        with self.lock:
            if self.kill_reason is not None or self._done.is_set():
                return
            self.kill_reason = reason
            threads = list(self.threads)
        for t in threads:
            if t.state is ThreadState.RUNNING:  # in LIP code, maybe a tight loop: interrupt it
                t.raise_async(Cancelled)
            sig = t.waiting
            if sig is not None:  # asleep in pred: wake it to see the kill
                sig.interrupt()
        self._inbox.put(_KILL_WAKE)  # and any thread asleep in recv
        self._wake_receivers()
        for wake in list(self.kill_wakers):
            wake()

    def checkpoint(self) -> None:
        """Raise in the calling LIP thread if the process has been killed."""
        if self.kill_reason is not None:
            raise self.kill_reason

    def new_thread(self, name: str) -> LIPThread:
        with self.lock:
            live = sum(1 for t in self.threads if not t.done.is_set())
            if live >= self.limits.max_threads:
                raise LimitExceeded(
                    f"process {self.pid} ({self.name}): thread limit of {self.limits.max_threads} reached"
                )
            th = LIPThread(self, next(self._tids), name)
            self.threads.append(th)
            return th

    def finish(self, result: Any, error: BaseException | None) -> None:
        self.ended_at = now()
        if error is not None:
            if self.kill_reason is not None and isinstance(error, Cancelled):
                error = self.kill_reason
            tb = threadsafe_ast.format_exception(error)
            self._error = (
                error
                if isinstance(error, LIPError)
                else LIPError(f"process {self.pid} ({self.name}) failed: {type(error).__name__}: {error}", tb)
            )
            self._error.__cause__ = error
            self.status = "cancelled" if isinstance(error, Cancelled) else "failed"
        else:
            self._result = result
            self.status = "finished"
        self._inbox = queue.Queue()  # what it never recv'd is nobody's now: let it go
        self._outbox.put(DONE)
        self._done.set()

    def outbox_put(self, obj: Any) -> None:
        self._outbox.put(obj)

    def inbox_get(self, timeout: float | None) -> Any:
        hub = self.hub
        if hub is not None and hub.on_hub():
            return self._inbox_get_on_hub(hub, timeout)
        deadline = None if timeout is None else now() + timeout
        while True:
            self.checkpoint()
            try:
                item = self._inbox.get(timeout=next_look(deadline))
            except queue.Empty:
                if deadline is not None and now() >= deadline:
                    raise TimeoutError(f"recv: no message within {timeout}s") from None
                continue
            if item is _KILL_WAKE:
                self._inbox.put(item)  # for the process's other threads asleep in recv
                continue  # the checkpoint raises
            return item

    def _inbox_get_on_hub(self, hub, timeout: float | None) -> Any:
        """`inbox_get` from a greenlet: register a wait, then look, then park (a send in between fires it)."""
        deadline = None if timeout is None else now() + timeout
        me = hub.current_thread()
        while True:
            self.checkpoint()
            w = hub.new_wait()
            with self.lock:
                self._recv_waits.append(w)
            if me is not None:
                me.waiting = w  # a kill interrupts the wait
            try:
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    left = None if deadline is None else deadline - now()
                    if left is not None and left <= 0:
                        raise TimeoutError(f"recv: no message within {timeout}s") from None
                    hub.park(w, left)
                    continue
            finally:
                if me is not None:
                    me.waiting = None
                with self.lock:
                    if w in self._recv_waits:
                        self._recv_waits.remove(w)
                hub.withdraw(w)
            if item is _KILL_WAKE:
                self._inbox.put(item)  # for the process's other threads asleep in recv
                continue  # the checkpoint raises
            return item

    def summary(self) -> dict:
        """A JSON-ready picture: pid, name, user, status, priority, threads, tokens, error."""
        return {
            "pid": self.pid,
            "name": self.name,
            "user": self.user,
            "status": self.status,
            "priority": self.priority,
            "threads": [
                {"tid": t.tid, "name": t.name, "state": t.state.value, "call": t.current_call, "preds": t.preds}
                for t in self.threads
            ],
            "tokens": self.tokens_used,
            "error": None if self._error is None else str(self._error),
        }

    def __repr__(self) -> str:
        return f"Process(pid={self.pid}, {self.name!r}, user={self.user!r}, {self.status})"

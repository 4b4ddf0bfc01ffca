"""The LIP runtime: launches processes and threads, implements the syscalls, cleans up.

A LIP runs on ordinary Python threads. Its `pred` calls go to the batch scheduler and the
thread sleeps until its distribution is ready. When a process ends — returned, raised,
cancelled or killed by a limit — its remaining threads are stopped, its open handles are
closed (so unnamed pages return to the pool) and the engine carries on.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from ..errors import SymphonyError
from ..events import Event, EventBus, now
from ..executor import Executor, PredCall
from ..kvfs import KV
from ..model.dist import Dist
from ..model.tokenizer import Tokenizer
from ..sched.batch_scheduler import BatchScheduler
from ..sched.hub import SET_ASYNC_EXC
from ..sched.pending import PendingPred
from ..sched.process import Cancelled, Limits, LIPThread, Process
from ..sched.process_scheduler import ProcessScheduler
from .kernel import Kernel
from .syscalls import Sym

# How LIP threads run: OS threads, or greenlets on the batch scheduler's thread (sched/hub.py).
LIP_RUNNERS = ("threads", "greenlets")
KEEP_FINISHED = 1024  # finished processes the table keeps for views (debugger, /metrics) before dropping the oldest
EXIT_GRACE_S = 2.0  # how long shutdown waits for cancelled LIP threads to end

# Runtimes not shut down yet. At interpreter exit each is shut down before finalisation: the batch
# scheduler's forward passes and a LIP's torch calls let go of the GIL inside C++ frames, and a daemon
# thread that wakes there to take it back during finalisation is ended by CPython mid-frame, which
# aborts the whole process (a script that returns while its programs still decode).
_live: weakref.WeakSet[Runtime] = weakref.WeakSet()


@atexit.register
def _shut_down_all_at_exit() -> None:
    for rt in list(_live):
        rt.shutdown()


def check_lip_runner(name: str) -> None:
    if name not in LIP_RUNNERS:
        raise SymphonyError(f"lip_runner={name!r}: choose one of {', '.join(LIP_RUNNERS)}")


class Runtime:
    def __init__(
        self,
        executor: Executor,
        tokenizer: Tokenizer,
        tokenizer_file: str,
        *,
        policy=None,
        token_budget: int = 512,
        max_running: int = 4096,
        lip_runner: str = "threads",
    ) -> None:
        check_lip_runner(lip_runner)
        self.executor = executor
        self.kvfs = executor.kvfs
        self.tokenizer = tokenizer
        self.tokenizer_file = tokenizer_file  # tokenizer.json, for grammar libraries (`sym.tokenizer_file`)
        self.vocab_size = executor.vocab
        self.bus = EventBus()
        self.kernel = Kernel(self.bus)
        self.processes: dict[int, Process] = {}  # live ones, and the last KEEP_FINISHED finished ones
        self._finished: collections.deque[int] = collections.deque()
        self.procs = ProcessScheduler(self.kvfs, max_running=max_running)
        self.batch = BatchScheduler(
            executor,
            self.procs,
            self.bus,
            token_budget=token_budget,
            policy=policy,
            greenlets=lip_runner == "greenlets",
        )
        self.batch.start()
        self.on_process_start: list[Callable[[Process], None]] = []  # the debugger's stop-on-entry
        self.hub = self.batch.hub  # greenlets run on the batch scheduler's thread (sched/hub.py)
        _live.add(self)

    # --- launching -----------------------------------------------------------------------------
    def launch(
        self,
        fn: Callable,
        args: tuple = (),
        kwargs: dict | None = None,
        *,
        user: str = "local",
        name: str | None = None,
        priority: int = 0,
        limits: Limits | None = None,
    ) -> Process:
        if not callable(fn):
            raise SymphonyError(f"run expects a LIP function, got {type(fn).__name__}")
        proc = Process(fn, tuple(args), dict(kwargs or {}), user, name, priority, limits or Limits())
        self.processes[proc.pid] = proc
        self._start_processes(self.procs.admit(proc))
        return proc

    def _start_processes(self, procs: list[Process]) -> None:
        for proc in procs:
            if self.hub is not None and not self._debugger_attached():
                proc.hub = self.hub
            th = proc.new_thread("main")
            self._start(th, proc.fn, proc.args, proc.kwargs, main=True)

    def _debugger_attached(self) -> bool:
        """A hook or stop-on-entry is set: programs start on OS threads, since a debugger holds a
        thread at its stops, which on the hub would hold every program there."""
        return self.kernel.hook is not None or bool(self.on_process_start)

    def start_thread(self, proc: Process, fn: Callable, args: tuple, kwargs: dict) -> LIPThread:
        th = proc.new_thread(getattr(fn, "__name__", "thread"))
        self._start(th, fn, args, kwargs, main=False)
        return th

    def _start(self, th: LIPThread, fn: Callable, args: tuple, kwargs: dict, main: bool) -> None:
        hub = th.proc.hub
        if hub is not None:
            th.os_thread = hub.thread
            hub.start(th, lambda: self._thread_main(th, fn, args, kwargs, main))
            return
        t = threading.Thread(
            target=self._os_thread_main,
            args=(th, fn, args, kwargs, main),
            name=f"lip-{th.proc.pid}.{th.tid}",
            daemon=True,
        )
        th.os_thread = t
        self.procs.os_thread_started()
        try:
            t.start()
        except BaseException:
            self.procs.os_thread_ended()
            raise

    def _os_thread_main(self, th: LIPThread, fn: Callable, args: tuple, kwargs: dict, main: bool) -> None:
        try:
            self._thread_main(th, fn, args, kwargs, main)
        finally:
            self.procs.os_thread_ended()

    def _thread_main(self, th: LIPThread, fn: Callable, args: tuple, kwargs: dict, main: bool) -> None:
        proc = th.proc
        hub = proc.hub
        if hub is not None and main and self._debugger_attached():
            # A debugger attached between the launch and the greenlet's first turn: the program (no
            # thread of it has run yet) moves to an OS thread.
            proc.hub = None
            self._start(th, fn, args, kwargs, main)
            return
        result, error = None, None
        if self.bus.active:
            self.bus.publish(
                Event(
                    "process_start" if main else "thread_start",
                    now(),
                    proc.pid,
                    th.tid,
                    args={"name": proc.name if main else th.name, "user": proc.user},
                )
            )
        try:
            th.start_running()
            if main:
                for cb in list(self.on_process_start):
                    cb(proc)
            proc.checkpoint()
            result = fn(Sym(self, th), *args, **kwargs)
        except BaseException as e:  # a LIP's failure is its own; the engine goes on
            error = e
        finally:
            # A kill's exception sent while it ran and not landed: take it back (Hub.interrupt).
            take_back = (lambda: SET_ASYNC_EXC(ctypes.c_ulong(hub.ident), None)) if hub is not None else None
            th.finish(result, error, take_back)
            th.ended()
            if self.bus.active and not main:
                self.bus.publish(
                    Event("thread_exit", now(), proc.pid, th.tid, error=None if error is None else repr(error))
                )
        if main:
            self._end_process(proc, result, error)
        else:
            self.batch.wake()

    def _end_process(self, proc: Process, result: Any, error: BaseException | None) -> None:
        others = [t for t in proc.threads if not t.done.is_set()]
        if others:
            proc.kill(Cancelled(f"process {proc.pid} ({proc.name}) ended while thread(s) still ran"))
            for t in others:
                t.wait_ended(2.0)
        for h in list(proc.handles):
            if not h.closed:
                try:
                    self.kvfs.close(h)
                except SymphonyError:
                    pass
        proc.handles.clear()
        proc.finish(result, error)
        self._finished.append(proc.pid)
        while len(self._finished) > KEEP_FINISHED:
            self.processes.pop(self._finished.popleft(), None)
        self._start_processes(self.procs.exited(proc))
        self.batch.wake()
        if self.bus.active:
            self.bus.publish(
                Event(
                    "process_exit",
                    now(),
                    proc.pid,
                    args={"status": proc.status},
                    error=None if proc.error is None else str(proc.error),
                )
            )

    # --- syscall implementations ---------------------------------------------------------------
    def pred(self, th: LIPThread, kv, token_ids, positions, outputs, sampler, mask) -> Dist:
        """The `pred` syscall: validate (executor), account (level 1), queue and wait (level 2)."""
        proc = th.proc
        call = PredCall(kv, token_ids, positions, outputs, sampler, mask)
        self.executor.prepare(call)
        self.procs.account_pred(proc, len(call.tokens))
        th.preds += 1
        hub_wait = proc.hub.new_wait() if proc.hub is not None else None
        return self.batch.pred(
            PendingPred(call, proc.pid, th.tid, proc.user, proc.priority, kv.len, hub_wait=hub_wait), th
        )

    def kv_create(self, th: LIPThread, path: str | None) -> KV:
        return self._track(th, self.kvfs.create(th.proc.user, path))

    def kv_open(self, th: LIPThread, path: str, mode: str) -> KV:
        return self._track(th, self.kvfs.open(th.proc.user, path, mode))

    def kv_fork(self, th: LIPThread, kv: KV) -> KV:
        return self._track(th, self.kvfs.fork(kv, th.proc.user))

    def _track(self, th: LIPThread, kv: KV) -> KV:
        th.proc.handles.add(kv)  # closed when the process ends, if the LIP has not
        return kv

    # The calls below free pages or stop a thread from being runnable: the batch policy, which sleeps
    # until enough calls are queued (sched/batch_scheduler.py), may fire now.
    def kv_close(self, th: LIPThread, kv: KV) -> None:
        self.kvfs.close(kv)
        th.proc.handles.discard(kv)
        self.batch.wake()

    def kv_truncate(self, kv: KV, n: int) -> None:
        self.kvfs.truncate(kv, n)
        self.batch.wake()

    def kv_remove(self, user: str, path: str) -> None:
        self.kvfs.remove(user, path)
        self.batch.wake()

    def recv(self, th: LIPThread, timeout: float | None) -> Any:
        self.batch.wake()
        return th.proc.inbox_get(timeout)

    def join(self, target: LIPThread, timeout: float | None) -> Any:
        self.batch.wake()
        return target.join(timeout)

    def reap(self, pid: int) -> None:
        """Forget a finished process now (its owner, e.g. the server, has dropped it)."""
        p = self.processes.get(pid)
        if p is not None and p.done:
            self.processes.pop(pid, None)

    def shutdown(self) -> None:
        """Cancel every live process, stop the batch scheduler (greenlets run to their end on it
        first), and give the LIP threads up to EXIT_GRACE_S to end (one stuck in its own code is left
        to run: they are daemon threads)."""
        _live.discard(self)
        procs = list(self.processes.values())
        for p in procs:
            if not p.done:
                p.cancel("engine shutting down")
        self.batch.stop()
        deadline = time.monotonic() + EXIT_GRACE_S
        me = threading.current_thread()
        for p in procs:
            if p.hub is not None:  # greenlets: ended on the scheduler's thread, or left there
                continue
            for th in list(p.threads):
                t = th.os_thread
                if t is None or t is me:
                    continue
                if t.is_alive():
                    t.join(max(0.0, deadline - time.monotonic()))
        self.procs.stop()

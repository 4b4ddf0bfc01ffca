"""The kernel: the enter and leave steps every system call of every LIP passes through.

A `sym` method (lip/syscalls.py) enters (`Kernel.enter`), calls the runtime itself, and leaves
(`Kernel.leave`, or `Kernel.failed` when the call raised). Here each call is traced (an enter and
an exit event on the bus, with the LIP's own file and line) and here a debugger may hold it
(`hook.before`) or rewrite its result (`hook.after`). With no subscriber and no hook, a syscall
costs one check and a counter increment (plus the thread-state bookkeeping the schedulers read).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

from ..events import Event, EventBus, now
from ..kvfs import KV
from ..model.dist import Dist
from ..sched.process import LIPThread

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_inside: dict[str, bool] = {}  # file name -> is it part of symphony_core (cached: a frame walk per traced call)


class DebugHook(Protocol):
    def before(self, thread: LIPThread, event: Event) -> None: ...
    def after(self, thread: LIPThread, event: Event, result: Any) -> Any: ...

    # Optional: `after_error(thread, event, exc)` sees a syscall that raised (recording, replay).


def caller_location() -> tuple[str | None, int | None]:
    """File and line of the innermost frame outside symphony_core: the LIP's own code."""
    f: FrameType | None = sys._getframe(2)
    inside = _inside
    while f is not None:
        name = f.f_code.co_filename
        ins = inside.get(name)
        if ins is None:
            ins = inside[name] = name.startswith(_PKG_DIR)
        if not ins:
            return name, f.f_lineno
        f = f.f_back
    return None, None


def summarize_result(call: str, result: Any) -> Any:
    """A small, JSON-friendly picture of a syscall's result for the event stream."""
    if isinstance(result, Dist):  # argmax only: a softmax over the vocabulary per event costs too much
        if result.logits.dim() == 1:
            return {"argmax": result.argmax(), "token": result.token}
        return {"positions": len(result), "token": result.token}
    if isinstance(result, KV):
        return {"kv": result.describe(), "file": result.file.fid, "kv_len": result.len}
    if isinstance(result, (int, float, str, bool)) or result is None:
        return result if not isinstance(result, str) else result[:200]
    if isinstance(result, list) and len(result) <= 64 and all(isinstance(x, (int, str)) for x in result):
        return result
    return repr(result)[:200]


def _exit_event(enter: Event, t: float, result: Any = None, error: str | None = None) -> Event:
    """The `syscall_exit` that closes `enter` at time `t`: same process, thread, call, place and seq."""
    return Event(
        "syscall_exit",
        t,
        enter.pid,
        enter.tid,
        enter.call,
        result=result,
        error=error,
        file=enter.file,
        line=enter.line,
        seq=enter.seq,
        duration=t - enter.ts,
    )


class Kernel:
    """The steps around each system call; the `sym` method calls the runtime between them:

        enter = kernel.enter(th, "kv_fork", args)
        try:
            result = runtime.kv_fork(th, kv)
        except BaseException as e:
            kernel.failed(th, enter, e)
            raise
        return kernel.leave(th, enter, result)

    `enter` marks the thread in the call and numbers it; when someone observes, it also publishes
    `syscall_enter` and lets a debugger hold the thread, and returns that event (else None). `leave`
    lets the debugger see or rewrite the result and publishes `syscall_exit`; `failed` shows the
    debugger the exception and publishes an exit with the error. Both mark the thread running again.
    """

    summarize_result = staticmethod(summarize_result)  # what the debugger shows of a result, too

    def __init__(self, bus: EventBus) -> None:
        self.bus = bus
        self.hook: DebugHook | None = None

    def enter(self, th: LIPThread, call: str, args: Callable[[], dict]) -> Event | None:
        """`args` describes the call's arguments for the event; it is called only when someone observes."""
        th.enter_syscall(call)
        th.seq += 1
        if self.hook is None and not self.bus.active:
            return None
        try:
            return self._observed_enter(th, call, args)
        except BaseException:  # held and then killed (or the hook failed): the call never ran
            th.leave_syscall()
            raise

    def _observed_enter(self, th: LIPThread, call: str, args: Callable[[], dict]) -> Event:
        # A debugger holds a thread at its stops: a greenlet (sched/hub.py) would hold every program on the hub.
        hook = self.hook if th.proc.hub is None else None
        file, line = caller_location()
        enter = Event("syscall_enter", now(), th.proc.pid, th.tid, call, args(), file=file, line=line, seq=th.seq)
        if self.bus.active:
            self.bus.publish(enter)
        if hook is not None:
            hook.before(th, enter)
            th.proc.checkpoint()
        return enter

    def leave(self, th: LIPThread, enter: Event | None, result: Any) -> Any:
        """The call returned `result`: returns what the LIP gets (a debugger may have rewritten it)."""
        if enter is None:
            th.leave_syscall()
            return result
        try:
            hook = self.hook if th.proc.hub is None else None
            if hook is not None:
                result = hook.after(th, enter, result)
        except BaseException as e:  # held after the call and killed there, or the hook failed
            self.failed(th, enter, e)
            raise
        th.leave_syscall()
        if self.bus.active:
            t = now()  # before the summary: the exit's time is the call's, not the summary's
            self.bus.publish(_exit_event(enter, t, result=summarize_result(enter.call or "", result)))
        return result

    def failed(self, th: LIPThread, enter: Event | None, error: BaseException) -> None:
        """The call (or the debugger's hold after it) raised `error`, which goes on to the LIP."""
        try:
            if enter is not None:
                on_error = getattr(self.hook if th.proc.hub is None else None, "after_error", None)
                if on_error is not None:
                    on_error(th, enter, error)
                if self.bus.active:
                    self.bus.publish(_exit_event(enter, now(), error=f"{type(error).__name__}: {error}"))
        finally:
            th.leave_syscall()

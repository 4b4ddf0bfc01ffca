"""The kernel: the one dispatch point every system call of every LIP passes through.

Here each call is traced (an enter and an exit event on the bus, with the LIP's own file and
line) and here a debugger may hold it (`hook.before`) or rewrite its result (`hook.after`).
With no subscriber and no hook, a syscall costs one check and a counter increment (plus the
thread-state bookkeeping the schedulers read).
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
    summarize_result = staticmethod(summarize_result)  # what the debugger shows of a result, too

    def __init__(self, bus: EventBus) -> None:
        self.bus = bus
        self.hook: DebugHook | None = None

    def syscall(self, th: LIPThread, call: str, impl: Callable[[], Any], args: Callable[[], dict]) -> Any:
        th.enter_syscall(call)
        th.seq += 1
        try:
            if self.hook is None and not self.bus.active:
                return impl()
            return self._traced(th, th.proc, call, impl, args)
        finally:
            th.leave_syscall()

    def _traced(self, th: LIPThread, proc, call: str, impl: Callable[[], Any], args: Callable[[], dict]) -> Any:
        """The observed path: enter/exit events (when someone subscribes) and the debugger's hook."""
        # A debugger holds a thread at its stops: a greenlet (sched/hub.py) would hold every program on the hub.
        hook = self.hook if th.proc.hub is None else None
        bus = self.bus
        file, line = caller_location()
        seq = th.seq
        enter = Event("syscall_enter", now(), proc.pid, th.tid, call, args(), file=file, line=line, seq=seq)
        if bus.active:
            bus.publish(enter)
        if hook is not None:
            hook.before(th, enter)
            proc.checkpoint()
        try:
            result = impl()
            if hook is not None:
                result = hook.after(th, enter, result)
        except BaseException as e:
            on_error = getattr(hook, "after_error", None)
            if on_error is not None:
                on_error(th, enter, e)
            if bus.active:
                bus.publish(_exit_event(enter, now(), error=f"{type(e).__name__}: {e}"))
            raise
        if bus.active:
            t = now()  # before the summary: the exit's time is the call's, not the summary's
            bus.publish(_exit_event(enter, t, result=summarize_result(call, result)))
        return result

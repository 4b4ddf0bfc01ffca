"""The kernel: the one dispatch point every system call of every LIP passes through.

Here each call is traced (an enter and an exit event on the bus, with the LIP's own file and
line) and here a debugger may hold it (`hook.before`) or rewrite its result (`hook.after`).
With no subscriber and no hook, a syscall costs one check and a counter increment.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Protocol

from .events import Event, EventBus, now
from .process import LIPThread

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class DebugHook(Protocol):
    def before(self, thread: LIPThread, event: Event) -> None: ...
    def after(self, thread: LIPThread, event: Event, result: Any) -> Any: ...
    # Optional: `after_error(thread, event, exc)` sees a syscall that raised (recording, replay).


def caller_location() -> tuple[str | None, int | None]:
    """File and line of the innermost frame outside symphony_core: the LIP's own code."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(_PKG_DIR):
        f = f.f_back
    if f is None:
        return None, None
    return f.f_code.co_filename, f.f_lineno


class Kernel:
    def __init__(self, bus: EventBus) -> None:
        self.bus = bus
        self.hook: DebugHook | None = None
        self.summarize_result: Callable[[str, Any], Any] = lambda call, r: None

    def syscall(self, th: LIPThread, call: str, impl: Callable[[], Any], args: Callable[[], dict]) -> Any:
        proc = th.proc
        with proc.lock:
            proc.checkpoint()
            th.state, th.current_call = "in_syscall", call
        th.seq += 1
        try:
            hook = self.hook
            if hook is None and not self.bus.active:
                return impl()
            file, line = caller_location()
            enter = Event("syscall_enter", now(), proc.pid, th.tid, call, args(), file=file, line=line, seq=th.seq)
            self.bus.publish(enter)
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
                self.bus.publish(
                    Event("syscall_exit", now(), proc.pid, th.tid, call, error=f"{type(e).__name__}: {e}",
                          file=file, line=line, seq=th.seq, duration=now() - enter.ts)
                )
                raise
            self.bus.publish(
                Event("syscall_exit", now(), proc.pid, th.tid, call, result=self.summarize_result(call, result),
                      file=file, line=line, seq=th.seq, duration=now() - enter.ts)
            )
            return result
        finally:
            with proc.lock:
                th.state, th.current_call = "running", None

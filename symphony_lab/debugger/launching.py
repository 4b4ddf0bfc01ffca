"""Starting processes under the debugger so that it has them registered (stop on entry, a
recording, breakpoints moved over) before their first line runs.

One part of `Debugger`, composed through an explicit interface: it is given the engine's
runtime; a launch's `setup(proc)` callback does what the debugger needs done first. The
debugger's hook that runs in a new process before the LIP (`on_process_start`) waits for a
launch in flight (`registered`) and asks whether that process stops on entry (`take_entry`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Launcher:
    def __init__(self, runtime) -> None:
        self.runtime = runtime
        self._lock = threading.Lock()
        self._entry_pids: set[int] = set()  # processes to stop before their first line

    def launch(self, fn, args, kwargs, *, user, name, priority, limits, stop_on_entry, setup=None):
        """`runtime.launch(...)`, with the process registered (and `setup(proc)` run) before its first line."""
        with self._lock:
            proc = self.runtime.launch(fn, args, kwargs, user=user, name=name, priority=priority, limits=limits)
            if stop_on_entry:
                self._entry_pids.add(proc.pid)
            if setup is not None:
                setup(proc)
        return proc

    def launch_again(self, like, *, stop_on_entry, setup=None):
        """Launch the function of `like` (a Process, or a Recording of one) with its arguments,
        user, name, priority and limits."""
        return self.launch(
            like.fn,
            like.args,
            like.kwargs,
            user=like.user,
            name=like.name,
            priority=like.priority,
            limits=like.limits,
            stop_on_entry=stop_on_entry,
            setup=setup,
        )

    def launch_with(self, start: Callable[[], Any], *, stop_on_entry: bool, setup: Callable[[Any], None]) -> Any:
        """`start()` launches a process some other way and returns it (or an object whose `.proc` it is)."""
        with self._lock:
            out = start()
            proc = getattr(out, "proc", out)
            if stop_on_entry:
                self._entry_pids.add(proc.pid)
            setup(proc)
        return out

    def registered(self) -> None:
        """Wait until a launch in flight has registered its process."""
        with self._lock:
            pass

    def take_entry(self, pid: int) -> bool:
        """Whether process `pid` was launched to stop on entry (asked once)."""
        if pid in self._entry_pids:
            self._entry_pids.discard(pid)
            return True
        return False

    def forget(self, pid: int | None = None) -> None:
        """Process `pid` ended (None: every process, at detach)."""
        if pid is None:
            self._entry_pids.clear()
        else:
            self._entry_pids.discard(pid)


__all__ = ["Launcher"]

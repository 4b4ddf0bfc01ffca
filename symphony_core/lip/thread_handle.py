"""What `sym.spawn` returns: the handle to a LIP's new thread, whose `join` is a system call of the
thread that spawned it."""

from __future__ import annotations

from typing import Any

from ..sched.process import LIPThread
from .syscall_host import SyscallHost


class ThreadHandle:
    """What `sym.spawn` returns: `join()` waits for the thread and gives its return value."""

    def __init__(self, rt: SyscallHost, caller: LIPThread, th: LIPThread) -> None:
        self._rt, self._caller, self._th = rt, caller, th

    @property
    def tid(self) -> int:
        """The new thread's id within the process (the main thread is 1)."""
        return self._th.tid

    def join(self, timeout: float | None = None) -> Any:
        """Wait for the thread to end and return what its function returned (pthread_join).

        Args:
            timeout: seconds to wait at most; `None` waits for ever.

        Returns:
            The thread function's return value.

        Raises:
            TimeoutError: `thread <tid> of process <pid> did not finish in <timeout>s` (the thread
                keeps running; join again later).
            Exception: whatever the thread's function raised, re-raised here unchanged.
            Cancelled: the process was cancelled (or killed by a limit) while waiting.
        """
        k, caller = self._rt.kernel, self._caller
        enter = k.enter(caller, "join", lambda: {"tid": self._th.tid})
        try:
            result = self._rt.join(self._th, timeout)
        except BaseException as e:
            k.failed(caller, enter, e)
            raise
        return k.leave(caller, enter, result)

    @property
    def done(self) -> bool:
        """True once the thread's function has returned or raised."""
        return self._th.done.is_set()

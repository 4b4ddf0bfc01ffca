"""The LIP runtime: the `sym` syscall surface, the kernel every syscall passes, and the runtime
that runs LIP threads. Processes and threads themselves are the schedulers' (sched/process.py)."""

from ..events import Event, EventBus
from ..sched.process import Cancelled, LimitExceeded, Limits, LIPError, LIPThread, Process
from ..sched.thread_state import ThreadState
from .kernel import Kernel
from .syscalls import Sym
from .thread_handle import ThreadHandle

__all__ = [
    "Cancelled",
    "Event",
    "EventBus",
    "Kernel",
    "LIPError",
    "LIPThread",
    "LimitExceeded",
    "Limits",
    "Process",
    "Sym",
    "ThreadState",
    "ThreadHandle",
]

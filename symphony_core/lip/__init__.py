"""The LIP runtime: processes, threads, the `sym` syscall surface, the kernel and its events."""

from .events import Event, EventBus
from .kernel import Kernel
from .process import Cancelled, LimitExceeded, Limits, LIPError, LIPThread, Process
from .syscalls import Sym, ThreadHandle

__all__ = ["Cancelled", "Event", "EventBus", "Kernel", "LIPError", "LIPThread", "LimitExceeded", "Limits", "Process", "Sym",
           "ThreadHandle"]

"""The states of a LIP thread (changed only through `LIPThread`'s methods, sched/process.py) and how
often a thread asleep in a syscall looks at its process's kill flag."""

from __future__ import annotations

from enum import StrEnum

from ..events import now

# How often a LIP thread asleep in a syscall (pred, recv, join) looks at its process's kill flag
# by itself. Only a safety net: `Process.kill` wakes a thread asleep in pred or recv at once.
# (Polling it often costs: a thousand sleeping LIPs looking twenty times a second took the GIL
# from the forward pass every few microseconds.)
KILL_CHECK_S = 1.0


def next_look(deadline: float | None) -> float:
    """How long a wait may sleep before it looks at the kill flag again: KILL_CHECK_S, or less
    where the caller's deadline comes first (never negative)."""
    return KILL_CHECK_S if deadline is None else max(0.0, min(KILL_CHECK_S, deadline - now()))


class ThreadState(StrEnum):
    """Where a LIP thread is. Changed only through `LIPThread`'s methods, each under its process's lock
    (a kill reads the state and acts on it under the same lock). Its values are the strings views show."""

    NEW = "new"
    RUNNING = "running"  # in the program's own code
    IN_SYSCALL = "in_syscall"
    WAITING_PAGES = "waiting_pages"  # inside `pred`, its call waiting for free KV pages
    STOPPED = "stopped"  # held by a debugger at a stop: not runnable
    FINISHED = "finished"
    FAILED = "failed"


# The states in which a thread may still queue a `pred` soon: what the batch policy waits for.
PRED_STATES = (ThreadState.IN_SYSCALL, ThreadState.WAITING_PAGES)

"""Which OS threads may run a batch of their own (`BatchScheduler._fire_alone`): a few, at once.

On the CPU every thread that runs a forward pass gets an OpenMP team of its own from libgomp (a worker
for each further CPU torch uses), asleep between passes and freed only when the thread ends. A
program's thread that ran alone once and then waits (a chat session between turns) keeps its team.
Measured on the 2-CPU VM, 10 live programs that had each run alone once: 25 OS threads for 13 Python
threads, 20 with this bound (each team is one worker there). With torch on 64 CPUs every team is 63
threads, and a server's thousand idle sessions would run into the system's thread limit. So at most
LONE_THREADS live threads run lone batches; another program's lone call takes the loop, as it does
whenever a second program could join.
"""

from __future__ import annotations

import threading

LONE_THREADS = 4


class LoneThreads:
    """The live threads that have run a batch of their own. Used under the scheduler's `_firing` lock."""

    __slots__ = ("limit", "_threads")

    def __init__(self, limit: int = LONE_THREADS) -> None:
        self.limit = limit
        self._threads: list[threading.Thread] = []

    def admit(self, th: threading.Thread) -> bool:
        """May `th` run a batch itself: it has before, or fewer than `limit` such threads are alive."""
        threads = self._threads
        if th in threads:
            return True
        threads[:] = [t for t in threads if t.is_alive()]
        if len(threads) >= self.limit:
            return False
        threads.append(th)
        return True

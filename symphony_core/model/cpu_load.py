"""How busy the CPUs are, from /proc: what kernel_tiers.py checks before it caches a timing (and the
benchmarks before they time).

Linux counts every CPU's time in ticks (/proc/stat: user, nice, system, idle, iowait, irq, softirq,
steal) and this process's own (/proc/self/stat: utime, stime), in the same unit, so their differences
over an interval say what share of the machine other processes took meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

MIN_TICKS = 10  # fewer ticks over all CPUs (~50 ms on 2 cores) are too coarse to tell a share from


class CpuTicks(NamedTuple):
    total: int  # every CPU's ticks so far
    busy: int  # of those, neither idle nor waiting on I/O
    own: int  # this process's (user + system, all its threads)


def cpu_ticks() -> CpuTicks | None:
    """The tick counters now; None where /proc cannot say."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
        with open("/proc/self/stat") as f:
            own = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    except (OSError, ValueError, IndexError):
        return None
    total = sum(fields)
    return CpuTicks(total, total - fields[3] - fields[4], int(own[11]) + int(own[12]))


def others_share(during: Callable[[], object]) -> tuple[object, float | None]:
    """`during()`'s result and the share of all CPUs' time that other processes used while it ran
    (None where /proc cannot say, or too little time passed to tell)."""
    a = cpu_ticks()
    value = during()
    b = cpu_ticks()
    if a is None or b is None or b.total - a.total < MIN_TICKS:
        return value, None
    others = (b.busy - a.busy) - (b.own - a.own)
    return value, max(0.0, others / (b.total - a.total))

"""The machine a benchmark runs on: a one-line description, and waiting until nothing else runs.

Timings on a small shared machine (2 cores here) are only comparable when no other process
competes for the cores, so timed runs first wait, up to a limit, for the CPUs to be idle. And a
bandwidth-bound step is only as fast as memory: `read_bandwidth` measures that floor in the run.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time

import torch

from symphony_core.model.cpu_load import cpu_ticks


def describe() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} on {torch.get_num_threads()} threads"


def busy_fraction(window: float = 1.0) -> float | None:
    """Share of all CPUs used by anything during `window` seconds (we sleep meanwhile)."""
    a = cpu_ticks()
    time.sleep(window)
    b = cpu_ticks()
    if a is None or b is None or b.total == a.total:
        return None
    return (b.busy - a.busy) / (b.total - a.total)


def wait_until_idle(max_wait: float, busy_below: float = 0.1) -> float | None:
    """Block until the CPUs are idle (or `max_wait` s pass); return the last busy share seen."""
    if max_wait <= 0:
        return None
    deadline = time.monotonic() + max_wait
    busy = busy_fraction()
    while busy is not None and busy >= busy_below and time.monotonic() < deadline:
        busy = busy_fraction()
    if busy is not None and busy >= busy_below:
        print(f"  (other processes use {busy:.0%} of the CPUs; timing anyway)", file=sys.stderr, flush=True)
    return busy


def read_bandwidth(n_bytes: int = 512 << 20, repeats: int = 5) -> float:
    """Memory read bandwidth in GB/s: the median of `repeats` sums over an fp32 buffer far larger
    than the caches, on torch's threads. A single-stream fp32 decode step reads every weight once,
    so weight bytes ÷ this is the fastest such a step can run on this machine, now."""
    buf = torch.ones(n_bytes // 4)
    buf.sum()  # the pages are touched before any timed pass
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        buf.sum()
        times.append(time.perf_counter() - t0)
    return n_bytes / statistics.median(times) / 1e9

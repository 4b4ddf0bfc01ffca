"""Which CPUs a runtime's LIP threads run on: by default one, while the GIL is on.

Under CPython's GIL one LIP thread runs Python at a time, however many CPUs the threads may use.
Spread over every CPU, each hand-off between a batch's threads (`Signal`'s wake-up chain) and each
GIL hand-over is a wake-up on another CPU (an inter-processor interrupt, dear in a VM), and the LIPs'
Python lands on the CPUs the forward pass's threads are using. Kept on one CPU, the threads wake one
another there and the other CPUs are the model's. Measured on a 2-core EPYC, same process, alternating:
with the model replaced by a stub (bench/runtime_overhead.py) CPU time per `pred` 106 -> 53 µs and
144 -> 72 µs; 1,000 programs x 8 tokens on the real model 142 -> 184 and 145 -> 157 tok/s; one stream
unchanged.

The choice (`Engine(lip_cpus=...)`, else `SYMPHONY_LIP_CPUS`, else "auto"):
- "auto": one of the CPUs the process may use, picked by its pid so that several engine processes on
  one machine spread out; no change where the process has one CPU, the OS offers no per-thread
  affinity, or the GIL is off (free-threaded CPython, where the threads do run in parallel).
- "all": no change; the threads run wherever the OS puts them (LIP code that does heavy work outside
  the GIL, numpy say, may want this, as may one that starts subprocesses: they inherit its CPUs).
- CPU numbers, "3" or "2,3": those.
"""

from __future__ import annotations

import os
import sys

ENV = "SYMPHONY_LIP_CPUS"


def _allowed() -> set[int] | None:
    """The CPUs this process may run on, or None where the OS cannot pin a thread."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    return set(os.sched_getaffinity(0))


def _gil_enabled() -> bool:
    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else bool(check())


def choose_lip_cpus(setting: str | None = None) -> frozenset[int] | None:
    """The CPU set LIP threads pin themselves to (`pin_lip_thread`), or None to leave them be.
    A bad setting raises ValueError naming it."""
    raw = setting if setting is not None else os.environ.get(ENV, "auto")
    text = str(raw).strip().lower()
    allowed = _allowed()
    if text == "all":
        return None
    if text == "auto":
        if allowed is None or len(allowed) < 2 or not _gil_enabled():
            return None
        cpus = sorted(allowed)
        return frozenset({cpus[os.getpid() % len(cpus)]})
    try:
        wanted = frozenset(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"lip_cpus must be 'auto', 'all' or CPU numbers such as '3' or '2,3', got {raw!r}") from None
    if allowed is None:
        raise ValueError(f"lip_cpus={raw!r}: this OS cannot pin a thread to CPUs; use 'auto' or 'all'")
    if not wanted <= allowed:
        raise ValueError(
            f"lip_cpus={raw!r}: CPU(s) {sorted(wanted - allowed)} are not among this process's CPUs {sorted(allowed)}"
        )
    return wanted


def pin_lip_thread(cpus: frozenset[int] | None) -> None:
    """On a LIP thread, as it starts: run it on `cpus` only (no change for None)."""
    if cpus is not None:
        try:
            os.sched_setaffinity(0, cpus)  # 0: the calling thread (Linux)
        except OSError:  # the CPU went away (a container's set shrank): run where the OS says
            pass

"""The protocol's profiling commands: `profile_start`, `profile`, `profile_stop`.

A remote client (the TUI against a server, the JupyterLab sidebar) starts the LIP profiler
(symphony_lab/profiler) on one process or on the whole engine and reads its per-line table as
JSON (`ProfileBody`); `profile_from_body` turns that JSON back into a `Profile`, so a client
renders it with the same `table()` / `flame()` the in-process API has.

Each debugger keeps at most `MAX_PROFILES` collectors; a process's collector detaches by itself
once the process has ended and is read (its profile stays readable until `profile_stop` or
until newer profiles push it out).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from symphony_core.events import now

from ..profiler import BUCKETS, LineRow, Profile, ProfileCollector, ThreadProfile, Times
from .errors import DebuggerError
from .protocol_bodies import ProfileBody, ProfileStackBody, ProfilingBody

MAX_PROFILES = 16
COUNTS = ("preds", "tokens", "syscalls")


@dataclass
class _Profiled:
    pid: int | None  # None: the whole engine
    collector: ProfileCollector
    since: float
    attached: bool = True
    done: bool = False  # its process ended and every thread's end was seen: the profile is final


def _check_pid(dbg: Any, pid: Any, *, may_be_none: bool = True) -> None:
    if pid is None and may_be_none:
        return
    if not isinstance(pid, int) or isinstance(pid, bool):
        raise DebuggerError(f"pid must be a process id (an integer), got {pid!r}")
    if pid not in dbg.runtime.processes:
        raise DebuggerError(f"no process {pid}")


def _check_top(top: Any) -> int:
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        raise DebuggerError(f"top must be a positive integer, got {top!r}")
    return top


class Profiling:
    """One debugger's profile collectors, by pid (None: the engine-wide one)."""

    def __init__(self, dbg: Any) -> None:
        self.dbg = dbg
        self.entries: dict[int | None, _Profiled] = {}
        self.lock = threading.Lock()

    def _process_ended(self, pid: int | None) -> bool:
        proc = self.dbg.runtime.processes.get(pid) if pid is not None else None
        return proc is not None and bool(proc.done)

    def _evict(self) -> None:
        """Make room for one more: drop the oldest detached profile (a running one is never dropped)."""
        if len(self.entries) < MAX_PROFILES:
            return
        for key, e in sorted(self.entries.items(), key=lambda kv: kv[1].since):
            if not e.attached or self._process_ended(e.pid):
                self._detach(e)
                del self.entries[key]
                return
        raise DebuggerError(
            f"already profiling {MAX_PROFILES} running processes ({sorted(map(str, self.entries))}); "
            "profile_stop one first"
        )

    def _detach(self, e: _Profiled) -> None:
        if e.attached:
            e.collector.detach()
            e.attached = False

    def start(self, pid: int | None, interval: float) -> ProfilingBody:
        _check_pid(self.dbg, pid)
        if not isinstance(interval, (int, float)) or not 0.001 <= interval <= 1.0:
            raise DebuggerError(f"interval must be between 0.001 and 1 second, got {interval!r}")
        with self.lock:
            e = self.entries.get(pid)
            if e is not None and (e.attached or e.done):
                return {"pid": pid, "profiling": e.attached, "since": e.since}
            if self._process_ended(pid):
                raise DebuggerError(f"process {pid} has ended: profiling covers what runs after profile_start")
            if e is None:
                self._evict()
            col = ProfileCollector(None if pid is None else {pid}, interval=float(interval))
            e = self.entries[pid] = _Profiled(pid, col.attach(self.dbg.engine.bus), now())
        return {"pid": pid, "profiling": True, "since": e.since}

    def adopt(self, pid: int, collector: ProfileCollector) -> None:
        """Serve process `pid`'s profile from a collector attached before it launched (a notebook
        run's `lab.run(..., profile=True)`): `profile` then reads the same profile the run has."""
        with self.lock:
            old = self.entries.get(pid)
            if old is None:
                self._evict()
            elif old.collector is not collector:
                self._detach(old)
            self.entries[pid] = _Profiled(pid, collector, now())

    def _entry(self, pid: int | None) -> tuple[_Profiled, bool]:
        """The collector that has `pid`'s profile, and whether it is the engine-wide one read for a pid."""
        e = self.entries.get(pid)
        if e is not None:
            return e, False
        whole = self.entries.get(None)
        if pid is not None and whole is not None:
            return whole, True
        what = "the engine" if pid is None else f"process {pid}"
        raise DebuggerError(
            f"{what} is not being profiled: send profile_start"
            + ("" if pid is None else f" with pid {pid}")
            + " first (profiling covers what runs after it starts)"
        )

    def read(self, pid: int | None, top: int, stop: bool = False) -> ProfileBody:
        if pid is not None and pid not in self.entries:  # a kept profile outlives its process's entry
            _check_pid(self.dbg, pid)
        top = _check_top(top)
        with self.lock:
            e, partial = self._entry(pid)
            if stop and partial:
                raise DebuggerError(
                    f"process {pid} has no profile of its own (the engine-wide one covers it): "
                    "profile_stop without a pid stops that one"
                )
            done = e.done
            if pid is not None and not done and self._process_ended(pid):
                done = e.collector.wait_ended(pid, timeout=1.0)
                if done and not partial:
                    e.done = True
                    self._detach(e)
            if stop and not partial:
                self._detach(e)
                del self.entries[pid]
            prof = e.collector.profile()
        return profile_body(prof, pid, e.since, e.attached, done, top, with_stacks=not partial)

    # --- the commands (the Debugger offers them as its own methods) ---------------------------
    def profile_start(self, pid: int | None = None, interval: float = 0.005) -> ProfilingBody:
        """Start the LIP profiler on process `pid` (None: every process of the engine, from now on).

        Raises:
            DebuggerError: `no process <pid>`; `process <pid> has ended: profiling covers what runs
                after profile_start`; `interval must be between 0.001 and 1 second`; `already
                profiling 16 running processes ...`.
        """
        return self.start(pid, interval)

    def profile(self, pid: int | None = None, top: int = 100) -> ProfileBody:
        """The profile so far of `pid` (or of the engine): per thread and per line, the `top`
        costliest lines and stacks. A process's own profile is final once `done` is true.

        Raises:
            DebuggerError: `no process <pid>`; `process <pid> is not being profiled: send profile_start ...`.
        """
        return self.read(pid, top)

    def profile_stop(self, pid: int | None = None, top: int = 100) -> ProfileBody:
        """Stop profiling `pid` (or the engine) and return its last profile."""
        return self.read(pid, top, stop=True)


# --- JSON both ways ---------------------------------------------------------------------------
def _times(t: Times) -> dict:
    return t.to_dict()


def profile_body(
    prof: Profile, pid: int | None, since: float, profiling: bool, done: bool, top: int, with_stacks: bool = True
) -> ProfileBody:
    """A `Profile` as the protocol's JSON (the threads and lines of `pid` only, when given)."""
    lines = [r for r in prof.lines if pid is None or r.pid == pid]
    costly = sorted(lines, key=lambda r: -r.times.total)[:top]
    stacks: list[ProfileStackBody] = []
    if with_stacks:
        for stack, t in sorted(prof.stacks.items(), key=lambda kv: -kv[1].total)[:top]:
            stacks.append({"frames": [list(f) for f in stack], **_times(t)})  # type: ignore[typeddict-item]
    return {
        "pid": pid,
        "profiling": profiling,
        "since": since,
        "done": done,
        "threads": [t.to_dict() for t in prof.threads if pid is None or t.pid == pid],  # type: ignore[misc]
        "lines": [r.to_dict() for r in costly],  # type: ignore[misc]
        "stacks": stacks,
        "pages": [list(p) for p in prof.pages],
        "batches": len(prof.batches),
        "lines_total": len(lines),
    }


def _times_from(d: dict) -> Times:
    return Times(**{k: d[k] for k in BUCKETS + COUNTS})


def profile_from_body(body: dict) -> Profile:
    """The `Profile` a `profile` body describes (no trace slices: the body does not carry them),
    for `table()`, `flame()` and `_repr_html_()` on the client side."""
    threads = [
        ThreadProfile(t["pid"], t["tid"], t["name"], t["t_start"], t["t_end"], _times_from(t), t.get("dropped", 0))
        for t in body["threads"]
    ]
    lines = [
        LineRow(r["pid"], r["tid"], r["file"], r["line"], r["function"], _times_from(r), r["inclusive"])
        for r in body["lines"]
    ]
    stacks = {tuple((f[0], int(f[1]), f[2]) for f in s["frames"]): _times_from(s) for s in body.get("stacks", [])}
    pages = [(float(p[0]), int(p[1]), int(p[2])) for p in body.get("pages", [])]
    return Profile(threads, lines, stacks, pages, [])


__all__ = ["MAX_PROFILES", "Profiling", "profile_body", "profile_from_body"]

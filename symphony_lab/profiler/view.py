"""A profile as the data every view draws (the notebook's inline table, the run widget's Profile
tab, the JupyterLab sidebar): the rows picked and sorted once here, in milliseconds, with each
line's source text; the front-ends only lay them out (extension/src/profile.ts)."""

from __future__ import annotations

import linecache
import os
from typing import Any, TypedDict

from .profile import BUCKET_COLOURS, BUCKETS, Profile


class ProfileRowView(TypedDict):
    pid: int
    tid: int
    file: str
    where: str  # "file.py:12"
    line: int
    function: str
    text: str  # the source line
    ms: dict[str, float]  # bucket -> ms, and "total"
    inclusive_ms: float
    preds: int
    tokens: int


class ProfileThreadView(TypedDict):
    pid: int
    tid: int
    name: str
    wall_ms: float
    ms: dict[str, float]
    preds: int
    tokens: int


class ProfileView(TypedDict):
    buckets: list[str]
    colours: dict[str, str]
    rows: list[ProfileRowView]  # the lines that took the most time first
    more: int  # rows left out
    threads: list[ProfileThreadView]


def _ms(times: Any) -> dict[str, float]:
    out = {b: round(getattr(times, b) * 1e3, 3) for b in BUCKETS}
    out["total"] = round(times.total * 1e3, 3)
    return out


def profile_view(prof: Profile, top: int = 40, tid: int | None = None) -> ProfileView:
    """The line table of `prof` (of one thread with `tid`), the `top` costliest lines first."""
    lines = [r for r in prof.lines if tid is None or r.tid == tid]
    lines = [r for r in lines if r.times.total > 0 or r.times.preds or r.times.syscalls]
    picked = sorted(lines, key=lambda r: (-r.times.total, r.pid, r.tid, r.line))[:top]
    rows: list[ProfileRowView] = [
        {
            "pid": r.pid,
            "tid": r.tid,
            "file": r.file,
            "where": f"{os.path.basename(r.file)}:{r.line}",
            "line": r.line,
            "function": r.function,
            "text": linecache.getline(r.file, r.line).strip(),
            "ms": _ms(r.times),
            "inclusive_ms": round(r.inclusive * 1e3, 3),
            "preds": r.times.preds,
            "tokens": r.times.tokens,
        }
        for r in picked
    ]
    threads: list[ProfileThreadView] = [
        {
            "pid": t.pid,
            "tid": t.tid,
            "name": t.name,
            "wall_ms": round(t.wall * 1e3, 3),
            "ms": _ms(t.times),
            "preds": t.times.preds,
            "tokens": t.times.tokens,
        }
        for t in prof.threads
        if tid is None or t.tid == tid
    ]
    return {
        "buckets": list(BUCKETS),
        "colours": dict(BUCKET_COLOURS),
        "rows": rows,
        "more": len(lines) - len(rows),
        "threads": threads,
    }


__all__ = ["ProfileRowView", "ProfileThreadView", "ProfileView", "profile_view"]

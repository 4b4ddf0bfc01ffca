"""The top-5 of every recorded pred of a process, read from the debugger's `recording` command."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .session import SessionError


class RecordedTops:
    """Per process, (tid, seq) -> top-5 [[token, p], …] of its recording, re-read only when the
    process made more preds (and, while it runs, at most once a second). `request` is the
    session's protocol command function."""

    def __init__(self, request: Callable[..., Any]) -> None:
        self._request = request
        self._top: dict[int, dict[tuple[int, int], list]] = {}  # pid -> (tid, seq) -> top5
        self._seen: dict[int, tuple[int, float]] = {}  # pid -> (preds when read, when)

    def tops(self, pid: int, preds: int, live: bool) -> dict[tuple[int, int], list]:
        """(tid, seq) -> top-5 for process `pid`, which has made `preds` preds so far."""
        seen = self._seen.get(pid)
        if seen is not None and (seen[0] == preds or (live and time.monotonic() - seen[1] < 1.0)):
            return self._top.get(pid, {})
        try:
            rec = self._request("recording", pid=pid, entries=True)
        except (SessionError, TimeoutError):
            self._seen[pid] = (preds, time.monotonic())
            return self._top.get(pid, {})
        top = {}
        for e in rec.get("entries", []):
            if e.get("call") == "pred" and e.get("top5"):
                top[(e["tid"], e["seq"])] = e["top5"]
        self._top[pid] = top
        self._seen[pid] = (preds, time.monotonic())
        return top


__all__ = ["RecordedTops"]

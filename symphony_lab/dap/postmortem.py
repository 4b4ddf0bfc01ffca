"""Exception breakpoints, post-mortem: the debugger stops LIPs at syscalls, not at a `raise`, so a
program that fails has ended by the time the editor hears of it. With the "error" or "limit"
filter on, the session stops once more on the failed program: its traceback is the stack, and
`exceptionInfo` names the error; continuing ends the session."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .backend import BackendError

log = logging.getLogger(__name__)

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>.+)$')
LIMIT_MARKERS = ("LimitExceeded", "limit of", "quota of")


@dataclass
class PostMortem:
    filter: str  # "error" | "limit"
    error_type: str
    message: str
    traceback: str
    tid: int = 1

    def frames(self) -> list[tuple[str, int, str]]:
        """(file, line, function) of the traceback, innermost first."""
        out = []
        for ln in self.traceback.splitlines():
            m = _FRAME.match(ln)
            if m:
                out.append((m["file"], int(m["line"]), m["fn"].strip()))
        return out[::-1]

    def info(self) -> dict:
        return {
            "exceptionId": self.error_type,
            "description": self.message,
            "breakMode": "always",
            "details": {"message": self.message, "typeName": self.error_type, "stackTrace": self.traceback},
        }


def failure_of(result: dict, request: Callable[..., Any], pid: int) -> PostMortem | None:
    """The post-mortem of a process `wait_process` says failed (None if it did not)."""
    if result.get("status") != "failed":
        return None
    message = str(result.get("error") or "the program failed")
    tb = ""
    try:
        for p in request("threads", include_done=True)["processes"]:
            if p["pid"] == pid:
                tb = p.get("traceback") or ""
    except (BackendError, TimeoutError) as e:  # the post-mortem still says what failed, without the stack
        log.warning("no traceback for process %s: %s", pid, e)
    last = next((ln for ln in reversed(tb.strip().splitlines()) if ln and not ln.startswith(" ")), "")
    m = re.search(r"failed: (\w+):", message)
    error_type = m.group(1) if m else (last.split(":", 1)[0].rsplit(".", 1)[-1] if ":" in last else "LIPError")
    kind = "limit" if any(k in message or k in last for k in LIMIT_MARKERS) else "error"
    return PostMortem(kind, error_type, message, tb)


__all__ = ["PostMortem", "failure_of"]

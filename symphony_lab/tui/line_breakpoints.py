"""Line breakpoints: a breakpoint on a source line is a `pred` breakpoint (or one on the syscall
named on that line) whose stops at other lines the session continues at once."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from .session import SessionError

_SYSCALL_ON_LINE = re.compile(r"\bsym\.(\w+)\s*\(")


def _same_line(f1: str | None, l1: int, f2: str | None, l2: int | None) -> bool:
    if l1 != l2:
        return False
    if not f1 or not f2:
        return True
    return os.path.realpath(f1) == os.path.realpath(f2)


class LineBreakpoints(dict[int, tuple[str | None, int, str]]):
    """The session's line breakpoints: debugger breakpoint id -> (file, line, call)."""

    def hit(self, ids: list[int], file: str | None, line: int | None) -> bool:
        """Whether a stop at `file:line` is on the line of one of the breakpoints `ids`."""
        return any(_same_line(f, ln, file, line) for f, ln, _ in (self[i] for i in ids))

    def toggle(self, request: Callable[..., Any], source: str | None, line: int | None) -> dict:
        """`DebuggerSession.toggle_breakpoint`, through the protocol command function `request`."""
        if line is None:
            plain = [
                b
                for b in request("breakpoints")["breakpoints"]
                if b["id"] not in self
                and b["call"] == "pred"
                and not b.get("temporary")
                and b.get("pid") is None
                and b.get("tid") is None
            ]
            if plain:
                for b in plain:
                    request("remove_breakpoint", id=b["id"])
                return {"removed": [b["id"] for b in plain]}
            return request("set_breakpoint", call="pred")
        for bid, (f, ln, _) in list(self.items()):
            if ln == line and (f == source or f is None or source is None):
                del self[bid]
                try:
                    request("remove_breakpoint", id=bid)
                except SessionError:
                    pass
                return {"removed": bid}
        text = ""
        if source:
            import linecache

            text = linecache.getline(source, line)
        m = _SYSCALL_ON_LINE.search(text)
        call = m.group(1) if m else "pred"
        bp = request("set_breakpoint", call=call)
        self[bp["id"]] = (source, line, call)
        return {"set": bp["id"], "call": call, "line": line}


__all__ = ["LineBreakpoints"]

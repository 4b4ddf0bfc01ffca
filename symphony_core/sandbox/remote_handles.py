"""The handles a sandboxed LIP holds, each a proxy of one in the engine: `RemoteKV` (a KV
file, crossing the boundary as an integer id) and `RemoteThreadHandle` (what `sym.spawn` gives).

This module runs inside the sandbox: it imports no engine internals.
"""

from __future__ import annotations

import threading
from typing import Any


class RemoteKV:
    """A KV handle whose file lives in the engine; `.len` is kept current by every call."""

    __slots__ = ("_sym", "hid", "len", "path", "mode", "closed", "__weakref__")

    def __init__(self, sym: Any, info: dict) -> None:
        self._sym = sym
        self.hid = int(info["h"])
        self.closed = False
        self._update(info)

    def _update(self, info: dict) -> None:
        self.len = int(info.get("len", 0))
        self.path = info.get("path")
        self.mode = info.get("mode", "w")

    def _stat(self) -> dict:
        return self._sym._call("kv_stat", {"h": self.hid})

    @property
    def tokens(self) -> list[int]:
        return self._stat()["tokens"]

    @property
    def positions(self) -> list[int]:
        return self._stat()["positions"]

    @property
    def pages(self) -> list[int]:
        return self._stat()["pages"]

    @property
    def evicted(self) -> bool:
        return self._stat()["evicted"]

    @property
    def readonly(self) -> bool:
        return self.mode == "r"

    def __len__(self) -> int:
        return self.len

    def describe(self) -> str:
        return self.path or f"<anonymous file, handle {self.hid}>"

    def __repr__(self) -> str:
        return f"KV({self.describe()}, len={self.len}, {'closed' if self.closed else self.mode})"


class RemoteThreadHandle:
    def __init__(self, sym: Any, wtid: int, tid: int, thread: threading.Thread, box: dict) -> None:
        self._sym, self._wtid, self._tid, self._thread, self._box = sym, wtid, tid, thread, box

    tid = property(lambda self: self._tid)

    def join(self, timeout: float | None = None) -> Any:
        self._sym._call("join", {"t": self._wtid, "timeout": timeout})
        self._thread.join(timeout)
        if "error" in self._box:
            raise self._box["error"]
        return self._box.get("result")

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()


__all__ = ["RemoteKV", "RemoteThreadHandle"]

"""What the server remembers about each process it launched: owner, messages, output, outcome.

A drain thread per process moves what the LIP `send`s into the record, where any number of
HTTP pollers and WebSocket streams read it by index; asyncio waiters are woken through their
event loop. Finished records are kept a while for late `result` calls, then dropped.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from ..sched.process import Process

MAX_KEPT_MESSAGES = 50_000
KEEP_FINISHED_S = 600.0
KEEP_FINISHED_PER_USER = 500


def _json_or_repr(v: Any) -> Any:
    try:
        json.dumps(v, allow_nan=False)
        return v
    except (TypeError, ValueError):
        return repr(v)


class ProcessRecord:
    def __init__(self, proc: Process, user: str, kind: str, sandboxed: bool, loop: asyncio.AbstractEventLoop | None) -> None:
        self.proc, self.user, self.kind, self.sandboxed = proc, user, kind, sandboxed
        self.pid = proc.pid
        self.loop = loop
        self.messages: list[Any] = []
        self.base = 0  # index of messages[0] (old ones dropped past MAX_KEPT_MESSAGES)
        self.output: list[dict] = []  # print() output of a sandboxed program
        self.output_bytes = 0
        self.done = False
        self.finished_at: float | None = None
        self.lock = threading.Lock()
        self._waiters: set[asyncio.Future] = set()
        self._thread = threading.Thread(target=self._drain, name=f"record-{proc.pid}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _drain(self) -> None:
        for m in self.proc.messages():
            with self.lock:
                self.messages.append(_json_or_repr(m))
                if len(self.messages) > MAX_KEPT_MESSAGES:
                    drop = len(self.messages) - MAX_KEPT_MESSAGES
                    del self.messages[:drop]
                    self.base += drop
            self._notify()
        self.proc.wait()
        with self.lock:
            self.done = True
            self.finished_at = time.monotonic()
        self._notify()

    def add_output(self, stream: str, text: str) -> None:
        with self.lock:
            if self.output_bytes > 1 << 20:
                return
            self.output_bytes += len(text)
            self.output.append({"stream": stream, "text": text})
        self._notify()

    # --- readers ---------------------------------------------------------------------------------
    def messages_since(self, i: int) -> tuple[list[Any], int]:
        with self.lock:
            start = max(i, self.base)
            out = self.messages[start - self.base :]
            return out, self.base + len(self.messages)

    def output_since(self, i: int) -> tuple[list[dict], int]:
        with self.lock:
            return self.output[i:], len(self.output)

    def _notify(self) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._wake)
            except RuntimeError:
                pass

    def _wake(self) -> None:
        for f in list(self._waiters):
            if not f.done():
                f.set_result(None)
        self._waiters.clear()

    async def changed(self, timeout: float | None = None) -> None:
        """Wait (in the event loop) until a message, output or the end arrives."""
        f = asyncio.get_running_loop().create_future()
        self._waiters.add(f)
        try:
            await asyncio.wait_for(f, timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            self._waiters.discard(f)

    def outcome(self) -> dict:
        """Status and result (or error) as JSON."""
        p = self.proc
        d: dict[str, Any] = {"pid": p.pid, "status": p.status}
        if not p.done:
            return d
        err = p.error
        if err is None:
            d["result"] = _json_or_repr(p.result(0))
        else:
            cause = err.__cause__ if err.__cause__ is not None and err.__cause__ is not err else None
            etype = getattr(err, "error_type", None) or type(cause if cause is not None else err).__name__
            d["error"] = {"type": etype,
                          "message": str(err), "traceback": getattr(err, "traceback_text", "")[-20000:]}
        return d

    def summary(self) -> dict:
        s = self.proc.summary()
        s.update({"kind": self.kind, "sandboxed": self.sandboxed, "messages": self.base + len(self.messages)})
        return s


class Registry:
    def __init__(self) -> None:
        self.records: dict[int, ProcessRecord] = {}
        self.lock = threading.Lock()

    def add(self, r: ProcessRecord) -> None:
        with self.lock:
            self.records[r.pid] = r
        r.start()
        self.prune()

    def get(self, pid: int, user: str) -> ProcessRecord | None:
        r = self.records.get(pid)
        return r if r is not None and r.user == user else None

    def of_user(self, user: str) -> list[ProcessRecord]:
        with self.lock:
            return [r for r in self.records.values() if r.user == user]

    def live(self, user: str | None = None) -> int:
        with self.lock:
            return sum(1 for r in self.records.values() if not r.proc.done and (user is None or r.user == user))

    def all(self) -> list[ProcessRecord]:
        with self.lock:
            return list(self.records.values())

    def prune(self) -> None:
        now = time.monotonic()
        with self.lock:
            by_user: dict[str, list[ProcessRecord]] = {}
            for r in self.records.values():
                if r.done:
                    by_user.setdefault(r.user, []).append(r)
            for rs in by_user.values():
                rs.sort(key=lambda r: r.finished_at or 0)
                excess = len(rs) - KEEP_FINISHED_PER_USER
                for i, r in enumerate(rs):
                    if i < excess or (r.finished_at is not None and now - r.finished_at > KEEP_FINISHED_S):
                        self.records.pop(r.pid, None)

"""What the server remembers about each process it launched: owner, messages, output, outcome.

A drain thread per process moves what the LIP `send`s into the record, where any number of
HTTP pollers and WebSocket streams read it by index; asyncio waiters are woken through their
event loop. Finished records are kept a while for late `result` calls, then dropped (and the
runtime forgets the process).

Message memory is bounded both ways. Out (what a LIP sends): one message at most
MAX_MESSAGE_BYTES; a process keeps at most MAX_KEPT_BYTES, of which messages already handed
to a reader are dropped first; a user's records together at most MAX_USER_KEPT_BYTES, of which
finished processes' messages are dropped first. In (what clients post): at most
MAX_UNREAD_IN messages / MAX_UNREAD_IN_BYTES a process has not `recv`d yet, MAX_USER_UNREAD_BYTES
per user. Past a bound the sending process stops with a `LimitExceeded` naming it (out) or the
post is refused with a 429 (in).
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from ..sched.process import LimitExceeded, Process
from .user_budget import DEFAULT_USER_MEMORY_MB, UserBudget

MAX_KEPT_MESSAGES = 50_000
MAX_MESSAGE_BYTES = 1 << 20
MAX_KEPT_BYTES = 16 << 20
MAX_USER_KEPT_BYTES = 64 << 20
MAX_UNREAD_IN = 256
MAX_UNREAD_IN_BYTES = 16 << 20
MAX_USER_UNREAD_BYTES = 64 << 20
OUTPUT_ENTRY_COST = 128  # what one print's entry costs beyond its text, counted against the 1 MiB
KEEP_FINISHED_S = 600.0
KEEP_FINISHED_PER_USER = 500


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _json_sized(v: Any) -> tuple[Any, int]:
    """The value as kept (JSON, or its repr) and its size in bytes as JSON."""
    try:
        return v, len(json.dumps(v, allow_nan=False))
    except (TypeError, ValueError):
        r = repr(v)
        return r, len(r) + 2


def _json_text(v: Any) -> str:
    """A message as kept: its JSON text (or its repr's), whose size is what the bounds count —
    the Python objects of many small items cost many times it (a list of one-letter strings, 14x)."""
    try:
        return json.dumps(v, allow_nan=False)
    except (TypeError, ValueError):
        return json.dumps(repr(v))


def _json_or_repr(v: Any) -> Any:
    return _json_sized(v)[0]


def _trim_heap() -> None:
    """Hand freed heap back to the OS (glibc keeps it otherwise)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


class ProcessRecord:
    def __init__(
        self,
        proc: Process,
        user: str,
        kind: str,
        sandboxed: bool,
        loop: asyncio.AbstractEventLoop | None,
        usage: UserBytes | None = None,
    ) -> None:
        self.proc, self.user, self.kind, self.sandboxed = proc, user, kind, sandboxed
        self.pid = proc.pid
        self.loop = loop
        self.usage = usage or UserBytes()
        self.budget: UserBudget | None = None  # the user's server memory in all (user_budget.py)
        self.messages: list[Any] = []
        self.sizes: collections.deque[int] = collections.deque()  # bytes of each kept message
        self.kept_bytes = 0
        self.base = 0  # index of messages[0] (old ones dropped past the bounds)
        self.handed_out = 0  # messages below this index have been given to a reader
        self.posted: collections.deque[int] = collections.deque()  # bytes of the messages posted, newest last
        self.output: list[dict] = []  # print() output of a sandboxed program
        self.output_bytes = 0
        self.done = False
        self.cut_by_drain = False  # still running when the shutdown drain ran out, so cancelled by it
        self.finished_at: float | None = None
        self.lock = threading.Lock()
        self._waiters: set[asyncio.Future] = set()
        self._thread = threading.Thread(target=self._drain, name=f"record-{proc.pid}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _drain(self) -> None:
        for m in self.proc.messages():
            v = _json_text(m)
            n = len(v)
            if n > MAX_MESSAGE_BYTES:
                self._stop(f"sent a message of {_mib(n)}; a message may be at most {_mib(MAX_MESSAGE_BYTES)}")
                continue
            with self.lock:
                self.messages.append(v)
                self.sizes.append(n)
                self.kept_bytes += n
                self.usage.add(self.user, n)
                if len(self.messages) > MAX_KEPT_MESSAGES or self.kept_bytes > MAX_KEPT_BYTES:
                    self._drop_oldest(self.handed_out - self.base)  # only what a reader already has
                over_count = len(self.messages) > MAX_KEPT_MESSAGES
                over_process = self.kept_bytes > MAX_KEPT_BYTES
            if over_count:
                self._stop(
                    f"holds {len(self.messages)} messages no client has read; a process may hold at most "
                    f"{MAX_KEPT_MESSAGES} (read them with GET /v1/processes/{self.pid}/messages or the WebSocket)"
                )
            elif over_process:
                self._stop(
                    f"holds {_mib(self.kept_bytes)} of messages no client has read; a process may hold at most "
                    f"{_mib(MAX_KEPT_BYTES)} (read them with GET /v1/processes/{self.pid}/messages or the WebSocket)"
                )
            elif self.usage.of(self.user) > MAX_USER_KEPT_BYTES and not self.usage.relieve(self.user):
                self._stop(
                    f"user {self.user!r} holds {_mib(self.usage.of(self.user))} of unread messages in all; "
                    f"a user may hold at most {_mib(MAX_USER_KEPT_BYTES)}"
                )
            elif self._over_budget():
                assert self.budget is not None
                self._stop(self.budget.refusal(self.user, "kept messages"))
            with self.lock:  # what is over a bound is not kept, even from a process that has already ended
                while self.messages and (
                    self.kept_bytes > MAX_KEPT_BYTES
                    or self.usage.of(self.user) > MAX_USER_KEPT_BYTES
                    or len(self.messages) > MAX_KEPT_MESSAGES
                    or (self.budget is not None and self.budget.over(self.user))
                ):
                    self._drop_oldest(1)
            self._notify()
        self.proc.wait()
        with self.lock:
            self.done = True
            self.finished_at = time.monotonic()
        self._notify()

    def _over_budget(self) -> bool:
        return self.budget is not None and self.budget.over(self.user) and not self.usage.relieve(self.user)

    def _stop(self, why: str) -> None:
        if not self.proc.done:
            self.proc.kill(LimitExceeded(f"process {self.pid} ({self.proc.name}) {why}"))

    def _drop_oldest(self, k: int) -> None:
        """Forget the `k` oldest kept messages (call with the lock held)."""
        k = max(0, min(k, len(self.messages)))
        if not k:
            return
        freed = sum(self.sizes.popleft() for _ in range(k))
        del self.messages[:k]
        self.base += k
        self.kept_bytes -= freed
        self.usage.add(self.user, -freed)

    def release_messages(self) -> int:
        """Drop every kept message (a finished record whose user is over the bound); bytes freed."""
        with self.lock:
            freed = self.kept_bytes
            self._drop_oldest(len(self.messages))
            return freed

    def check_post(self, size: int) -> None:
        """Refuse (LimitExceeded) a message to the LIP past the bounds on what it has not recv'd."""
        with self.lock:
            unread = self.proc.unread()
            while len(self.posted) > unread:
                self.posted.popleft()
            pending = sum(self.posted)
            if unread >= MAX_UNREAD_IN or pending + size > MAX_UNREAD_IN_BYTES:
                raise LimitExceeded(
                    f"process {self.pid} has {unread} message(s) ({_mib(pending)}) it has not recv'd; "
                    f"a process may have at most {MAX_UNREAD_IN} / {_mib(MAX_UNREAD_IN_BYTES)} unread"
                )
            self.posted.append(size)

    def unread_bytes(self) -> int:
        with self.lock:
            unread = self.proc.unread()
            return sum(list(self.posted)[-unread:]) if unread else 0

    def add_output(self, stream: str, text: str) -> None:
        with self.lock:
            if self.output_bytes > 1 << 20:
                return
            n = len(text) + OUTPUT_ENTRY_COST
            refused: str | None = None
            if self.budget is not None:
                try:
                    self.budget.charge(self.user, "prints", n, "a print")
                except LimitExceeded as e:
                    self.output_bytes = (1 << 20) + 1  # nothing more is kept of this process's output
                    refused = str(e)
            if refused is None:
                self.output_bytes += n
                self.output.append({"stream": stream, "text": text})
        if refused is not None:
            self._stop(refused)
        self._notify()

    def release_output(self) -> None:
        """Forget the kept print output (the record is dropped) and give its bytes back to the budget."""
        with self.lock:
            charged = sum(len(o["text"]) + OUTPUT_ENTRY_COST for o in self.output)
            self.output = []
        if self.budget is not None:
            self.budget.release(self.user, "prints", charged)

    # --- readers ---------------------------------------------------------------------------------
    def sent(self) -> int:
        """How many messages the LIP has sent so far (read by no one yet or not)."""
        with self.lock:
            return self.base + len(self.messages)

    def messages_since(self, i: int) -> tuple[list[Any], int]:
        with self.lock:
            start = max(i, self.base)
            out = self.messages[start - self.base :]
            nxt = self.base + len(self.messages)
            self.handed_out = max(self.handed_out, nxt)
        return [json.loads(t) for t in out], nxt

    def dropped_before(self, i: int) -> int:
        """How many messages from index `i` on are no longer kept (a reader asking from `i` lost them)."""
        with self.lock:
            return max(0, self.base - i)

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
        except TimeoutError:
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
            d["error"] = {"type": etype, "message": str(err), "traceback": getattr(err, "traceback_text", "")[-20000:]}
        return d

    def summary(self) -> dict:
        s = self.proc.summary()
        s.update({"kind": self.kind, "sandboxed": self.sandboxed, "messages": self.base + len(self.messages)})
        return s


class UserBytes:
    """Bytes of kept messages per user, over all their records."""

    def __init__(self, relieve: Callable[[str], bool] = lambda user: False) -> None:
        self._bytes: dict[str, int] = {}
        self._lock = threading.Lock()
        self._relieve = relieve

    def add(self, user: str, n: int) -> None:
        with self._lock:
            self._bytes[user] = self._bytes.get(user, 0) + n

    def of(self, user: str) -> int:
        return self._bytes.get(user, 0)

    def relieve(self, user: str) -> bool:
        """Free finished processes' messages until `user` is under the bound; True if it is."""
        return self._relieve(user)


class Registry:
    def __init__(
        self,
        on_drop: Callable[[int], None] = lambda pid: None,
        keep_finished_s: float = KEEP_FINISHED_S,
        user_memory_bytes: int = DEFAULT_USER_MEMORY_MB << 20,
        name_bytes: Callable[[str], int] = lambda user: 0,
    ) -> None:
        self.records: dict[int, ProcessRecord] = {}
        self.lock = threading.Lock()
        self.on_drop = on_drop  # the runtime forgets the process too
        self.keep_finished_s = keep_finished_s
        self.usage = UserBytes(self._relieve)
        self.budget = UserBudget(user_memory_bytes, messages=self.usage.of, names=name_bytes)

    def _relieve(self, user: str) -> bool:
        with self.lock:
            done = sorted(
                (r for r in self.records.values() if r.user == user and r.done), key=lambda r: r.finished_at or 0
            )
        for r in done:
            if self.usage.of(user) <= MAX_USER_KEPT_BYTES and not self.budget.over(user):
                break
            r.release_messages()
        return self.usage.of(user) <= MAX_USER_KEPT_BYTES and not self.budget.over(user)

    def unread_bytes(self, user: str) -> int:
        """Bytes posted to `user`'s live processes that they have not recv'd."""
        return sum(r.unread_bytes() for r in self.of_user(user) if not r.proc.done)

    def post(self, r: ProcessRecord, data: Any) -> None:
        """Deliver a client's message to the LIP's `recv`, within the bounds on unread messages."""
        size = _json_sized(data)[1]
        pending = self.unread_bytes(r.user)
        if pending + size > MAX_USER_UNREAD_BYTES:
            raise LimitExceeded(
                f"user {r.user!r} has {_mib(pending)} of messages their processes have not recv'd; "
                f"a user may have at most {_mib(MAX_USER_UNREAD_BYTES)} unread"
            )
        r.check_post(size)
        r.proc.send(data)

    def add(self, r: ProcessRecord) -> None:
        r.usage = self.usage
        r.budget = self.budget
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
        dropped: list[ProcessRecord] = []
        with self.lock:
            by_user: dict[str, list[ProcessRecord]] = {}
            for r in self.records.values():
                if r.done:
                    by_user.setdefault(r.user, []).append(r)
            for rs in by_user.values():
                rs.sort(key=lambda r: r.finished_at or 0)
                excess = len(rs) - KEEP_FINISHED_PER_USER
                for i, r in enumerate(rs):
                    if i < excess or (r.finished_at is not None and now - r.finished_at > self.keep_finished_s):
                        dropped.append(self.records.pop(r.pid))
        for r in dropped:
            r.release_messages()
            r.release_output()
            self.on_drop(r.pid)
        if dropped:
            _trim_heap()

"""Breakpoints on system calls, with the conditions a LIP author asks for.

A breakpoint names a syscall (`pred`, `kv_fork`, … or `*` for any) and may add conditions:
the process, the thread, the KV file (id or path), the input tokens (ids it must contain, text
it must contain, or — in-process only — any Python predicate), and a hit count. As in the
Debug Adapter Protocol, the hit counter advances only when every other condition holds, and
`hit_mode` says how the count is read: `"=="` stops exactly on the Nth hit (and never again),
`">="` on the Nth and every later one, `"%"` on every Nth.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import DebuggerError

_ids = itertools.count(1)

HIT_MODES = ("==", ">=", "%")
WHEN = ("before", "after")


log = logging.getLogger(__name__)


@dataclass(eq=False)
class Breakpoint:
    call: str = "pred"
    pid: int | None = None
    tid: int | None = None
    hit_count: int | None = None
    hit_mode: str = "=="
    file: int | str | None = None  # KV file id, or its path (named files)
    tokens_contain: list[int] | None = None  # every one of these ids is among the input tokens
    text_contains: str | None = None  # the input tokens' text contains this
    where: Callable[[list[int]], bool] | None = None  # Python predicate on the input tokens (in-process only)
    when: str = "before"  # stop before the call runs, or after it returns (showing its result)
    enabled: bool = True
    temporary: bool = False  # removed after its first stop (replay's "run to step k")
    reason: str = "breakpoint"  # the stop's reason ("step_back", "replay": a replay's target)
    id: int = field(default_factory=lambda: next(_ids))
    hits: int = 0
    where_error: str | None = None  # the last exception the `where` predicate raised (it then does not stop)

    def __post_init__(self) -> None:
        if not isinstance(self.call, str) or not self.call:
            raise ValueError(f"breakpoint call must be a syscall name (or '*'), got {self.call!r}")
        if self.hit_mode not in HIT_MODES:
            raise ValueError(f"breakpoint hit_mode must be one of {HIT_MODES}, got {self.hit_mode!r}")
        if self.when not in WHEN:
            raise ValueError(f"breakpoint 'when' must be one of {WHEN}, got {self.when!r}")
        if self.hit_count is not None and (not isinstance(self.hit_count, int) or self.hit_count < 1):
            raise ValueError(f"breakpoint hit_count must be an int >= 1, got {self.hit_count!r}")
        if self.where is not None and not callable(self.where):
            raise ValueError("breakpoint 'where' must be a callable taking the input token ids")

    @property
    def needs_tokens(self) -> bool:
        return self.tokens_contain is not None or self.text_contains is not None or self.where is not None

    def matches(
        self,
        pid: int,
        tid: int,
        call: str,
        args: dict,
        tokens: Callable[[], list[int] | None],
        detok: Callable[[list[int]], str],
    ) -> bool:
        """Every condition except the hit count (the caller counts the hit and asks `hit_ok`)."""
        if not self.enabled:
            return False
        if self.call != "*" and self.call != call:
            return False
        if self.pid is not None and self.pid != pid:
            return False
        if self.tid is not None and self.tid != tid:
            return False
        if self.file is not None:
            if isinstance(self.file, int):
                if args.get("file") != self.file:
                    return False
            elif args.get("kv") != self.file and args.get("path") != self.file:
                return False
        if self.needs_tokens:
            toks = tokens()
            if toks is None:
                return False
            if self.tokens_contain is not None and not set(self.tokens_contain) <= set(toks):
                return False
            if self.text_contains is not None and self.text_contains not in detok(toks):
                return False
            if self.where is not None:
                try:
                    if not self.where(toks):
                        return False
                except Exception as e:  # the user's predicate: it failing means no stop, and says why
                    if self.where_error is None:
                        log.warning(
                            "breakpoint %s: its `where` predicate raised; it does not stop", self.id, exc_info=True
                        )
                    self.where_error = f"{type(e).__name__}: {e}"
                    return False
        return True

    def hit_ok(self) -> bool:
        if self.hit_count is None:
            return True
        if self.hit_mode == "==":
            return self.hits == self.hit_count
        if self.hit_mode == ">=":
            return self.hits >= self.hit_count
        return self.hits % self.hit_count == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "call": self.call,
            "pid": self.pid,
            "tid": self.tid,
            "hit_count": self.hit_count,
            "hit_mode": self.hit_mode,
            "file": self.file,
            "tokens_contain": self.tokens_contain,
            "text_contains": self.text_contains,
            "where": None if self.where is None else getattr(self.where, "__name__", "predicate"),
            "when": self.when,
            "enabled": self.enabled,
            "temporary": self.temporary,
            "hits": self.hits,
            "where_error": self.where_error,
        }


class BreakpointTable:
    """The debugger's breakpoints by id, under a lock of their own: the breakpoint commands and
    the kernel hook's question "which breakpoints does this call hit?"."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bps: dict[int, Breakpoint] = {}

    def __len__(self) -> int:
        return len(self._bps)

    def set_breakpoint(self, call: str = "pred", **conditions: Any) -> dict:
        """Add a breakpoint; conditions: pid, tid, hit_count, hit_mode, file, tokens_contain,
        text_contains, where (a Python predicate, in-process only), when ("before"/"after").

        Returns:
            The breakpoint as a dict: `{id, call, …conditions, enabled, hits}`.

        Raises:
            ValueError: `breakpoint call must be a syscall name (or '*'), got <x>`; `breakpoint
                hit_mode must be one of …`; `breakpoint 'when' must be one of …`; `breakpoint
                hit_count must be an int >= 1, got <x>`; `breakpoint 'where' must be a callable
                taking the input token ids`.
        """
        bp = Breakpoint(call=call, **conditions)
        with self._lock:
            self._bps[bp.id] = bp
        return bp.to_dict()

    def remove_breakpoint(self, id: int) -> dict:
        """Remove breakpoint `id`; `{"removed": id}`.

        Raises:
            DebuggerError: `no breakpoint <id>`.
        """
        with self._lock:
            bp = self._bps.pop(id, None)
        if bp is None:
            raise DebuggerError(f"no breakpoint {id}")
        return {"removed": id}

    def enable_breakpoint(self, id: int, enabled: bool = True) -> dict:
        """Enable or disable breakpoint `id`; returns the breakpoint.

        Raises:
            DebuggerError: `no breakpoint <id>`.
        """
        with self._lock:
            bp = self._bps.get(id)
            if bp is None:
                raise DebuggerError(f"no breakpoint {id}")
            bp.enabled = bool(enabled)
            return bp.to_dict()

    def clear_breakpoints(self) -> dict:
        """Remove every breakpoint; `{"removed": n}`."""
        with self._lock:
            n = len(self._bps)
            self._bps.clear()
        return {"removed": n}

    def breakpoints(self) -> dict:
        """`{"breakpoints": [...]}`: every breakpoint with its hit count."""
        with self._lock:
            return {"breakpoints": [b.to_dict() for b in self._bps.values()]}

    def hit(
        self, pid: int, tid: int, call: str, args: dict, tokens: Callable, detokenize: Callable
    ) -> tuple[list[int], list[int], str]:
        """Count a hit on every breakpoint this call matches; the ids that stop it before the
        call and after it (a temporary one that stops is gone), and the stop's reason:
        "breakpoint", or a replay target's own ("step_back", "replay") when only it stops."""
        before: list[int] = []
        after: list[int] = []
        why: set[str] = set()
        with self._lock:
            for bp in list(self._bps.values()):
                if bp.matches(pid, tid, call, args, tokens, detokenize):
                    bp.hits += 1
                    if bp.hit_ok():
                        (before if bp.when == "before" else after).append(bp.id)
                        why.add(bp.reason)
                        if bp.temporary:
                            self._bps.pop(bp.id, None)
        return before, after, why.pop() if len(why) == 1 else "breakpoint"

    def rebind(self, old_pid: int, new_pid: int) -> None:
        """Breakpoints bound to process `old_pid` move to `new_pid` (a restart), hit counts reset."""
        with self._lock:
            for bp in self._bps.values():
                if bp.pid == old_pid:
                    bp.pid, bp.hits = new_pid, 0

    def drop_temporary(self, pid: int) -> None:
        """Process `pid` ended: its temporary breakpoints go."""
        with self._lock:
            for bp in [b for b in self._bps.values() if b.temporary and b.pid == pid]:
                del self._bps[bp.id]

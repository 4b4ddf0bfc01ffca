"""Server memory charged per user, as one budget over everything a user's programs make the server hold.

Four things count, summed over all of a user's processes: the messages their records keep (as
JSON text, records.py), the print output kept for their clients (each entry's text plus
OUTPUT_ENTRY_COST), the logits of a sandboxed `pred` while the server holds them, and the paths
of the named KV files they own (each path's bytes plus NAME_ENTRY_COST). The per-kind bounds
(64 MiB of messages, 1 MiB of prints per process, 64 MiB of logits per call, 1,024 names) still
hold; this one bounds their sum, so many programs of one user cannot add up past it. The next
allocation that would pass it is refused with a `LimitExceeded` naming the budget.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..sched.process import LimitExceeded

DEFAULT_USER_MEMORY_MB = 128
NAME_ENTRY_COST = 256  # what one named file's entry costs the server beyond its path's bytes
HELD_KINDS = ("prints", "logits")  # charged and released here; messages and names are read from their owners


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


class UserBudget:
    """`limit_bytes` per user over messages (`messages(user)`: bytes kept), prints, logits and KV
    names (`names(user)`: bytes of the paths the user owns)."""

    def __init__(
        self,
        limit_bytes: int,
        messages: Callable[[str], int] = lambda user: 0,
        names: Callable[[str], int] = lambda user: 0,
    ) -> None:
        self.limit = limit_bytes
        self._messages = messages
        self._names = names
        self._held: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    def used(self, user: str) -> dict[str, int]:
        held = self._held.get(user, {})
        return {
            "messages": self._messages(user),
            "prints": held.get("prints", 0),
            "logits": held.get("logits", 0),
            "names": self._names(user),
        }

    def total(self, user: str) -> int:
        return sum(self.used(user).values())

    def over(self, user: str) -> bool:
        return self.total(user) > self.limit

    def refusal(self, user: str, what: str, n: int = 0) -> str:
        used = self.used(user)
        parts = ", ".join(f"{k} {_mib(v)}" for k, v in used.items())
        extra = f" ({what} would add {_mib(n)})" if n else f" ({what})"
        return (
            f"user {user!r} holds {_mib(sum(used.values()))} of server memory ({parts}){extra}; a user may hold "
            f"at most {_mib(self.limit)} in all (the per-user server memory budget, --user-memory-mb)"
        )

    def charge(self, user: str, kind: str, n: int, what: str) -> None:
        """Count `n` more bytes of `kind` (one of HELD_KINDS) for `user`, or raise LimitExceeded."""
        with self._lock:
            if n > 0 and self.total(user) + n > self.limit:
                raise LimitExceeded(self.refusal(user, what, n))
            held = self._held.setdefault(user, {})
            held[kind] = held.get(kind, 0) + n

    def release(self, user: str, kind: str, n: int) -> None:
        with self._lock:
            held = self._held.get(user)
            if held is not None:
                held[kind] = max(0, held.get(kind, 0) - n)
                if not any(held.values()):
                    del self._held[user]

    def hold(self, user: str, kind: str, n: int, what: str) -> Callable[[], None]:
        """Charge now; the returned function releases the charge (once)."""
        self.charge(user, kind, n, what)
        done = [False]

        def release() -> None:
            if not done[0]:
                done[0] = True
                self.release(user, kind, n)

        return release


__all__ = ["DEFAULT_USER_MEMORY_MB", "NAME_ENTRY_COST", "UserBudget"]

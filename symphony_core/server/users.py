"""Users, their API tokens and their quotas (processes, KV pages, tokens per second).

Tokens come from a JSON file (`--users-file`) and/or `--user NAME:TOKEN` flags:

    {"users": [{"name": "alice", "token": "s3cret", "max_processes": 16, "max_pages": 2048,
                "tokens_per_s": 4000, "trusted": false}]}

A user's programs run as that user inside the engine, so the KV namespaces keep them apart.
`trusted` users may ask for a program to run in-process (no sandbox).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engine import Engine

import hmac
import json
import re
import threading
import time
from dataclasses import dataclass, field, fields

from ..errors import SymphonyError
from ..sched.process import LimitExceeded

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class QuotaExceeded(SymphonyError):
    """A user asked for more than their quota allows (HTTP 429)."""


@dataclass
class User:
    name: str
    token: str | None = None
    max_processes: int = 64  # live processes at once
    max_pages: int | None = None  # KV pages held at once (open files + named files)
    tokens_per_s: float | None = None  # tokens fed to pred, all processes together
    trusted: bool = False  # may run programs in-process, without the sandbox
    cpu_seconds: int | None = None  # sandbox limits for this user's programs (None: server default)
    memory_mb: int | None = None

    @classmethod
    def from_dict(cls, d: dict) -> User:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"user entry has unknown field(s) {sorted(unknown)}; known: {sorted(known)}")
        u = cls(**d)
        if not isinstance(u.name, str) or not _NAME.match(u.name):
            raise ValueError(f"user name {u.name!r} must be 1-64 letters, digits, '_', '.' or '-'")
        return u


def load_users(path: str | None, flags: list[str] | None) -> dict[str, User]:
    """Users from a JSON file and NAME:TOKEN flags; an empty dict means no authentication."""
    users: dict[str, User] = {}
    if path:
        with open(path) as f:
            data = json.load(f)
        entries = data.get("users", []) if isinstance(data, dict) else data
        for e in entries:
            u = User.from_dict(e)
            users[u.name] = u
    for flag in flags or []:
        name, sep, token = flag.partition(":")
        if not sep or not token:
            raise ValueError(f"--user expects NAME:TOKEN, got {flag!r}")
        u = User.from_dict({"name": name, "token": token})
        users[u.name] = u
    tokens = [u.token for u in users.values()]
    if any(not t for t in tokens):
        raise ValueError("every user needs a token")
    if len(set(tokens)) != len(tokens):
        raise ValueError("two users share a token")
    return users


class Users:
    def __init__(self, users: dict[str, User]) -> None:
        self.users = users
        self.open = not users  # no users configured: everyone is "local" (loopback only)
        self.local = User("local", trusted=False)

    def authenticate(self, token: str | None) -> User | None:
        if self.open:
            return self.local
        if not token:
            return None
        for u in self.users.values():
            if u.token and hmac.compare_digest(u.token.encode(), token.encode()):
                return u
        return None


class TokenBucket:
    """`rate` tokens per second, bursts up to `burst` (default: one second's worth); `acquire`
    waits (it throttles, never fails)."""

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(rate, 1.0))
        self.level = self.burst
        self.t = time.monotonic()
        self.lock = threading.Lock()

    def acquire(self, n: int, check=lambda: None) -> float:
        """Take `n` tokens; returns the seconds waited. A call larger than the burst runs into debt."""
        with self.lock:
            now = time.monotonic()
            self.level = min(self.burst, self.level + (now - self.t) * self.rate)
            self.t = now
            self.level -= n
            wait = -self.level / self.rate if self.level < 0 else 0.0
        end = time.monotonic() + wait
        while time.monotonic() < end:
            check()
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))
        return wait


@dataclass
class QuotaKeeper:
    """Enforces per-user quotas where the engine has no per-user notion of its own."""

    engine: Engine
    users: Users
    buckets: dict[str, TokenBucket] = field(default_factory=dict)
    _pages_cache: dict[str, tuple[float, int]] = field(default_factory=dict)

    def user(self, name: str) -> User:
        return self.users.users.get(name) or self.users.local

    def check_launch(self, user: User, live: int) -> None:
        if live >= user.max_processes:
            raise QuotaExceeded(
                f"user {user.name!r}: process quota of {user.max_processes} reached "
                f"({live} running); wait for one to finish or cancel one"
            )

    def pages_held(self, name: str, fresh: bool = False) -> int:
        """Distinct pages in the files this user's live processes hold open, plus their named files: counted at
        most 50 ms ago (every pred of the user's programs asks), or now where `fresh`."""
        hit = self._pages_cache.get(name)
        now = time.monotonic()
        if hit is not None and now - hit[0] < 0.05 and not fresh:
            return hit[1]
        eng = self.engine
        kvfs = eng.kvfs
        procs = [p for p in list(eng.runtime.processes.values()) if p.user == name and not p.done]
        with kvfs.lock:
            pages = {pg for p in procs for h in list(p.handles) if not h.closed for pg in h.file.pages if pg >= 0}
            pages.update(pg for f in list(kvfs.named.values()) if f.owner == name for pg in f.pages if pg >= 0)
        self._pages_cache[name] = (now, len(pages))
        return len(pages)

    def before_pred(self, name: str, n_tokens: int, check=lambda: None) -> None:
        u = self.user(name)
        if u.max_pages is not None:
            need = -(-max(n_tokens, 1) // self.engine.pool.page_size) + 1
            held = self.pages_held(name)
            if held + need > u.max_pages:
                # A refusal reads the pages held now: the count of a moment ago may include the files of a program
                # of this user's that has since closed them or ended (the next program then starts inside it).
                held = self.pages_held(name, fresh=True)
            if held + need > u.max_pages:
                raise LimitExceeded(
                    f"user {name!r}: page quota of {u.max_pages} reached "
                    f"({held} pages held, pred needs up to {need} more)"
                )
        if u.tokens_per_s:
            b = self.buckets.get(name)
            if b is None:
                b = self.buckets.setdefault(name, TokenBucket(u.tokens_per_s))
            b.acquire(n_tokens, check)

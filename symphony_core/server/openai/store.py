"""Stored responses (`store`, `previous_response_id`) and the KV file each conversation keeps.

A stored response keeps its conversation as chat messages (what the next turn renders) and, for
the newest response of a conversation, a named KV file of the user's, `openai/conversations/<random>`,
holding the K/V of the whole conversation so far (prompt and reply). A follow-up that names it
takes the file over: it opens it, truncates it to where the new prompt's tokens stop agreeing with
it, and feeds only the rest; the history is not computed again. The earlier response keeps its
messages (a second follow-up from it recomputes, through the prefix cache). The files are the
user's like any other: they count against the user's page quota and show in `GET /v1/kv`.

Retention: per user at most `MAX_FILES` conversation files (the oldest file is removed first) and
`MAX_STORED` responses, each for `TTL_S` seconds. `instructions` are not carried over (as OpenAI).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

MAX_FILES = 8
MAX_STORED = 256
TTL_S = 3600.0


@dataclass
class StoredResponse:
    id: str
    user: str
    history: list[dict]  # the conversation through this response's reply (no instructions)
    body: dict  # the response object as returned
    created: float
    kv_path: str | None = None  # the conversation's KV file, while this response holds it


class ResponseStore:
    def __init__(
        self,
        remove_file: Callable[[str, str], None],
        max_files: int = MAX_FILES,
        max_stored: int = MAX_STORED,
        ttl_s: float = TTL_S,
    ) -> None:
        self._remove_file = remove_file  # (user, path): the KV file goes
        self.max_files, self.max_stored, self.ttl_s = max_files, max_stored, ttl_s
        self._lock = threading.Lock()
        self._by_user: dict[str, OrderedDict[str, StoredResponse]] = {}

    def get(self, user: str, rid: str) -> StoredResponse | None:
        with self._lock:
            doomed = self._expire(user)
            r = self._by_user.get(user, OrderedDict()).get(rid)
        for path in doomed:
            self._remove_file(user, path)
        return r

    def take_file(self, user: str, rid: str) -> str | None:
        """The KV file of response `rid`'s conversation, now the caller's to continue (or None)."""
        with self._lock:
            r = self._by_user.get(user, OrderedDict()).get(rid)
            if r is None or r.kv_path is None:
                return None
            path, r.kv_path = r.kv_path, None
            return path

    @staticmethod
    def new_path() -> str:
        return f"openai/conversations/{secrets.token_hex(8)}"

    def put(self, r: StoredResponse) -> None:
        doomed: list[str] = []
        with self._lock:
            mine = self._by_user.setdefault(r.user, OrderedDict())
            mine[r.id] = r
            with_files = [x for x in mine.values() if x.kv_path is not None]
            for old in with_files[: max(0, len(with_files) - self.max_files)]:
                doomed.append(old.kv_path or "")
                old.kv_path = None
            while len(mine) > self.max_stored:
                _, old = mine.popitem(last=False)
                if old.kv_path:
                    doomed.append(old.kv_path)
            doomed += self._expire(r.user)
        for path in doomed:
            self._remove_file(r.user, path)

    def delete(self, user: str, rid: str) -> bool:
        with self._lock:
            r = self._by_user.get(user, OrderedDict()).pop(rid, None)
        if r is not None and r.kv_path:
            self._remove_file(user, r.kv_path)
        return r is not None

    def give_back(self, r: StoredResponse, path: str) -> None:
        """A follow-up that took `r`'s file is not stored: the file goes back to `r` (a follow-up of
        `r` truncates it to what they share), or away when `r` has one again or is gone."""
        with self._lock:
            kept = self._by_user.get(r.user, OrderedDict()).get(r.id) is r and r.kv_path is None
            if kept:
                r.kv_path = path
        if not kept:
            self._remove_file(r.user, path)

    def release(self, user: str, path: str) -> None:
        """A follow-up that took a file and then failed: the file goes."""
        self._remove_file(user, path)

    def _expire(self, user: str) -> list[str]:
        mine = self._by_user.get(user)
        doomed: list[str] = []
        if not mine:
            return doomed
        cut = time.time() - self.ttl_s
        while mine:
            rid, r = next(iter(mine.items()))
            if r.created >= cut:
                break
            mine.pop(rid)
            if r.kv_path:
                doomed.append(r.kv_path)
        return doomed

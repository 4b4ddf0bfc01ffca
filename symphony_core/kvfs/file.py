"""KV files (the inodes) and KV handles (what a LIP holds).

A file is a list of page ids plus the tokens (and positions) written into it. A handle is an
open file description: a file, a mode and a closed flag. Many handles may share one file.
"""

from __future__ import annotations

import itertools
import time
from array import array
from dataclasses import dataclass, field

_file_ids = itertools.count(1)
_handle_ids = itertools.count(1)


@dataclass(eq=False)
class KVFile:
    owner: str
    path: str | None = None
    pages: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    parent: int | None = None  # the file this one was forked from: the fork tree
    fid: int = field(default_factory=lambda: next(_file_ids))
    open_handles: int = 0
    evicted: bool = False
    swapped: dict | None = None  # page index -> saved (K, V) while its process is parked
    hint_priority: int | None = None
    hint_keep_until: float | None = None
    created_at: float = field(default_factory=time.time)
    cached_tokens: int = 0  # how many of its first tokens it took from the prefix cache, K/V and all
    # (pages, slots): `KVFS.cached_context_slots`'s array of every slot of this file, grown by
    # one slot per decode step instead of rebuilt; valid while `pages` equals the copy kept here.
    slot_cache: tuple[list[int], array] | None = field(default=None, repr=False)
    argmax_read: bool = False  # its latest pred's Dist had its argmax read (see model.dist.ArgmaxReader)

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def next_position(self) -> int:
        return self.positions[-1] + 1 if self.positions else 0

    def evictable(self, now: float) -> bool:
        """A file is reclaimable under pressure only when its owner said so through a hint."""
        if self.evicted or self.swapped is not None or not self.pages:
            return False
        if self.hint_priority is not None and self.hint_priority < 0:
            return True
        return self.hint_keep_until is not None and now >= self.hint_keep_until


class KV:
    """A handle to a KV file. `.len`, `.tokens`, `.pages`, `.path` describe the file now.

    What `kv_create`, `kv_open` and `kv_fork` return and every other KV call takes. Several
    handles may share one file; `kv_close` closes this one. The properties are read-only views
    of the file as it is now (copies: changing the lists changes nothing).

    Attributes:
        mode: `"w"` (writable) or `"r"` (read-only: `pred`, `kv_truncate` and `kv_hint` refuse
            it with a `KVError`; `kv_fork` it to extend a copy).
        closed: whether this handle was closed (every call on it then raises `KVError`).
    """

    __slots__ = ("file", "mode", "closed", "hid", "__weakref__")

    def __init__(self, file: KVFile, mode: str) -> None:
        self.file = file
        self.mode = mode
        self.closed = False
        self.hid = next(_handle_ids)

    @property
    def len(self) -> int:
        """How many tokens the file holds (also `len(kv)`)."""
        return self.file.length

    def __len__(self) -> int:
        return self.file.length

    @property
    def tokens(self) -> list[int]:
        """The token ids written so far (kept even when the file is evicted, to recompute it)."""
        return list(self.file.tokens)

    @property
    def positions(self) -> list[int]:
        """The position of each token (consecutive unless `pred(positions=)` said otherwise)."""
        return list(self.file.positions)

    @property
    def pages(self) -> list[int]:
        """The ids of the pool pages holding the file's K/V, in order (shared pages included)."""
        return list(self.file.pages)

    @property
    def path(self) -> str | None:
        """The file's absolute name, or `None` for an anonymous file."""
        return self.file.path

    @property
    def readonly(self) -> bool:
        """True for a handle opened with mode `"r"`."""
        return self.mode == "r"

    @property
    def evicted(self) -> bool:
        """True once the file was evicted under memory pressure (its `kv_hint` allowed it)."""
        return self.file.evicted

    def describe(self) -> str:
        """The path, or `<anonymous file N>`: how error messages name the file."""
        return self.file.path or f"<anonymous file {self.file.fid}>"

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.mode
        return f"KV({self.describe()}, len={self.len}, pages={len(self.file.pages)}, {state})"

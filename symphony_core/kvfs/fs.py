"""The KV file system: create / open / fork / truncate / close / remove / hint over a page pool.

Pages are reference counted. `fork` shares every page; the first write into a shared page
copies it (only the partial last page can ever be written, so a fork costs at most one copy).
A file lives while it has a name or an open handle; its pages go back to the pool with it.
Every mutation holds one lock, so the scheduler, the LIP threads and the debugger's views
see a consistent tree.
"""

from __future__ import annotations

import threading
import time
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import KVError, KVNotFound, OutOfPages
from .eviction import evict_until_free
from .file import KV, KVFile
from .namespace import check_access, check_name_quota, resolve, visible
from .pool import PagePool
from .prefix_cache import PrefixCache

if TYPE_CHECKING:
    from ..model.forward_batch import DecodeRows

_MODES = {"r": "r", "w": "w", "rw": "w", "r+": "w"}


@dataclass
class Reservation:
    """Slots reserved in a file for one `pred` write; `rollback` undoes it exactly. `reused`: how
    many of the first tokens came with their K/V from the prefix cache (`slots` are the rest's)."""

    kv: KV
    old_length: int
    slots: list[int]
    reused: int = 0


class KVFS:
    def __init__(self, pool: PagePool, prefix_cache: bool = False) -> None:
        self.pool = pool
        self.lock = threading.RLock()
        self.named: dict[str, KVFile] = {}
        self.files: dict[int, KVFile] = {}  # every live file, named or held open
        self._path_bytes: dict[str, tuple[int, int]] = {}  # owner -> (named files, bytes of their paths)
        # Prompt pages kept for prefills that start alike (prefix_cache.py); None: every prefill computes.
        self.prefix_cache = PrefixCache(pool) if prefix_cache else None

    # --- the calls a LIP sees -------------------------------------------------------------

    def create(self, user: str, path: str | None = None) -> KV:
        with self.lock:
            full = None
            if path is not None:
                full = resolve(user, path)
                check_access(user, full, owner=None, write=True)
                if full in self.named:
                    raise KVError(f"KV file {full} already exists (open it, or remove it first)")
                check_name_quota(user, (f.owner for f in self.named.values()))
            f = KVFile(owner=user, path=full)
            if full is not None:
                self.named[full] = f
                n, b = self._path_bytes.get(user, (0, 0))
                self._path_bytes[user] = (n + 1, b + len(full.encode()))
            return self._new_handle(f, "w")

    def open(self, user: str, path: str, mode: str = "r") -> KV:
        if mode not in _MODES:
            raise KVError(f"kv_open mode must be 'r' or 'w', got {mode!r}")
        with self.lock:
            full = resolve(user, path)
            f = self.named.get(full)
            if f is None:
                check_access(user, full, owner=None, write=False)
                raise KVNotFound(f"no KV file at {full}")
            check_access(user, full, owner=f.owner, write=_MODES[mode] == "w")
            if f.evicted:
                raise KVError(f"KV file {full} was evicted under memory pressure (its hint allowed it)")
            return self._new_handle(f, _MODES[mode])

    def fork(self, kv: KV, user: str) -> KV:
        with self.lock:
            src = self._usable(kv, "kv_fork")
            self.pool.retain(src.pages)
            child = KVFile(
                owner=user,
                pages=list(src.pages),
                tokens=list(src.tokens),
                positions=list(src.positions),
                parent=src.fid,
            )
            return self._new_handle(child, "w")

    def truncate(self, kv: KV, n: int) -> None:
        with self.lock:
            f = self._writable(kv, "kv_truncate")
            if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= f.length:
                raise KVError(f"kv_truncate({kv.describe()}, {n!r}): n must be an int in [0, {f.length}]")
            self._cut(f, n)

    def _cut(self, f: KVFile, n: int) -> None:
        """Keep the first `n` tokens of `f`: later pages go back to the pool, and a page cut into will
        be written again past the cut, so a prefix cache forgets it first."""
        ps = self.pool.page_size
        keep = -(-n // ps)
        if n % ps and self.prefix_cache is not None and keep <= len(f.pages):
            self.prefix_cache.drop(f.pages[keep - 1])
        self.pool.release(f.pages[keep:])
        del f.pages[keep:]
        del f.tokens[n:]
        del f.positions[n:]

    def close(self, kv: KV) -> None:
        with self.lock:
            if not isinstance(kv, KV):
                raise KVError(f"kv_close expects a KV handle, got {type(kv).__name__}")
            if kv.closed:
                raise KVError(f"kv_close: handle to {kv.describe()} is already closed")
            kv.closed = True
            kv.file.open_handles -= 1
            self._drop_if_unreferenced(kv.file)

    def remove(self, user: str, path: str) -> None:
        with self.lock:
            full = resolve(user, path)
            f = self.named.get(full)
            if f is None:
                check_access(user, full, owner=None, write=False)
                raise KVNotFound(f"no KV file at {full}")
            check_access(user, full, owner=f.owner, write=True)
            del self.named[full]
            n, b = self._path_bytes.pop(f.owner, (1, len(full.encode())))
            if n > 1:
                self._path_bytes[f.owner] = (n - 1, b - len(full.encode()))
            f.path = None  # like unlink: open handles keep working on the now-anonymous file
            self._drop_if_unreferenced(f)

    def hint(self, kv: KV, keep_for: float | None = None, priority: int | None = None) -> None:
        """Say how the file may be reclaimed under memory pressure.

        `priority < 0`: drop it first when pages run short. `keep_for=s`: keep it at least `s`
        seconds, after which it may be dropped. With neither, the file is never evicted.
        """
        with self.lock:
            # A hint can get the file dropped: only a writer may give one (a reader of a
            # /shared/ file must not be able to evict the owner's cache).
            f = self._writable(kv, "kv_hint")
            if keep_for is not None and (
                isinstance(keep_for, bool) or not isinstance(keep_for, (int, float)) or not keep_for >= 0
            ):
                raise KVError(f"kv_hint keep_for must be a number of seconds >= 0, got {keep_for!r}")
            if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
                raise KVError(f"kv_hint priority must be an int, got {priority!r}")
            if keep_for is not None:
                f.hint_keep_until = time.time() + keep_for
            if priority is not None:
                f.hint_priority = priority
            if keep_for is None and priority is None:
                f.hint_keep_until = f.hint_priority = None

    def name_bytes(self, user: str, entry_cost: int = 0) -> int:
        """Bytes of the paths of the named files `user` owns, each plus `entry_cost`."""
        n, b = self._path_bytes.get(user, (0, 0))  # kept as files are named and removed: read without the lock
        return b + n * entry_cost

    def listdir(self, user: str, prefix: str | None = None) -> list[str]:
        """Named files `user` may see: their own directory's, then /shared/'s (namespace.visible)."""
        with self.lock:
            return visible(user, list(self.named), prefix)

    # --- what `pred` uses -------------------------------------------------------------------

    def reserve(
        self,
        kv: KV,
        tokens: list[int],
        positions: list[int],
        protect: frozenset[int] | set[int] = frozenset(),
        reuse_up_to: int = 0,
    ) -> Reservation:
        """Make room for `tokens` at the end of the file and record them; all or nothing.

        Eviction never touches the file being written nor the files whose ids are in
        `protect` (the other members of the same forward pass, whose slots are already taken).
        `reuse_up_to`: an empty file written at positions 0.. may take up to that many of its first
        tokens, K/V and all, from the prefix cache; `slots` then covers only the rest.
        """
        with self.lock:
            f = self._writable(kv, "pred")
            ps = self.pool.page_size
            reused = 0
            if reuse_up_to and not f.tokens and self.prefix_cache is not None:
                reused = self._start_from_cache(f, tokens[: reuse_up_to + 1], protect)
                tokens, positions = tokens[reused:], positions[reused:]
            old = f.length
            new_pages = -(-(old + len(tokens)) // ps) - len(f.pages)
            cow = old % ps != 0 and self.pool.refcount[f.pages[-1]] > 1
            need = new_pages + int(cow)
            fresh = self._alloc(need, f.fid, protect) if need else []
            if cow:
                dst = fresh.pop()
                self.pool.copy_page(f.pages[-1], dst, old % ps)
                self.pool.release([f.pages[-1]])
                f.pages[-1] = dst
            f.pages.extend(fresh)
            f.tokens.extend(tokens)
            f.positions.extend(positions)
            slots = [f.pages[i // ps] * ps + i % ps for i in range(old, old + len(tokens))]
            return Reservation(kv, old - reused, slots, reused)

    def reserving(self) -> threading.RLock:
        """Hold the file system still while a batch reserves its members' slots (`with kvfs.reserving():`);
        the calls below take the same re-entrant lock, so one hold covers the batch."""
        return self.lock

    def append_decodes(self, kvs: list[KV], tokens: list[int], max_pos: int, rows: DecodeRows) -> list[int]:
        """The decode fast path for a batch: each file's one token appended after its last, into room
        left in an unshared last page or, when that page is full, into a truly free page, its row
        (token, position, slot, the file's context slots with it) added to `rows`' columns. Returns
        each file's length before, or -1 for a file it left to `reserve` (closed or evicted, copy-on-write,
        eviction, the prefix cache's kept pages, a position past `max_pos`). One loop under one hold of the
        lock: per member this is the batch's costliest bookkeeping (W5)."""
        pool = self.pool
        ps, refcount, take_free = pool.page_size, pool.refcount, pool.take_free
        cached_context_slots = self.cached_context_slots
        add_token, add_position = rows.tokens.append, rows.positions.append
        add_slot, add_context = rows.slots.append, rows.contexts.append
        lengths: list[int] = []
        before = lengths.append
        with self.lock:
            for kv, token in zip(kvs, tokens):
                f = kv.file
                if kv.closed or f.evicted:
                    before(-1)
                    continue
                ftokens, fpositions = f.tokens, f.positions
                n = len(ftokens)
                p = fpositions[-1] + 1 if n else 0
                off = n % ps
                if p >= max_pos:
                    before(-1)
                    continue
                if off:
                    page = f.pages[-1]
                    if refcount[page] != 1:
                        before(-1)
                        continue
                else:
                    page = take_free()
                    if page < 0:
                        before(-1)
                        continue
                    f.pages.append(page)
                slot = page * ps + off
                ftokens.append(token)
                fpositions.append(p)
                # The file's cached slot list grown by this one slot (as `cached_context_slots` would,
                # without its checks when the cache is current).
                cache, ctx = f.slot_cache, None
                if cache is not None and len(cache[1]) == n:
                    if not off:
                        cache[0].append(page)
                    if cache[0] == f.pages:
                        ctx = cache[1]
                        ctx.append(slot)
                if ctx is None:
                    ctx = cached_context_slots(f)
                before(n)
                add_token(token)
                add_position(p)
                add_slot(slot)
                add_context(ctx)
        return lengths

    def _start_from_cache(self, f: KVFile, tokens: list[int], protect: frozenset[int] | set[int]) -> int:
        """Give the empty file `f` the cached pages of the longest cached start of `tokens` (shared
        full pages; a partly matching page's first slots copied into a page of its own), never all of
        them; record those tokens. Returns how many. Nothing changes when a page cannot be had."""
        cache = self.prefix_cache
        assert cache is not None
        pool, ps = self.pool, self.pool.page_size
        full, src, k = cache.match(f.owner, tokens)
        if not full and not k:
            return 0
        pool.retain(full)  # held now: the allocation below cannot take them
        pages = list(full)
        if k:
            pool.retain([src])
            try:
                (dst,) = self._alloc(1, f.fid, protect)
            except OutOfPages:
                pool.release(full + [src])
                return 0
            pool.copy_page(src, dst, k)
            pool.release([src])
            pages.append(dst)
        n = len(full) * ps + k
        f.pages.extend(pages)
        f.tokens.extend(tokens[:n])
        f.positions.extend(range(n))
        f.cached_tokens = n
        cache.reused_tokens += n
        return n

    def remember_prompt(self, f: KVFile, n: int) -> None:
        """`f` holds a prompt of `n` tokens at positions 0.., their K/V written: offer its pages to the
        prefix cache (if the file still holds them)."""
        with self.lock:
            if self.prefix_cache is not None and len(f.tokens) >= n and f.positions[:1] == [0] and not f.evicted:
                self.prefix_cache.register(f.owner, f.pages[: -(-n // self.pool.page_size)], f.tokens[:n])

    def rollback(self, r: Reservation) -> None:
        with self.lock:
            self._cut(r.kv.file, r.old_length)

    def cut_back(self, kv: KV, length: int) -> None:
        """Undo what a pred wrote into `kv`'s file past `length` (chunks of a call that then failed or
        was abandoned), unless the handle has been closed meanwhile."""
        with self.lock:
            if not kv.closed and kv.file.length > length:
                self._cut(kv.file, length)

    def context_slots(self, f: KVFile, length: int | None = None) -> list[int]:
        """Every cache slot of `f` in order (the first `length`), as a new list."""
        slots = self.cached_context_slots(f)
        return slots[: len(slots) if length is None else length].tolist()

    def cached_context_slots(self, f: KVFile) -> array:
        """Every cache slot of `f` in order, as the file's own cached int64 array: read it, never change it.

        A forward pass needs these for every member, and a decode step adds one token to the
        file, so the array of the previous step is kept on the file (`slot_cache`) and grown by
        the new slots; it is rebuilt (one C-level range per page) when the file's pages changed (a
        new page, copy-on-write, truncation, swap). An array rather than a list: a batch copies
        each member's slots into one buffer and hands it to torch as it is (`torch.frombuffer`),
        where a list's ints would be converted one by one. Call it holding `self.lock`."""
        n = len(f.tokens)
        pages = f.pages
        cached = f.slot_cache
        ps = self.pool.page_size
        if cached is not None and cached[0] == pages:
            slots = cached[1]
            m = len(slots)
            if m < n:
                slots.extend([pages[i // ps] * ps + i % ps for i in range(m, n)])
            elif m > n:
                del slots[n:]
            return slots
        slots = array("q")
        for p in pages:
            b = p * ps
            slots.extend(range(b, b + ps))
            if len(slots) >= n:
                break
        del slots[n:]
        f.slot_cache = (list(pages), slots)
        return slots

    # --- accounting -----------------------------------------------------------------------

    def check(self) -> None:
        """Assert that every page's reference count equals the number of live files holding it."""
        with self.lock:
            counts = [0] * self.pool.n_pages
            for f in self.files.values():
                assert len(f.pages) == -(-f.length // self.pool.page_size) or f.evicted, f
                for p in f.pages:
                    if p >= 0:  # -1: swapped out while its process is parked
                        counts[p] += 1
            assert counts == self.pool.refcount, "page reference counts disagree with the files"
            free = sum(1 for c in counts if c == 0)
            assert free == self.pool.free_pages, (
                f"{free} unreferenced pages but {self.pool.free_pages} on the free list"
            )

    def stats(self) -> dict:
        with self.lock:
            return {
                "pages_total": self.pool.n_pages,
                "pages_used": self.pool.used_pages,
                "pages_free": self.pool.free_pages,
                "pages_cached": self.pool.cached_pages,  # free, holding cached prompts' K/V
                "prefix_reused_tokens": self.prefix_cache.reused_tokens if self.prefix_cache is not None else 0,
                "page_size": self.pool.page_size,
                "files": len(self.files),
                "named_files": len(self.named),
            }

    # --- internals ------------------------------------------------------------------------

    def next_write_position(self, kv: KV, call: str = "pred") -> int:
        """The position the next token appended through `kv` takes; raises KVError (naming `call`)
        when `kv` is not a usable writable handle."""
        with self.lock:
            return self._writable(kv, call).next_position

    def pages_held(self, handles) -> int:
        """Distinct pool pages the open handles among `handles` hold (a process's page quota)."""
        with self.lock:
            return len({p for h in handles if not h.closed for p in h.file.pages if p >= 0})

    def _new_handle(self, f: KVFile, mode: str) -> KV:
        self.files[f.fid] = f
        f.open_handles += 1
        return KV(f, mode)

    def _usable(self, kv: KV, call: str) -> KVFile:
        if not isinstance(kv, KV):
            raise KVError(f"{call} expects a KV handle, got {type(kv).__name__}")
        if kv.closed:
            raise KVError(f"{call} on closed handle to {kv.describe()}")
        if kv.file.evicted:
            raise KVError(
                f"{call} on {kv.describe()}: the file was evicted under memory pressure "
                "(its hint allowed it); its tokens are still in kv.tokens to recompute"
            )
        return kv.file

    def _writable(self, kv: KV, call: str) -> KVFile:
        f = self._usable(kv, call)
        if kv.readonly:
            raise KVError(f"{call} on read-only handle {kv.describe()} — fork it first")
        return f

    def _drop_if_unreferenced(self, f: KVFile) -> None:
        if f.open_handles == 0 and f.path is None:
            self.pool.release([p for p in f.pages if p >= 0])
            f.swapped = None
            f.pages = []
            self.files.pop(f.fid, None)

    def _alloc(self, n: int, writing: int, protect: set[int] | frozenset[int]) -> list[int]:
        """`n` free pages for file `writing`, evicting hinted files other than it and those in `protect`
        if need be (the set of both is built only then: a batch's prompts would otherwise copy the
        batch's member set once each)."""
        if n > self.pool.free_pages:
            evict_until_free(self.files.values(), self.pool, n, protect if writing in protect else protect | {writing})
        return self.pool.alloc(n)


__all__ = ["KVFS", "Reservation", "OutOfPages"]

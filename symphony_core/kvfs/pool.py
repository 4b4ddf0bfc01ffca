"""The page pool: one preallocated K and one V tensor, handed out in fixed-size pages.

A page holds `page_size` token slots of K and V for every layer. Slot `s` of page `p` is
row `p * page_size + s` of the flat per-layer view, so the model addresses the cache by
slot number and never needs to know about files.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch

from ..errors import OutOfPages


class PagePool:
    def __init__(
        self,
        n_pages: int,
        page_size: int,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> None:
        if n_pages < 1 or page_size < 1:
            raise ValueError(f"page pool needs n_pages >= 1 and page_size >= 1, got {n_pages}, {page_size}")
        self.n_pages = n_pages
        self.page_size = page_size
        shape = (n_layers, n_pages * page_size, n_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.refcount = [0] * n_pages
        # Pop from the end: low page ids are handed out first, which keeps pictures readable.
        self._free = list(range(n_pages - 1, -1, -1))
        # Pages no file holds whose K/V a prefix cache keeps (kvfs/prefix_cache.py), oldest first: free
        # to allocate (counted in `free_pages`), but taken only once `_free` runs out.
        self._cached: OrderedDict[int, None] = OrderedDict()
        self.keep: Callable[[int], bool] | None = None  # whether a page's K/V is worth keeping once freed
        self.forget: Callable[[int], None] | None = None  # a kept page is being reused for other K/V

    @staticmethod
    def bytes_per_page(page_size: int, n_layers: int, n_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * page_size * n_layers * n_kv_heads * head_dim * itemsize

    @property
    def free_pages(self) -> int:
        """Pages no file holds: truly free, and kept for a prefix cache (either may be allocated)."""
        return len(self._free) + len(self._cached)

    @property
    def used_pages(self) -> int:
        return self.n_pages - self.free_pages

    @property
    def cached_pages(self) -> int:
        """Free pages whose K/V a prefix cache keeps until they are needed."""
        return len(self._cached)

    def alloc(self, n: int) -> list[int]:
        """Take `n` fresh pages (reference count 1 each), or raise without taking any. Truly free
        pages go first, then the longest-kept cached ones (their cache forgets them)."""
        if n > self.free_pages:
            raise OutOfPages(
                f"out of KV pages: need {n}, {self.free_pages} free of {self.n_pages} "
                f"(page size {self.page_size} tokens)"
            )
        pages: list[int] = []
        while len(pages) < n:
            if self._free:
                pages.append(self._free.pop())
                continue
            p = next(iter(self._cached))  # kept the longest
            if self.forget is not None:
                self.forget(p)  # its cache drops it, and what it indexes below it: all truly free now
            if p in self._cached:
                self.uncache(p)
        for p in pages:
            self.refcount[p] = 1
        return pages

    def take_free(self) -> int:
        """One truly free page (reference count 1), or -1 when none is: a decode's new page, taken
        without the cached pages' bookkeeping (`alloc` takes those)."""
        free = self._free
        if not free:
            return -1
        p = free.pop()
        self.refcount[p] = 1
        return p

    def retain(self, pages: list[int]) -> None:
        """One more holder for each page; a cached page (no holder) is taken back from the cache's keeping."""
        for p in pages:
            if self.refcount[p] == 0:
                assert p in self._cached, f"retain of free page {p}"
                del self._cached[p]
            self.refcount[p] += 1

    def release(self, pages: list[int]) -> None:
        keep = self.keep
        for p in pages:
            rc = self.refcount[p]
            assert rc > 0, f"release of free page {p}"
            self.refcount[p] = rc - 1
            if rc == 1:
                if keep is not None and keep(p):
                    self._cached[p] = None
                else:
                    self._free.append(p)

    def uncache(self, page: int) -> None:
        """The cache no longer keeps `page`: if no file holds it, it is simply free."""
        if page in self._cached:
            del self._cached[page]
            self._free.append(page)

    def copy_page(self, src: int, dst: int, n_slots: int | None = None) -> None:
        """Copy the first `n_slots` slots of page `src` into page `dst` (all layers)."""
        n = self.page_size if n_slots is None else n_slots
        a, b = src * self.page_size, dst * self.page_size
        # copy_ on the two views: slice assignment takes torch's indexing path, 4-6x slower at a few slots.
        self.k[:, b : b + n].copy_(self.k[:, a : a + n])
        self.v[:, b : b + n].copy_(self.v[:, a : a + n])

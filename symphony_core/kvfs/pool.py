"""The page pool: one preallocated K and one V tensor, handed out in fixed-size pages.

A page holds `page_size` token slots of K and V for every layer. Slot `s` of page `p` is
row `p * page_size + s` of the flat per-layer view, so the model addresses the cache by
slot number and never needs to know about files.
"""

from __future__ import annotations

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

    @staticmethod
    def bytes_per_page(page_size: int, n_layers: int, n_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * page_size * n_layers * n_kv_heads * head_dim * itemsize

    @property
    def free_pages(self) -> int:
        return len(self._free)

    @property
    def used_pages(self) -> int:
        return self.n_pages - len(self._free)

    def alloc(self, n: int) -> list[int]:
        """Take `n` fresh pages (reference count 1 each), or raise without taking any."""
        if n > len(self._free):
            raise OutOfPages(
                f"out of KV pages: need {n}, {len(self._free)} free of {self.n_pages} "
                f"(page size {self.page_size} tokens)"
            )
        pages = [self._free.pop() for _ in range(n)]
        for p in pages:
            self.refcount[p] = 1
        return pages

    def retain(self, pages: list[int]) -> None:
        for p in pages:
            assert self.refcount[p] > 0, f"retain of free page {p}"
            self.refcount[p] += 1

    def release(self, pages: list[int]) -> None:
        for p in pages:
            rc = self.refcount[p]
            assert rc > 0, f"release of free page {p}"
            self.refcount[p] = rc - 1
            if rc == 1:
                self._free.append(p)

    def copy_page(self, src: int, dst: int, n_slots: int | None = None) -> None:
        """Copy the first `n_slots` slots of page `src` into page `dst` (all layers)."""
        n = self.page_size if n_slots is None else n_slots
        a, b = src * self.page_size, dst * self.page_size
        self.k[:, b : b + n] = self.k[:, a : a + n]
        self.v[:, b : b + n] = self.v[:, a : a + n]

"""Parking: move a file's private pages out of the pool into host memory, and back.

Only pages no other file shares are moved (a shared page stays, held by this file as before);
a swapped-out slot is marked -1 in `file.pages`. The scheduler never runs a `pred` on a file
while it is swapped out.
"""

from __future__ import annotations

import torch

from .file import KVFile
from .fs import KVFS

SWAPPED = -1


def swap_out(fs: KVFS, files: list[KVFile]) -> int:
    """Free the private pages of `files`; return how many pages went back to the pool."""
    freed = 0
    with fs.lock:
        pool, ps = fs.pool, fs.pool.page_size
        for f in files:
            if f.swapped is not None or f.evicted:
                continue
            saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
            for i, p in enumerate(f.pages):
                if pool.refcount[p] == 1:
                    rows = slice(p * ps, (p + 1) * ps)
                    saved[i] = (pool.k[:, rows].to("cpu", copy=True), pool.v[:, rows].to("cpu", copy=True))
            for i in saved:
                pool.release([f.pages[i]])
                f.pages[i] = SWAPPED
            f.swapped = saved
            freed += len(saved)
    return freed


def pages_to_swap_in(files: list[KVFile]) -> int:
    return sum(len(f.swapped) for f in files if f.swapped)


def swap_in(fs: KVFS, files: list[KVFile]) -> None:
    """Bring parked files back into the pool (raises OutOfPages, changing nothing, if they don't fit)."""
    with fs.lock:
        pool, ps = fs.pool, fs.pool.page_size
        todo = [f for f in files if f.swapped is not None]
        fresh = pool.alloc(pages_to_swap_in(todo))
        for f in todo:
            assert f.swapped is not None  # `todo` holds only swapped files
            for i, (k, v) in f.swapped.items():
                p = fresh.pop()
                rows = slice(p * ps, (p + 1) * ps)
                pool.k[:, rows] = k.to(pool.k.device)
                pool.v[:, rows] = v.to(pool.v.device)
                f.pages[i] = p
            f.swapped = None

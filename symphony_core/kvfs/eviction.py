"""Eviction under memory pressure: which files a hint (`kv_hint`) lets go when pages run short.

An evicted file keeps its tokens and loses its pages (using it raises a `KVError` that says so).
Only files whose hint allows it now are candidates, the lowest priority first, then the soonest
past its `keep_for`; the files being written are protected.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from .file import KVFile
from .pool import PagePool


def evict_until_free(files: Iterable[KVFile], pool: PagePool, target: int, protect: set[int] | frozenset[int]) -> None:
    """Evict hinted files of `files` (lowest priority first) until `target` pages of `pool` are free.

    Evicts nothing when even every evictable file would not free enough (pages shared
    with a live fork are not freed by evicting one holder): then the caller's OutOfPages
    leaves every file as it was.
    """
    now = time.time()
    victims = sorted(
        (f for f in files if f.fid not in protect and f.evictable(now)),
        key=lambda f: (f.hint_priority if f.hint_priority is not None else 0, f.hint_keep_until or 0.0),
    )
    need = target - pool.free_pages
    left: dict[int, int] = {}
    chosen: list[KVFile] = []
    for f in victims:
        if need <= 0:
            break
        chosen.append(f)
        for p in f.pages:
            left[p] = left.get(p, pool.refcount[p]) - 1
            if left[p] == 0:
                need -= 1
    if need > 0:
        return
    for f in chosen:
        pool.release(f.pages)
        f.pages = []
        f.evicted = True

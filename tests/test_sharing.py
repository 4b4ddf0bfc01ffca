"""Must show 4 — sharing: O(1) copy-on-write forks, named files with owners and rights, remove
while open, and hint-driven eviction that never touches an unhinted file.
"""

from __future__ import annotations

import random

import pytest
import torch

from symphony_core import KVError, KVNotFound, KVPermissionError, OutOfPages, PredCall

VOCAB = 49152


@pytest.fixture(scope="module")
def engine():
    """A private engine for this module: page accounting is exact only if nobody else writes."""
    from symphony_core import Engine

    return Engine(num_pages=256)


def rand_ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(VOCAB) for _ in range(n)]


def probe(eng, kv, x: int = 1234) -> torch.Tensor:
    """Next-token logits after `x` on a throwaway fork: reads kv's cached K/V, changes nothing."""
    f = eng.kv_fork(kv)
    try:
        return eng.pred(f, [x]).logits.clone()
    finally:
        eng.kv_close(f)


def recompute(eng, kv, x: int = 1234) -> torch.Tensor:
    """The same logits from scratch: a fresh file fed kv's tokens and x."""
    f = eng.kv_create()
    try:
        return eng.pred(f, kv.tokens + [x], kv.positions + [kv.positions[-1] + 1]).logits.clone()
    finally:
        eng.kv_close(f)


@pytest.mark.slow
def test_forks_of_a_1000_token_file_share_pages(engine):
    pool, ps = engine.pool, engine.pool.page_size
    base_used = pool.used_pages
    ids = rand_ids(1000, 1)
    parent = engine.kv_create()
    engine.pred(parent, ids)
    prefix_pages = len(parent.pages)
    assert prefix_pages == -(-1000 // ps) and pool.used_pages == base_used + prefix_pages
    parent_pages = parent.pages
    before = probe(engine, parent)
    assert pool.used_pages == base_used + prefix_pages

    # a fork costs nothing until written
    child = engine.kv_fork(parent)
    assert pool.used_pages == base_used + prefix_pages
    assert child.pages == parent_pages and child.tokens == ids and child.len == 1000
    assert all(pool.refcount[p] == 2 for p in parent_pages)
    engine.kv_close(child)
    assert all(pool.refcount[p] == 1 for p in parent_pages)

    forks = [engine.kv_fork(parent) for _ in range(16)]
    assert pool.used_pages == base_used + prefix_pages
    tails = [rand_ids(64, 100 + i) for i in range(16)]
    tails[1] = tails[0]  # two forks write the same tokens: they must agree exactly
    try:
        res = engine.pred_batch([PredCall(f, t, outputs="all") for f, t in zip(forks, tails)])
        assert all(not isinstance(r, Exception) for r in res), res
        family = set(parent.pages).union(*(f.pages for f in forks))
        bound = prefix_pages + 16 * (-(-64 // ps) + 1)
        assert len(family) <= bound and pool.used_pages - base_used <= bound, (len(family), bound)
        full = 1000 // ps
        for f, t in zip(forks, tails):
            assert f.tokens == ids + t
            assert f.pages[:full] == parent_pages[:full], "a full shared page was copied"
            assert f.pages[full] != parent_pages[full], "the partial last page was written in place"
        # copy-on-write correctness: the parent never saw its children's writes
        assert parent.pages == parent_pages and parent.tokens == ids
        assert torch.allclose(probe(engine, parent), before, atol=1e-5)
        assert torch.allclose(res[0].logits, res[1].logits, atol=1e-5)
        assert not torch.allclose(res[0].logits[-1], res[2].logits[-1], atol=1e-2)
    finally:
        for f in forks:
            engine.kv_close(f)
    assert pool.used_pages == base_used + prefix_pages

    # at a page boundary a fork copies nothing: its writes take fresh pages only
    engine.kv_truncate(parent, 992)
    aligned = parent.pages
    forks = [engine.kv_fork(parent) for _ in range(4)]
    used = pool.used_pages
    try:
        engine.pred_batch([PredCall(f, rand_ids(64, 200 + i)) for i, f in enumerate(forks)])
        assert pool.used_pages - used == 4 * (64 // ps)
        assert all(f.pages[: len(aligned)] == aligned for f in forks)
    finally:
        for f in forks:
            engine.kv_close(f)
        engine.kv_close(parent)
    assert pool.used_pages == base_used
    engine.kvfs.check()


def test_named_private_files(engine):
    ids = rand_ids(30, 2)
    a = engine.kv_create("sharing_notes.kv", user="alice")
    assert a.path == "/users/alice/sharing_notes.kv"
    engine.pred(a, ids)
    pages, used = a.pages, engine.pool.used_pages
    ref = probe(engine, a)
    engine.kv_close(a)
    assert engine.pool.used_pages == used, "closing the last handle of a named file freed it"
    with pytest.raises(KVError, match="already exists"):
        engine.kv_create("sharing_notes.kv", user="alice")
    try:
        r = engine.kv_open("sharing_notes.kv", "r", user="alice")
        assert r.readonly and r.tokens == ids and r.pages == pages
        with pytest.raises(KVError, match="read-only.*fork it first"):
            engine.pred(r, [1])
        with pytest.raises(KVError, match="read-only"):
            engine.kv_truncate(r, 3)
        assert torch.allclose(probe(engine, r), ref, atol=1e-5)  # forking a read handle is allowed
        engine.kv_close(r)

        # another user can neither open, write, remove nor create in alice's directory
        for call in (
            lambda: engine.kv_open("/users/alice/sharing_notes.kv", user="bob"),
            lambda: engine.kv_open("/users/alice/sharing_notes.kv", "w", user="bob"),
            lambda: engine.kv_remove("/users/alice/sharing_notes.kv", user="bob"),
            lambda: engine.kv_create("/users/alice/x.kv", user="bob"),
            lambda: engine.kv_open("/users/alice/missing.kv", user="bob"),
        ):
            with pytest.raises(KVPermissionError, match="alice"):
                call()
        # bob's relative path is his own directory, where there is no such file
        with pytest.raises(KVNotFound, match="/users/bob/sharing_notes.kv"):
            engine.kv_open("sharing_notes.kv", user="bob")
        assert "/users/alice/sharing_notes.kv" not in engine.kvfs.listdir("bob")
        assert "/users/alice/sharing_notes.kv" in engine.kvfs.listdir("alice")

        w = engine.kv_open("/users/alice/sharing_notes.kv", "w", user="alice")
        engine.pred(w, [5, 6])
        assert w.len == 32
        engine.kv_close(w)
    finally:
        engine.kv_remove("sharing_notes.kv", user="alice")
    with pytest.raises(KVNotFound):
        engine.kv_open("sharing_notes.kv", user="alice")
    engine.kvfs.check()


def test_shared_files_readable_by_all_writable_by_owner(engine):
    used0 = engine.pool.used_pages
    sys_ids = rand_ids(21, 3)
    s = engine.kv_create("/shared/sys_test.kv", user="alice")
    engine.pred(s, sys_ids)
    ref = probe(engine, s)
    b = engine.kv_open("/shared/sys_test.kv", "r", user="bob")
    try:
        assert b.tokens == sys_ids and b.pages == s.pages
        with pytest.raises(KVPermissionError, match="alice"):
            engine.kv_open("/shared/sys_test.kv", "w", user="bob")
        with pytest.raises(KVPermissionError):
            engine.kv_remove("/shared/sys_test.kv", user="bob")
        with pytest.raises(KVError, match="already exists"):
            engine.kv_create("/shared/sys_test.kv", user="bob")
        with pytest.raises(KVError, match="read-only.*fork it first"):
            engine.pred(b, [1])
        with pytest.raises(KVError, match="read-only"):
            engine.kv_truncate(b, 0)
        with pytest.raises(KVError, match="read-only"):  # a reader may not make the owner's file evictable
            engine.kv_hint(b, priority=-1)
        assert s.file.hint_priority is None

        # bob forks and writes his own continuation; alice's file does not move
        mine = engine.kv_fork(b, user="bob")
        engine.pred(mine, [7, 8, 9])
        assert mine.len == 24 and s.tokens == sys_ids and b.len == 21
        assert torch.allclose(probe(engine, s), ref, atol=1e-5)
        engine.kv_close(mine)

        # the owner appends through a "w" handle; every reader sees the same file
        w = engine.kv_open("/shared/sys_test.kv", "w", user="alice")
        engine.pred(w, [10])
        assert b.len == 22 and b.tokens == sys_ids + [10]
        engine.kv_close(w)
        engine.kv_remove("/shared/sys_test.kv", user="alice")
        assert b.tokens == sys_ids + [10]  # an open reader keeps the unlinked file
        assert torch.allclose(probe(engine, b, x=sys_ids[0]), recompute(engine, b, x=sys_ids[0]), atol=1e-4)
    finally:
        engine.kv_close(b)
        engine.kv_close(s)
        if "/shared/sys_test.kv" in engine.kvfs.named:
            engine.kv_remove("/shared/sys_test.kv", user="alice")
    assert engine.pool.used_pages == used0
    engine.kvfs.check()


def test_remove_while_open_keeps_the_handle_until_closed(engine):
    used0 = engine.pool.used_pages
    h = engine.kv_create("tmp_remove.kv")
    engine.pred(h, rand_ids(40, 4))
    pages = h.pages
    engine.kv_remove("tmp_remove.kv")
    assert h.path is None and h.pages == pages
    assert engine.pool.used_pages == used0 + len(pages)
    with pytest.raises(KVNotFound, match="tmp_remove.kv"):
        engine.kv_open("tmp_remove.kv")
    # the name is free again; the new file is a different one
    again = engine.kv_create("tmp_remove.kv")
    assert again.len == 0
    engine.kv_close(again)
    engine.kv_remove("tmp_remove.kv")
    # the unlinked file still works
    engine.pred(h, [3, 4])
    assert h.len == 42
    assert torch.allclose(probe(engine, h), recompute(engine, h), atol=1e-4)
    engine.kv_close(h)
    assert engine.pool.used_pages == used0
    engine.kvfs.check()


def test_hint_eviction_under_pressure(fresh_engine):
    eng = fresh_engine(num_pages=16, page_size=4)
    pool = eng.pool
    a = eng.kv_create("cache.kv")
    eng.pred(a, rand_ids(24, 5))  # 6 pages
    eng.kv_hint(a, priority=-1)
    b = eng.kv_create()
    eng.pred(b, rand_ids(24, 6))  # 6 pages, no hint
    b_ref = probe(eng, b)
    assert pool.free_pages == 4
    a_tokens = a.tokens

    c = eng.kv_create()
    eng.pred(c, rand_ids(20, 7))  # needs 5 pages: only by evicting the hinted file
    assert a.evicted and a.pages == [] and a.tokens == a_tokens
    assert not b.evicted and not c.evicted and pool.free_pages == 16 - 6 - 5
    eng.kvfs.check()
    with pytest.raises(KVError, match="evicted"):
        eng.pred(a, [1])
    with pytest.raises(KVError, match="evicted"):
        eng.kv_fork(a)
    with pytest.raises(KVError, match="evicted"):
        eng.kv_open("cache.kv")
    assert torch.allclose(probe(eng, b), b_ref, atol=1e-5), "an unhinted file changed under pressure"

    # unhinted files are never evicted: the pool simply runs out
    d = eng.kv_create()
    with pytest.raises(OutOfPages, match="out of KV pages"):
        eng.pred(d, rand_ids(24, 8))
    assert d.len == 0 and d.pages == [] and not b.evicted and not c.evicted
    # keep_for protects for that long; keep_for=0 lets it go
    eng.kv_hint(c, keep_for=3600)
    with pytest.raises(OutOfPages):
        eng.pred(d, rand_ids(24, 8))
    assert not c.evicted
    eng.kv_hint(c, keep_for=0)
    eng.pred(d, rand_ids(24, 8))
    assert c.evicted and d.len == 24
    assert torch.allclose(probe(eng, b), b_ref, atol=1e-5)
    eng.kvfs.check()

    # a hinted file is never evicted to make room for its own write, nor for a batch partner
    eng.kv_close(d)
    e = eng.kv_create()
    eng.pred(e, rand_ids(22, 9))  # 6 pages, the last one half full
    eng.kv_hint(e, priority=-1)
    g = eng.kv_create()
    eng.pred(g, rand_ids(16, 10))  # 4 pages, unhinted: the pool is now full
    assert pool.free_pages == 0
    e_tokens, e_pages = e.tokens, e.pages
    with pytest.raises(OutOfPages):
        eng.pred(e, [1, 2, 3, 4, 5])  # needs a page; the only evictable file is e itself
    assert not e.evicted and e.tokens == e_tokens and e.pages == e_pages
    h = eng.kv_create()
    # e's token fits in its last page; h needs a page, which only evicting e (a member) would give
    res = eng.pred_batch([PredCall(e, [1]), PredCall(h, [4, 5])])
    assert isinstance(res[1], OutOfPages) and h.len == 0, res[1]
    assert not isinstance(res[0], Exception), res[0]
    assert not e.evicted and e.tokens == e_tokens + [1] and e.pages == e_pages
    eng.kvfs.check()
    for kv in (g, h, b):
        eng.kv_close(kv)
    fresh = eng.kv_create()
    assert torch.allclose(res[0].logits, eng.pred(fresh, e.tokens).logits, atol=1e-4)

    for kv in (a, c, e, fresh):
        eng.kv_close(kv)
    eng.kv_remove("cache.kv")
    eng.kvfs.check()
    assert pool.free_pages == pool.n_pages

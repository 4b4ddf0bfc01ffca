"""Must show 3 — KVFS properties: random sequences of create / open / fork / pred / truncate /
close / remove (and prompts that start alike, which the prefix cache serves) keep the page
accounting exact and every file's cached K/V equal to a from-scratch recompute, and end with the
pool full again (cached pages count as free).

The check of a file F (tokens t at positions p): fork F and pred one extra token x on the fork
— that reads F's cached K/V — and compare with a fresh file fed t + [x] at p + [next]. The two
run in one forward pass; afterwards both are closed.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from symphony_core import KVError, KVPermissionError, OutOfPages, PredCall

TOL = 1e-3
MAX_HANDLES = 5
MAX_LEN = 32
NAMES = ["a.kv", "b.kv", "/shared/c.kv"]
VOCAB = 49152

tokens_st = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=6)
# Prompts that start alike (the prefix cache's case): the first n tokens of a few fixed sequences.
PROMPT_BASES = [[(97 * j + 11 * b) % VOCAB for j in range(MAX_LEN)] for b in range(3)]


class KVFSMachine(RuleBasedStateMachine):
    engine = None  # set per test

    def __init__(self) -> None:
        super().__init__()
        self.eng = self.engine
        self.handles: list[tuple[object, int]] = []  # (KV, model file id)
        self.model: dict[int, tuple[list[int], list[int]]] = {}  # file id -> (tokens, positions)
        self.names: dict[str, int] = {}  # path as given -> model file id
        self.next_id = 0
        self.checked = 0
        assert self.eng.pool.free_pages == self.eng.pool.n_pages, "a previous example leaked pages"

    # --- helpers -----------------------------------------------------------------------------------
    def _new_model(self, toks: list[int], pos: list[int]) -> int:
        self.next_id += 1
        self.model[self.next_id] = (list(toks), list(pos))
        return self.next_id

    def _pick(self, i: int):
        return self.handles[i % len(self.handles)]

    def _live_ids(self) -> set[int]:
        return {m for _, m in self.handles} | set(self.names.values())

    def _verify(self, kv) -> None:
        eng = self.eng
        toks, pos = kv.tokens, kv.positions
        nxt = pos[-1] + 1 if pos else 0
        x = (len(toks) * 7919 + 13) % VOCAB
        fork, fresh = eng.kv_fork(kv), eng.kv_create()
        try:
            a, b = eng.pred_batch([PredCall(fork, [x], [nxt]), PredCall(fresh, toks + [x], pos + [nxt])])
            assert not isinstance(a, Exception) and not isinstance(b, Exception), (a, b)
            diff = (a.logits - b.logits).abs().max().item()
            assert diff <= TOL, f"{kv!r}: cached K/V disagree with a recompute by {diff:.2e}"
            assert fork.tokens == toks + [x] and kv.tokens == toks  # the fork's write did not leak back
        finally:
            eng.kv_close(fork)
            eng.kv_close(fresh)
        self.checked += 1

    # --- rules ---------------------------------------------------------------------------------
    @precondition(lambda self: len(self.handles) < MAX_HANDLES)
    @rule(name=st.one_of(st.none(), st.sampled_from(NAMES)))
    def create(self, name):
        if name is not None and name in self.names:
            with pytest.raises(KVError, match="already exists"):
                self.eng.kv_create(name)
            return
        kv = self.eng.kv_create(name)
        assert kv.len == 0 and kv.pages == []
        mid = self._new_model([], [])
        if name is not None:
            self.names[name] = mid
            assert kv.path is not None and kv.path.endswith(name.lstrip("/").split("/")[-1])
        self.handles.append((kv, mid))

    @precondition(lambda self: len(self.handles) < MAX_HANDLES and self.names)
    @rule(data=st.data(), mode=st.sampled_from(["r", "w"]), stranger=st.booleans())
    def open_named(self, data, mode, stranger):
        name = data.draw(st.sampled_from(sorted(self.names)))
        full = name if name.startswith("/") else f"/users/local/{name}"
        if stranger and (not name.startswith("/shared/") or mode == "w"):
            with pytest.raises(KVPermissionError):
                self.eng.kv_open(full, mode, user="eve")
            return
        kv = self.eng.kv_open(full, mode, user="eve" if stranger else "local")
        assert kv.readonly == (mode == "r")
        self.handles.append((kv, self.names[name]))

    @precondition(lambda self: self.handles and len(self.handles) < MAX_HANDLES)
    @rule(i=st.integers(0, 99))
    def fork(self, i):
        kv, mid = self._pick(i)
        used = self.eng.pool.used_pages
        child = self.eng.kv_fork(kv)
        assert self.eng.pool.used_pages == used, "fork allocated pages"
        assert child.pages == kv.pages and not child.readonly
        self.handles.append((child, self._new_model(*self.model[mid])))

    @precondition(lambda self: self.handles)
    @rule(i=st.integers(0, 99), toks=tokens_st, gap=st.sampled_from([0, 0, 0, 3]))
    def pred(self, i, toks, gap):
        kv, mid = self._pick(i)
        if kv.readonly:
            with pytest.raises(KVError, match="read-only"):
                self.eng.pred(kv, toks)
            return
        mt, mp = self.model[mid]
        toks = toks[: max(0, MAX_LEN - len(mt))]
        if not toks:
            return
        start = (mp[-1] + 1 if mp else 0) + gap
        pos = list(range(start, start + len(toks)))
        d = self.eng.pred(kv, toks, pos if gap else None, outputs="all")
        assert d.logits.shape == (len(toks), VOCAB)
        mt.extend(toks)
        mp.extend(pos)

    @precondition(lambda self: len(self.handles) < MAX_HANDLES)
    @rule(base=st.integers(0, len(PROMPT_BASES) - 1), n=st.integers(2, MAX_LEN))
    def prompt(self, base, n):
        """A new file fed a prompt that may start like earlier ones: the prefix cache may give it
        their K/V (the checks below compare every file with a recompute)."""
        toks = PROMPT_BASES[base][:n]
        kv = self.eng.kv_create()
        d = self.eng.pred(kv, toks)
        assert d.logits.shape == (VOCAB,)
        self.handles.append((kv, self._new_model(toks, list(range(n)))))

    @precondition(lambda self: self.handles)
    @rule(i=st.integers(0, 99))
    def pred_out_of_pages(self, i):
        """A write bigger than the free pool fails with OutOfPages and changes nothing."""
        kv, mid = self._pick(i)
        if kv.readonly:
            return
        before = (kv.tokens, kv.positions, kv.pages, self.eng.pool.used_pages)
        n = (self.eng.pool.free_pages + 1) * self.eng.pool.page_size
        with pytest.raises(OutOfPages, match="out of KV pages"):
            self.eng.pred(kv, [7] * n)
        assert (kv.tokens, kv.positions, kv.pages, self.eng.pool.used_pages) == before

    @precondition(lambda self: self.handles)
    @rule(i=st.integers(0, 99), frac=st.floats(0, 1))
    def truncate(self, i, frac):
        kv, mid = self._pick(i)
        mt, mp = self.model[mid]
        n = int(len(mt) * frac)
        if kv.readonly:
            with pytest.raises(KVError, match="read-only"):
                self.eng.kv_truncate(kv, n)
            return
        self.eng.kv_truncate(kv, n)
        del mt[n:]
        del mp[n:]
        assert len(kv.pages) == -(-n // self.eng.pool.page_size)

    @precondition(lambda self: self.handles)
    @rule(i=st.integers(0, 99))
    def close(self, i):
        kv, mid = self.handles.pop(i % len(self.handles))
        self.eng.kv_close(kv)
        assert kv.closed
        with pytest.raises(KVError, match="closed"):
            self.eng.pred(kv, [1])

    @precondition(lambda self: self.names)
    @rule(data=st.data())
    def remove(self, data):
        name = data.draw(st.sampled_from(sorted(self.names)))
        self.eng.kv_remove(name)
        del self.names[name]
        with pytest.raises(KVError):  # KVNotFound
            self.eng.kv_open(name)

    @precondition(lambda self: self.handles)
    @rule(i=st.integers(0, 99))
    def check_logits(self, i):
        self._verify(self._pick(i)[0])

    # --- invariants ----------------------------------------------------------------------------------
    @invariant()
    def accounting(self):
        eng = self.eng
        eng.kvfs.check()
        for kv, mid in self.handles:
            mt, mp = self.model[mid]
            assert kv.tokens == mt and kv.positions == mp, f"{kv!r} holds {kv.tokens} but should hold {mt}"
            assert len(kv.pages) == -(-len(mt) // eng.pool.page_size)
        assert len(eng.kvfs.files) == len(self._live_ids()), "a file outlived its last name and handle (or died early)"
        assert sorted(eng.kvfs.named) == sorted(n if n.startswith("/") else f"/users/local/{n}" for n in self.names)
        pages = set()
        for f in eng.kvfs.files.values():
            pages.update(f.pages)
        assert eng.pool.used_pages == len(pages)

    def teardown(self):
        eng = self.eng
        try:
            for kv, _ in self.handles:  # every file's cache is still exact at the end
                self._verify(kv)
            for name in list(self.names):
                eng.kv_remove(name)
        finally:
            for kv, _ in self.handles:
                if not kv.closed:
                    eng.kv_close(kv)
        eng.kvfs.check()
        assert eng.kvfs.files == {} and eng.kvfs.named == {}
        assert eng.pool.free_pages == eng.pool.n_pages, f"{eng.pool.used_pages} pages leaked"


@pytest.mark.parametrize("page_size,examples", [(4, 24), (16, 8)])
def test_random_kvfs_operations(fresh_engine, page_size, examples):
    eng = fresh_engine(num_pages=96, page_size=page_size)

    class Machine(KVFSMachine):
        engine = eng

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            database=None,
        ),
    )
    assert eng.pool.free_pages == eng.pool.n_pages
    assert eng.kvfs.prefix_cache.reused_tokens > 0  # prompts did start alike, and the cache served them


def test_batch_decode_fast_path_leaves_what_it_cannot_take_to_reserve():
    """`KVFS.append_decodes` over one batch: a file with room in its last page and one at a page boundary
    take their slot at once; a fork sharing its last page (copy-on-write), a closed handle, a file at the
    position limit and one needing a page when none is free are left (-1) with nothing changed; the rows
    line up with the files taken, in order, and the page accounting stays exact."""
    from symphony_core.kvfs import KVFS
    from symphony_core.kvfs.pool import PagePool
    from symphony_core.model.forward_batch import DecodeRows

    ps = 4
    fs = KVFS(PagePool(7, ps, 1, 1, 2))

    def grown(n: int):
        kv = fs.create("u")
        r = fs.reserve(kv, list(range(n)), list(range(n)), frozenset())
        assert len(r.slots) == n
        return kv

    room, boundary, shared_src = grown(2), grown(4), grown(3)  # 1 + 1 + 1 pages
    shared = fs.fork(shared_src, "u")  # shares the partly filled last page
    closed = grown(1)
    fs.close(closed)
    limit = grown(5)  # 2 pages; its next position, 5, is the limit below
    kvs = [room, boundary, shared, closed, limit]
    before = [list(kv.file.tokens) if not kv.closed else None for kv in kvs]
    rows = DecodeRows()
    with fs.reserving():
        lengths = fs.append_decodes(kvs, [70, 71, 72, 73, 74], 5, rows)
    assert lengths == [2, 4, -1, -1, -1]
    assert list(rows.tokens) == [70, 71] and list(rows.positions) == [2, 4]
    assert list(rows.slots) == [room.file.pages[0] * ps + 2, boundary.file.pages[1] * ps]
    assert [list(c) for c in rows.contexts] == [fs.context_slots(room.file), fs.context_slots(boundary.file)]
    assert room.file.tokens == [0, 1, 70] and boundary.file.tokens == [0, 1, 2, 3, 71]
    assert [shared.file.tokens, limit.file.tokens] == [before[2], before[4]]
    fs.check()
    # No free page left: a file at a page boundary is left to `reserve` (which may evict or wait).
    full = grown(4)
    assert fs.pool.free_pages == 0, fs.stats()
    rows = DecodeRows()
    with fs.reserving():
        assert fs.append_decodes([full, room], [1, 2], 100, rows) == [-1, 3]
    assert full.file.tokens == [0, 1, 2, 3] and list(rows.tokens) == [2]
    fs.check()

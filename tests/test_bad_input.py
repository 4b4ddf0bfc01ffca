"""Must show 5 — bad input gets a clear error naming the problem, changes nothing, and the
engine keeps serving everyone else correctly (logits checked against transformers) afterwards.
"""

from __future__ import annotations

import re

import pytest
import torch

from symphony_core import (
    Dist,
    KVError,
    KVNotFound,
    KVPermissionError,
    OutOfPages,
    PredCall,
    PredError,
    Sampler,
)

TOL = 1e-3
PROMPT = [504, 3458, 282, 4649, 314, 2113, 30, 378, 1345]  # nine ordinary token ids


@pytest.fixture(scope="module")
def hf_ref(hf_model):
    """transformers' logits for short token sequences, cached."""
    cache: dict[tuple[int, ...], torch.Tensor] = {}

    def get(ids: list[int]) -> torch.Tensor:
        if tuple(ids) not in cache:
            with torch.inference_mode():
                cache[tuple(ids)] = hf_model(torch.tensor([ids])).logits[0].float()
        return cache[tuple(ids)]

    return get


@pytest.fixture
def serves(engine, hf_ref):
    """Call after an error: a normal `pred` still returns transformers' logits, and the
    page accounting is exact."""

    def check(eng=None) -> None:
        eng = eng or engine
        eng.kvfs.check()
        kv = eng.kv_create()
        try:
            d = eng.pred(kv, PROMPT, outputs="all")
            diff = (d.logits - hf_ref(PROMPT)).abs().max().item()
            assert diff <= TOL, f"after the error, logits are off by {diff:.2e}"
        finally:
            eng.kv_close(kv)
        eng.kvfs.check()

    return check


def snapshot(kv):
    return (kv.len, kv.tokens, kv.positions, kv.pages)


@pytest.fixture
def kv(engine):
    """A writable file holding PROMPT[:4]."""
    h = engine.kv_create()
    engine.pred(h, PROMPT[:4])
    yield h
    if not h.closed:
        engine.kv_close(h)


def test_pred_on_closed_handle(engine, serves):
    h = engine.kv_create()
    engine.pred(h, PROMPT[:3])
    engine.kv_close(h)
    with pytest.raises(KVError, match="closed handle"):
        engine.pred(h, [1])
    with pytest.raises(KVError, match="closed"):
        engine.kv_fork(h)
    with pytest.raises(KVError, match="already closed"):
        engine.kv_close(h)
    serves()


def test_pred_on_read_only_handle(engine, serves):
    owner = engine.kv_create("/shared/readonly_test.kv", user="alice")
    engine.pred(owner, PROMPT[:5])
    r = engine.kv_open("/shared/readonly_test.kv", "r", user="bob")
    try:
        before = snapshot(owner)
        with pytest.raises(KVError) as e:
            engine.pred(r, [1, 2])
        msg = str(e.value)
        assert "read-only" in msg and "fork it first" in msg and "/shared/readonly_test.kv" in msg
        with pytest.raises(KVError, match="read-only"):
            engine.kv_truncate(r, 1)
        assert snapshot(owner) == before and snapshot(r) == before
        # the suggested fix works
        child = engine.kv_fork(r, user="bob")
        engine.pred(child, PROMPT[5:])
        engine.kv_close(child)
    finally:
        engine.kv_close(r)
        engine.kv_close(owner)
        engine.kv_remove("/shared/readonly_test.kv", user="alice")
    serves()


@pytest.mark.parametrize("ids", [[], torch.empty(0, dtype=torch.long)], ids=["list", "tensor"])
def test_empty_token_ids(engine, kv, serves, ids):
    before = snapshot(kv)
    with pytest.raises(PredError, match="token_ids is empty"):
        engine.pred(kv, ids)
    assert snapshot(kv) == before
    serves()


@pytest.mark.parametrize("bad", [49152, 10**9, -1])
def test_out_of_vocabulary_ids(engine, kv, serves, bad):
    before = snapshot(kv)
    with pytest.raises(PredError) as e:
        engine.pred(kv, [5, bad, 7])
    assert str(bad) in str(e.value) and "vocabulary" in str(e.value) and "49152" in str(e.value)
    assert snapshot(kv) == before
    serves()


@pytest.mark.parametrize(
    "ids,words",
    [
        ([1.5], "1.5"),
        ("hello", "tokenize"),
        ([True, 2], "boolean"),
        (None, "NoneType"),
        (torch.tensor([1.0, 2.0]), "float32"),
        ([[1, 2]], "list"),
    ],
)
def test_non_integer_token_ids(engine, kv, serves, ids, words):
    before = snapshot(kv)
    with pytest.raises(PredError, match="token_ids") as e:
        engine.pred(kv, ids)
    assert words in str(e.value)
    assert snapshot(kv) == before
    serves()


def test_integer_like_ids_are_accepted(engine, serves, hf_ref):
    import numpy as np

    for ids in (torch.tensor(PROMPT), np.array(PROMPT), [np.int64(t) for t in PROMPT]):
        h = engine.kv_create()
        d = engine.pred(h, ids)
        assert (d.logits - hf_ref(PROMPT)[-1]).abs().max().item() <= TOL
        engine.kv_close(h)


def test_positions_past_the_context(engine, kv, serves):
    ctx = engine.config.max_positions
    before = snapshot(kv)
    with pytest.raises(PredError, match=f"context of {ctx}") as e:
        engine.pred(kv, [1, 2], positions=[ctx - 1, ctx])
    assert str(ctx) in str(e.value)
    with pytest.raises(PredError, match="positions"):
        engine.pred(kv, [1], positions=[-3])
    with pytest.raises(PredError, match="2 positions for 1 tokens"):
        engine.pred(kv, [1], positions=[4, 5])
    assert snapshot(kv) == before
    # the last position is fine; continuing past it by default is not
    engine.pred(kv, [1], positions=[ctx - 1])
    filled = snapshot(kv)
    with pytest.raises(PredError, match=f"context of {ctx}"):
        engine.pred(kv, [2])
    assert snapshot(kv) == filled
    serves()


def test_open_missing_file(engine, serves):
    with pytest.raises(KVNotFound, match="/users/local/no_such_file.kv"):
        engine.kv_open("no_such_file.kv")
    with pytest.raises(KVNotFound, match="/shared/no_such_file.kv"):
        engine.kv_open("/shared/no_such_file.kv", user="bob")
    with pytest.raises(KVNotFound):
        engine.kv_remove("no_such_file.kv")
    serves()


def test_open_someone_elses_private_file(engine, serves):
    h = engine.kv_create("badinput_private.kv", user="alice")
    engine.pred(h, PROMPT[:3])
    try:
        with pytest.raises(KVPermissionError) as e:
            engine.kv_open("/users/alice/badinput_private.kv", user="mallory")
        assert "permission denied" in str(e.value) and "/users/alice/badinput_private.kv" in str(e.value)
        assert "alice" in str(e.value)
        with pytest.raises(KVPermissionError, match="alice"):
            engine.kv_remove("/users/alice/badinput_private.kv", user="mallory")
        assert h.tokens == PROMPT[:3] and "/users/alice/badinput_private.kv" in engine.kvfs.named
    finally:
        engine.kv_close(h)
        engine.kv_remove("badinput_private.kv", user="alice")
    serves()


@pytest.mark.parametrize(
    "call,words",
    [
        (lambda e: e.kv_create("/etc/passwd"), "outside"),
        (lambda e: e.kv_create(""), "non-empty"),
        (lambda e: e.kv_create("/shared/"), "directory"),
        (lambda e: e.kv_open("x.kv", mode="a"), "mode"),
    ],
)
def test_bad_paths_and_modes(engine, serves, call, words):
    with pytest.raises(KVError, match=words):
        call(engine)
    serves()


@pytest.mark.parametrize("n", [-1, 5, 1.5, True])
def test_bad_truncate(engine, kv, serves, n):
    before = snapshot(kv)
    with pytest.raises(KVError, match=r"n must be an int in \[0, 4\]"):
        engine.kv_truncate(kv, n)
    assert snapshot(kv) == before
    serves()


def test_running_out_of_pages(fresh_engine, serves):
    eng = fresh_engine(num_pages=8, page_size=4)
    f = eng.kv_create()
    eng.pred(f, PROMPT[:7])  # 2 pages, the second with one free slot
    first = eng.kv_fork(f)
    ref = eng.pred(first, [PROMPT[7]]).logits.clone()  # the fork copied f's last page: 1 page
    filler = eng.kv_create()
    eng.pred(filler, list(range(100, 116)))  # 4 pages: 1 left free
    assert eng.pool.free_pages == 1
    before, used = snapshot(f), eng.pool.used_pages
    with pytest.raises(OutOfPages) as e:
        eng.pred(f, PROMPT[7:] + PROMPT)  # 11 more tokens: needs 3 pages
    assert "out of KV pages" in str(e.value) and "need 3, 1 free of 8" in str(e.value)
    assert snapshot(f) == before and eng.pool.used_pages == used
    eng.kvfs.check()
    # the file's cache is untouched: the same next-token logits as before
    probe = eng.kv_fork(f)
    assert torch.allclose(eng.pred(probe, [PROMPT[7]]).logits, ref, atol=1e-5)
    # a copy-on-write that finds no page fails the same way and changes nothing
    child = eng.kv_fork(f)
    assert eng.pool.free_pages == 0
    with pytest.raises(OutOfPages, match="need 1, 0 free"):
        eng.pred(child, [1])
    assert snapshot(child) == before and snapshot(f) == before
    eng.kvfs.check()
    # in a batch only the call that does not fit fails
    eng.kv_close(probe)
    eng.kv_close(child)
    small, big = eng.kv_create(), eng.kv_create()
    res = eng.pred_batch([PredCall(big, list(range(200, 220))), PredCall(small, PROMPT[:3])])
    assert isinstance(res[0], OutOfPages) and big.len == 0 and big.pages == []
    assert isinstance(res[1], Dist) and small.len == 3
    eng.kvfs.check()
    for h in (f, first, filler, small, big):
        eng.kv_close(h)
    assert eng.pool.free_pages == eng.pool.n_pages
    serves(eng)  # and the engine keeps serving correct logits
    assert eng.pool.free_pages == eng.pool.n_pages


def test_running_out_of_pages_returns_every_page(fresh_engine):
    eng = fresh_engine(num_pages=4, page_size=4)
    a = eng.kv_create()
    with pytest.raises(OutOfPages, match="need 5, 4 free of 4"):
        eng.pred(a, list(range(1, 18)))
    assert a.len == 0 and eng.pool.free_pages == 4
    eng.pred(a, list(range(1, 17)))  # exactly the pool
    assert eng.pool.free_pages == 0
    with pytest.raises(OutOfPages):
        eng.pred(a, [1])
    assert a.len == 16
    eng.kv_close(a)
    assert eng.pool.free_pages == eng.pool.n_pages
    eng.kvfs.check()


@pytest.mark.parametrize(
    "mask,words",
    [
        (torch.ones(10, dtype=torch.bool), "mask must be bool"),
        (torch.zeros(49152, dtype=torch.bool), "allows no token"),
        ([5, 49152], "outside the vocabulary"),
        ([], "allows no token"),
        (torch.ones(3, 49152, dtype=torch.bool), "mask must be bool"),  # 3 rows for 1 output
        ("abc", "mask"),
    ],
)
def test_bad_mask(engine, kv, serves, mask, words):
    before = snapshot(kv)
    with pytest.raises(PredError, match=words):
        engine.pred(kv, [1], mask=mask)
    assert snapshot(kv) == before
    serves()


def test_good_mask_restricts_the_distribution(engine, hf_ref):
    allowed = [11, 22, 33]
    a, b = engine.kv_create(), engine.kv_create()
    try:
        d = engine.pred(a, PROMPT, mask=allowed)
        full = engine.pred(b, PROMPT)
        assert d.argmax() in allowed and d.logits[allowed].isfinite().all()
        assert torch.isinf(d.logits).sum() == d.vocab_size - 3
        assert torch.allclose(d.logits[allowed], full.logits[allowed], atol=1e-4)
        assert abs(float(d.probs[allowed].sum()) - 1) < 1e-5
    finally:
        engine.kv_close(a)
        engine.kv_close(b)


@pytest.mark.parametrize(
    "make,words",
    [
        (lambda: "nucleus", "sampler must be a Sampler or 'greedy'"),
        (lambda: 42, "sampler must be a Sampler"),
        (lambda: Sampler(temperature=-1.0), "temperature"),
        (lambda: Sampler(top_p=0.0), "top_p"),
        (lambda: Sampler(top_p=1.5), "top_p"),
        (lambda: Sampler(top_k=-2), "top_k"),
        (lambda: Sampler(min_p=1.0), "min_p"),
    ],
)
def test_bad_sampler(engine, kv, serves, make, words):
    before = snapshot(kv)
    with pytest.raises(PredError, match=words):
        engine.pred(kv, [1], sampler=make())
    assert snapshot(kv) == before
    serves()


@pytest.mark.parametrize("outputs,words", [([3], r"\[3\]"), ([0, -4], "-4"), ("first", "first"), ([1.5], "1.5")])
def test_outputs_out_of_range(engine, kv, serves, outputs, words):
    before = snapshot(kv)
    with pytest.raises(PredError, match="outputs") as e:
        engine.pred(kv, [1, 2, 3], outputs=outputs)
    assert re.search(words, str(e.value))
    assert snapshot(kv) == before
    serves()


def test_bad_hints(engine, kv, serves):
    with pytest.raises(KVError, match="keep_for"):
        engine.kv_hint(kv, keep_for=-5)
    with pytest.raises(KVError, match="priority"):
        engine.kv_hint(kv, priority="low")
    with pytest.raises(KVError, match="priority"):  # nothing is half-applied
        engine.kv_hint(kv, keep_for=10, priority=0.5)
    assert kv.file.hint_priority is None and kv.file.hint_keep_until is None
    serves()


def test_one_bad_call_in_a_batch_leaves_the_others_correct(engine, hf_ref):
    p2 = PROMPT[::-1]
    good_prefill, good_decode, good_all = engine.kv_create(), engine.kv_create(), engine.kv_create()
    engine.pred(good_decode, p2[:-1])
    closed = engine.kv_create()
    engine.kv_close(closed)
    owner = engine.kv_create("/shared/batch_ro.kv", user="alice")
    ro = engine.kv_open("/shared/batch_ro.kv", "r", user="bob")
    oov = engine.kv_create()
    empty = engine.kv_create()
    calls = [
        PredCall(good_prefill, PROMPT),
        PredCall(oov, [1, 99999]),
        PredCall(good_decode, p2[-1:]),
        PredCall(closed, [1]),
        PredCall(good_all, PROMPT[:5], outputs="all"),
        PredCall(ro, [1]),
        PredCall(empty, []),
        PredCall(good_all, PROMPT[5:], outputs=[0, 5]),  # outputs out of range
    ]
    try:
        res = engine.pred_batch(calls)
        assert isinstance(res[1], PredError) and "99999" in str(res[1])
        assert isinstance(res[3], KVError) and "closed" in str(res[3])
        assert isinstance(res[5], KVError) and "read-only" in str(res[5])
        assert isinstance(res[6], PredError) and "empty" in str(res[6])
        assert isinstance(res[7], PredError) and "outputs" in str(res[7])
        for r in (res[0], res[2], res[4]):
            assert isinstance(r, Dist), r
        assert (res[0].logits - hf_ref(PROMPT)[-1]).abs().max().item() <= TOL
        assert (res[2].logits - hf_ref(p2)[-1]).abs().max().item() <= TOL
        assert (res[4].logits - hf_ref(PROMPT)[:5]).abs().max().item() <= TOL
        assert oov.len == 0 and empty.len == 0 and owner.len == 0 and good_all.len == 5
        # the engine goes on: the file whose second call failed continues correctly
        d = engine.pred(good_all, PROMPT[5:], outputs="all")
        assert (d.logits - hf_ref(PROMPT)[5:]).abs().max().item() <= TOL
        engine.kvfs.check()
    finally:
        for h in (good_prefill, good_decode, good_all, ro, oov, empty, owner):
            engine.kv_close(h)
        engine.kv_remove("/shared/batch_ro.kv", user="alice")

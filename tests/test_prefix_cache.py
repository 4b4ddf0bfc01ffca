"""The prefix cache (symphony_core/kvfs/prefix_cache.py): a prompt written into an empty file reuses
the K/V of a cached prompt of the same user that starts alike; the logits are the recompute's (to
float rounding), pages are accounted exactly, and nothing stale or foreign is ever reused."""

from __future__ import annotations

import pytest
import torch

from symphony_core.errors import OutOfPages
from tests.lips_for_tests import greedy

TEXT = (
    "The history of astronomy is the story of people looking up at the night sky and trying to explain "
    "what they saw. Early farmers tracked the seasons by the rising of bright stars."
)
ATOL = 1e-3


@pytest.fixture(scope="module")
def pair():
    """An engine with the cache and one without, to recompute on."""
    from symphony_core import Engine

    cached, plain = Engine(num_pages=96), Engine(num_pages=96, prefix_cache=False)
    yield cached, plain
    cached.shutdown()
    plain.shutdown()


def _recompute(plain, tokens: list[int]) -> torch.Tensor:
    kv = plain.kv_create()
    try:
        return plain.pred(kv, tokens).logits
    finally:
        plain.kv_close(kv)


def test_the_same_prompt_shares_full_pages_and_computes_only_its_last_token(pair):
    eng, plain = pair
    cache = eng.kvfs.prefix_cache
    ids = eng.tokenize(TEXT)[:40]  # two full pages and a part of a third
    a = eng.kv_create()
    first = eng.pred(a, ids)
    before = cache.reused_tokens
    b = eng.kv_create()
    second = eng.pred(b, ids)
    assert cache.reused_tokens - before == len(ids) - 1  # all but the last token came from the cache
    assert a.pages[:2] == b.pages[:2] and a.pages[2] != b.pages[2]  # full pages shared, the last one copied
    assert all(eng.pool.refcount[p] == 2 for p in a.pages[:2])
    assert b.len == len(ids) and b.tokens == ids and b.positions == list(range(len(ids)))
    ref = _recompute(plain, ids)
    for d in (first, second):
        assert torch.allclose(d.logits, ref, atol=ATOL) and d.argmax() == int(ref.argmax())
    # both go on decoding as if each had computed its own prompt
    nxt = first.argmax()
    assert torch.allclose(eng.pred(a, [nxt]).logits, eng.pred(b, [nxt]).logits, atol=ATOL)
    for kv in (a, b):
        eng.kv_close(kv)
    eng.kvfs.check()


def test_a_prompt_that_starts_alike_copies_the_matching_slots_and_computes_the_rest(pair):
    eng, plain = pair
    cache = eng.kvfs.prefix_cache
    ids = eng.tokenize(TEXT)
    a = eng.kv_create()
    eng.pred(a, ids[:12])
    other = ids[:9] + [5, 6, 7, 8]  # the first 9 tokens alike, then not
    before = cache.reused_tokens
    b = eng.kv_create()
    d = eng.pred(b, other)
    assert cache.reused_tokens - before == 9
    assert b.pages[0] != a.pages[0] and eng.pool.refcount[a.pages[0]] == 1  # a copy: a keeps its page alone
    assert torch.allclose(d.logits, _recompute(plain, other), atol=ATOL)
    for kv in (a, b):
        eng.kv_close(kv)
    eng.kvfs.check()


def test_outputs_for_every_position_are_all_computed(pair):
    eng, plain = pair
    ids = eng.tokenize(TEXT)[:20]
    a = eng.kv_create()
    eng.pred(a, ids)
    b = eng.kv_create()
    before = eng.kvfs.prefix_cache.reused_tokens
    d = eng.pred(b, ids, outputs="all")
    assert eng.kvfs.prefix_cache.reused_tokens == before  # row 0 wants logits: nothing can be skipped
    assert d.logits.shape[0] == len(ids)
    for kv in (a, b):
        eng.kv_close(kv)


def test_another_users_prompt_is_never_reused(pair):
    eng, _ = pair
    ids = eng.tokenize("A user's own secret prompt that nobody else should speed up")
    a = eng.kv_create(user="alice")
    eng.pred(a, ids)
    before = eng.kvfs.prefix_cache.reused_tokens
    b = eng.kv_create(user="bob")
    eng.pred(b, ids)
    assert eng.kvfs.prefix_cache.reused_tokens == before
    c = eng.kv_create(user="alice")
    eng.pred(c, ids)
    assert eng.kvfs.prefix_cache.reused_tokens == before + len(ids) - 1
    for kv in (a, b, c):
        eng.kv_close(kv)


def test_a_truncated_and_rewritten_page_is_not_reused_for_its_old_tokens(pair):
    eng, plain = pair
    ids = [7777] + eng.tokenize(TEXT)[:13]  # a start no other test's prompt has
    a = eng.kv_create()
    eng.pred(a, ids)
    eng.kv_truncate(a, 6)  # the page is written again from slot 6 on
    eng.pred(a, [11, 12, 13, 14, 15, 16, 17, 18])
    b = eng.kv_create()
    before = eng.kvfs.prefix_cache.reused_tokens
    d = eng.pred(b, ids)
    assert eng.kvfs.prefix_cache.reused_tokens == before  # the page that held them was forgotten
    assert torch.allclose(d.logits, _recompute(plain, ids), atol=ATOL)
    for kv in (a, b):
        eng.kv_close(kv)
    eng.kvfs.check()


def test_cached_pages_count_as_free_and_are_taken_back_when_the_pool_runs_short(fresh_engine):
    eng = fresh_engine(num_pages=24)
    pool = eng.pool
    ids = eng.tokenize(TEXT)
    for i in range(6):  # six different prompts of three pages each, closed: all kept in the cache
        kv = eng.kv_create()
        eng.pred(kv, [i + 1] + ids[:40])
        eng.kv_close(kv)
    assert pool.cached_pages >= 12 and pool.free_pages == pool.n_pages
    eng.kvfs.check()
    held = []
    for _ in range(pool.n_pages):  # every page, cached ones included, can be allocated again
        kv = eng.kv_create()
        eng.pred(kv, [3] * 16)
        held.append(kv)
    assert pool.free_pages == 0 and pool.cached_pages == 0
    with pytest.raises(OutOfPages):
        eng.pred(eng.kv_create(), [3] * 16)
    for kv in held:
        eng.kv_close(kv)
    eng.kvfs.check()
    assert pool.free_pages == pool.n_pages
    eng.shutdown()


def test_programs_with_alike_prompts_reuse_and_agree_with_a_recompute(pair):
    """LIPs through the batch scheduler: many programs prefilling overlapping prompts give the tokens
    a cache-less engine gives (greedy, a few steps), and the cache saved most of their prompt work."""
    eng, plain = pair
    ids = eng.tokenize(TEXT)
    prompts = [ids[: 10 + i % 7] for i in range(24)]
    before = eng.kvfs.prefix_cache.reused_tokens
    got = [p.result(timeout=120) for p in [eng.run(greedy, pr, 4) for pr in prompts]]
    want = [p.result(timeout=120) for p in [plain.run(greedy, pr, 4) for pr in prompts]]
    assert got == want
    assert eng.kvfs.prefix_cache.reused_tokens - before >= sum(len(p) for p in prompts) // 2
    eng.kvfs.check()


def test_of_alike_prompts_competing_for_a_batch_one_runs_first_and_the_rest_reuse_it(fresh_engine):
    """Cache-aware scheduling: when the queued prompts overflow the batch, one of those that start alike
    runs first and the others wait a batch, then take its K/V from the cache."""
    eng = fresh_engine(num_pages=64, lip_runner="greenlets")
    eng.runtime.batch.token_budget = 64  # less than the six prompts together
    cache = eng.kvfs.prefix_cache
    prompt = eng.tokenize(TEXT)[:12]

    def many(sym, n: int) -> list[int]:
        def one(sym) -> int:
            kv = sym.kv_create()
            tok = sym.pred(kv, prompt).argmax()
            sym.kv_close(kv)
            return tok

        hs = [sym.spawn(one) for _ in range(n)]
        return [h.join() for h in hs]

    log = eng.runtime.batch.log
    first = log.total_batches
    got = eng.run(many, 6).result(timeout=60)
    assert len(set(got)) == 1
    assert [len(r.members) for r in log.since(first)] == [1, 5]
    assert cache.reused_tokens == 5 * 11
    eng.shutdown()

"""Must show 1 — parity: `pred` logits equal transformers' own forward on the same fp32 weights.

Every comparison is against `hf_model(ids).logits` on the *full* token sequence, so chunking,
forking, truncating and batching must leave no trace in the numbers (max |diff| <= 1e-3).
"""

from __future__ import annotations

import random

import pytest
import torch

from symphony_core import Dist, PredCall

TOL = 1e-3
VOCAB = 49152
N_PROMPTS = 20


def _make_prompts() -> list[list[int]]:
    rng = random.Random(1234)
    # Fixed edges (1 token, one page, one past a page, the 300 maximum) + log-uniform lengths,
    # which keeps the run short while still covering long prompts.
    lengths = [1, 16, 17, 300]
    while len(lengths) < N_PROMPTS:
        lengths.append(int(round(10 ** rng.uniform(0, 2.48))))
    lengths = [min(300, max(1, n)) for n in lengths]
    return [[rng.randrange(VOCAB) for _ in range(n)] for n in lengths]


PROMPTS = _make_prompts()


@pytest.fixture(scope="module")
def hf_logits(hf_model):
    """transformers' logits for a token sequence, cached (several tests reuse a prompt)."""
    cache: dict[tuple[int, ...], torch.Tensor] = {}

    def get(ids: list[int]) -> torch.Tensor:
        key = tuple(ids)
        if key not in cache:
            with torch.inference_mode():
                cache[key] = hf_model(torch.tensor([ids])).logits[0].float()
        return cache[key]

    return get


def assert_close(ours: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    assert ours.shape == ref.shape, f"{what}: shape {tuple(ours.shape)} != {tuple(ref.shape)}"
    diff = (ours.float() - ref).abs().max().item()
    assert diff <= TOL, f"{what}: max |logit diff| {diff:.2e} > {TOL}"


def rows(d: Dist) -> torch.Tensor:
    """A Dist's logits as [n, V] (a single-position Dist is [V])."""
    return d.logits if d.logits.dim() == 2 else d.logits[None]


def test_prompt_set_covers_the_range():
    lengths = [len(p) for p in PROMPTS]
    assert len(PROMPTS) >= 20 and min(lengths) == 1 and max(lengths) == 300
    assert all(1 <= n <= 300 for n in lengths)


@pytest.mark.parametrize("i", range(N_PROMPTS), ids=[f"len{len(p)}" for p in PROMPTS])
def test_whole_prompt_matches_transformers(engine, hf_logits, i):
    ids = PROMPTS[i]
    kv = engine.kv_create()
    try:
        d = engine.pred(kv, ids, outputs="all")
        assert len(d) == len(ids)
        assert_close(rows(d), hf_logits(ids), f"prompt {i} (len {len(ids)})")
        assert kv.tokens == ids and kv.positions == list(range(len(ids)))
        if len(ids) <= 40:  # outputs="last" computes the LM head on the last row only
            kv2 = engine.kv_create()
            last = engine.pred(kv2, ids)
            assert last.logits.shape == (VOCAB,)
            assert_close(last.logits[None], hf_logits(ids)[-1:], f"prompt {i} last")
            engine.kv_close(kv2)
    finally:
        engine.kv_close(kv)


def _random_chunks(n: int, rng: random.Random) -> list[int]:
    cuts = sorted(rng.sample(range(1, n), k=min(n - 1, rng.randint(2, 7))))
    bounds = [0, *cuts, n]
    return [b - a for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("i", [3, 2, 1, *[j for j in range(4, N_PROMPTS) if len(PROMPTS[j]) >= 30][:3]])
def test_chunked_prompt_matches_transformers(engine, hf_logits, i):
    ids = PROMPTS[i]
    rng = random.Random(i)
    sizes = _random_chunks(len(ids), rng)
    assert len(sizes) >= 2 and sum(sizes) == len(ids)
    kv = engine.kv_create()
    try:
        got, at = [], 0
        for n in sizes:
            d = engine.pred(kv, ids[at : at + n], outputs="all")
            got.append(rows(d))
            at += n
            assert kv.len == at
        assert_close(torch.cat(got), hf_logits(ids), f"prompt {i} in chunks {sizes}")
    finally:
        engine.kv_close(kv)


def test_token_by_token_matches_transformers(engine, hf_logits):
    ids = PROMPTS[2]  # 17 tokens: crosses a page boundary one decode at a time
    kv = engine.kv_create()
    got = torch.stack([engine.pred(kv, [t]).logits for t in ids])
    engine.kv_close(kv)
    assert_close(got, hf_logits(ids), "one token per pred")


@pytest.mark.parametrize("split", [5, 16, 33])  # mid-page (shared partial page) and page-aligned
def test_fork_then_continue_matches_transformers(engine, hf_logits, split):
    full = PROMPTS[3][:80]
    other = [t * 7 % VOCAB for t in full[split:]]
    parent = engine.kv_create()
    engine.pred(parent, full[:split])
    child = engine.kv_fork(parent)
    try:
        assert child.tokens == full[:split] and child.pages == parent.pages
        d_child = engine.pred(child, full[split:], outputs="all")
        assert_close(rows(d_child), hf_logits(full)[split:], f"child after fork at {split}")
        # the parent continues differently: the child's write must not have touched its pages
        d_parent = engine.pred(parent, other[:40], outputs="all")
        ref = hf_logits(full[:split] + other[:40])[split:]
        assert_close(rows(d_parent), ref, f"parent after child wrote (fork at {split})")
        # and the child's cache is still intact after the parent wrote: one more step
        nxt = engine.pred(child, [11])
        assert_close(nxt.logits[None], hf_logits(full + [11])[-1:], "child after parent wrote")
    finally:
        engine.kv_close(child)
        engine.kv_close(parent)


@pytest.mark.parametrize("keep", [0, 9, 16, 23])
def test_truncate_and_refeed_matches_transformers(engine, hf_logits, keep):
    full = PROMPTS[3]
    junk = [(t + 101) % VOCAB for t in full[:50]]
    kv = engine.kv_create()
    try:
        engine.pred(kv, full[:keep] + junk[keep:])  # a wrong continuation after `keep` tokens
        engine.kv_truncate(kv, keep)
        assert kv.len == keep and kv.tokens == full[:keep]
        assert len(kv.pages) == -(-keep // engine.pool.page_size)
        d = engine.pred(kv, full[keep:60], outputs="all")
        assert_close(rows(d), hf_logits(full[:60])[keep:], f"truncate to {keep} and re-feed")
    finally:
        engine.kv_close(kv)


def test_truncate_fork_below_shared_pages(engine, hf_logits):
    full = PROMPTS[3]
    parent = engine.kv_create()
    engine.pred(parent, full[:50])
    child = engine.kv_fork(parent)
    try:
        engine.kv_truncate(child, 20)  # inside the shared second page
        d_child = engine.pred(child, full[100:130], outputs="all")
        assert_close(rows(d_child), hf_logits(full[:20] + full[100:130])[20:], "truncated fork re-fed")
        d_parent = engine.pred(parent, full[50:70], outputs="all")
        assert_close(rows(d_parent), hf_logits(full[:70])[50:], "parent of a truncated fork")
    finally:
        engine.kv_close(child)
        engine.kv_close(parent)


def test_batched_mixed_prefill_and_decode_matches_transformers(engine, hf_logits):
    """One forward pass: fresh prefills, prefills on top of a cache, single-token decodes,
    a one-token fresh prompt, and two calls on the same file (the second must see the first)."""
    P = PROMPTS
    long_ = next(p for p in P if len(p) == 300)
    mids = [p for p in P if 20 <= len(p) <= 120][:3]
    assert len(mids) == 3
    one = next(p for p in P if len(p) == 1)
    plan = [  # (prompt, tokens already in the file, output spec)
        (long_, 299, "all"),  # decode at position 299
        (mids[0], 0, "all"),  # fresh prefill
        (mids[1], len(mids[1]) - 1, "last"),  # decode
        (mids[2], len(mids[2]) // 2, "all"),  # chunk on top of a cache
        (one, 0, "all"),  # fresh one-token prompt (joins the decode group)
        (long_[:40], 13, [0, -1, 5]),  # chunk with picked outputs
    ]
    files, calls = [], []
    for ids, pre, out in plan:
        kv = engine.kv_create()
        if pre:
            engine.pred(kv, ids[:pre])
        files.append(kv)
        calls.append(PredCall(kv, ids[pre:], outputs=out))
    # two calls on one file in the same batch: 10 tokens, then 1 more
    same = engine.kv_create()
    files.append(same)
    calls += [PredCall(same, long_[:10], outputs="all"), PredCall(same, long_[10:11], outputs="all")]
    try:
        res = engine.pred_batch(calls)
        for (ids, pre, out), r in zip(plan, res):
            assert isinstance(r, Dist), r
            ref = hf_logits(ids)[pre:]
            if out == "last":
                ref = ref[-1:]
            elif isinstance(out, list):
                ref = ref[[o % (len(ids) - pre) for o in out]]
            assert_close(rows(r), ref, f"batched member len={len(ids)} pre={pre} out={out}")
        assert_close(rows(res[-2]), hf_logits(long_)[:10], "same file, first call")
        assert_close(rows(res[-1]), hf_logits(long_)[10:11], "same file, second call")
        assert same.positions == list(range(11)) and same.tokens == long_[:11]
        engine.kvfs.check()
    finally:
        for kv in files:
            engine.kv_close(kv)


def test_batched_decode_steps_match_transformers(engine, hf_logits):
    """Several sequences of different lengths decoded together for a few steps."""
    seqs = [p for p in PROMPTS if 2 <= len(p) <= 80][:5]
    assert len(seqs) == 5
    steps = 3
    files = [engine.kv_create() for _ in seqs]
    try:
        for kv, ids in zip(files, seqs):
            engine.pred(kv, ids[:-steps] if len(ids) > steps else ids[:1])
        for kv in files:
            assert kv.len >= 1
        while any(kv.len < len(ids) for kv, ids in zip(files, seqs)):
            calls = [PredCall(kv, [ids[kv.len]]) for kv, ids in zip(files, seqs) if kv.len < len(ids)]
            who = [(kv, ids) for kv, ids in zip(files, seqs) if kv.len < len(ids)]
            res = engine.pred_batch(calls)
            for (kv, ids), r in zip(who, res):
                assert_close(r.logits[None], hf_logits(ids)[kv.len - 1 : kv.len], f"decode len={len(ids)} at {kv.len}")
    finally:
        for kv in files:
            engine.kv_close(kv)

"""Every attention path of the paged forward against transformers' own forward (fp32, ≤ 1e-3).

Paths: causal square (a fresh prompt), chunk with a prefix (a prompt fed in pieces), a decode
group of equal context lengths and one of unequal lengths — alone and mixed with prefills in
one `pred_batch`. Each check recomputes the whole file with transformers and compares logits.
The CUDA flash-attn path cannot run here; its glue (block tables, sequence lengths, the causal
alignment) is checked against SDPA with a torch stand-in for the kernel.
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from symphony_core import OutOfPages, PredCall
from symphony_core.model.attention import FLASH_BLOCK, QUERY_BLOCK, FlashPaged, TorchSDPA, _causal_in_blocks
from symphony_core.model.forward_batch import ForwardBatch, SeqInput

TOL = 1e-3


def _prompt(n: int, seed: int, vocab: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, vocab) for _ in range(n)]


def _reference(hf_model, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return hf_model(torch.tensor([tokens])).logits[0].float()


def _close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    diff = (got.float() - want).abs().max().item()
    assert diff <= TOL, f"{what}: max abs diff {diff:.2e} > {TOL}"


@pytest.fixture
def kvs(engine):
    made = []

    def make():
        kv = engine.kv_create()
        made.append(kv)
        return kv

    yield make
    for kv in made:
        engine.kv_close(kv)


def test_groups_cover_every_path():
    """The batch builder sorts sequences into the four attention paths the model implements."""

    def seq(n_new: int, n_ctx: int) -> SeqInput:
        ctx = list(range(100, 100 + n_ctx))
        return SeqInput([1] * n_new, list(range(n_ctx - n_new, n_ctx)), ctx[-n_new:], ctx, [n_new - 1])

    equal = ForwardBatch.build([seq(1, 7), seq(1, 7)])
    assert len(equal.groups) == 1 and equal.groups[0].mask is None and not equal.groups[0].causal
    unequal = ForwardBatch.build([seq(1, 7), seq(1, 12)])
    assert unequal.groups[0].mask is not None
    square = ForwardBatch.build([seq(40, 40)])
    assert square.groups[0].causal and square.groups[0].mask is None
    prefixed = ForwardBatch.build([seq(5, 200)])
    assert not prefixed.groups[0].causal and prefixed.groups[0].mask is not None
    mixed = ForwardBatch.build([seq(1, 7), seq(40, 40), seq(1, 3), seq(4, 200)])
    assert len(mixed.groups) == 3
    rows = torch.cat([g.rows for g in mixed.groups]).sort().values
    assert rows.tolist() == list(range(mixed.token_ids.shape[0]))
    # Short chunks over short contexts share one decode-style group of their own, a row per token
    # (the causal mask row by row); on CUDA every chunk keeps a group of its own.
    folded = ForwardBatch.build([seq(1, 700), seq(5, 5), seq(3, 9)])
    decode, g = folded.groups
    assert decode.lengths == [700] and g.n_query == 1 and g.lengths == [1, 2, 3, 4, 5, 7, 8, 9]
    assert g.rows.tolist() == list(range(1, 9)) and g.context_len == 9  # not padded to the decode's 700
    fourth = g.context_slots.view(8, 9)[3]  # the 4th token of the 5-token chunk sees slots 100..103
    assert fourth[:4].tolist() == [100, 101, 102, 103] and g.mask[3, 0, 0].tolist() == [True] * 4 + [False] * 5


@pytest.mark.parametrize(("before", "nq"), [(0, 3 * QUERY_BLOCK), (0, 150), (37, 2 * QUERY_BLOCK + 5)])
def test_causal_attention_in_query_blocks_equals_one_causal_call(before, nq):
    """A long chunk's blocks each see only their own keys, and together equal SDPA's masked whole."""
    torch.manual_seed(before + nq)
    q, k, v = torch.randn(1, 9, nq, 64), torch.randn(1, 3, before + nq, 64), torch.randn(1, 3, before + nq, 64)
    visible = torch.arange(before + nq)[None, :] <= torch.arange(before, before + nq)[:, None]
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, enable_gqa=True)  # [1, H, Q, D]
    got = _causal_in_blocks(q, k, v, before)  # [Q, H, D]
    torch.testing.assert_close(got, want[0].transpose(0, 1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(_causal_in_blocks(q, k, v, before), got, rtol=0, atol=0)  # its masks, cached


def test_single_prompt_all_positions(engine, hf_model, kvs):
    toks = _prompt(200, 1, engine.config.vocab_size)
    d = engine.pred(kvs(), toks, outputs="all")
    _close(d.logits, _reference(hf_model, toks), "200-token prompt (causal square)")


def test_prompt_in_chunks(engine, hf_model, kvs):
    toks = _prompt(200, 2, engine.config.vocab_size)
    want = _reference(hf_model, toks)
    kv = kvs()
    start = 0
    for size in (1, 37, 5, 64, 1, 92):  # chunks with a prefix, including single tokens
        d = engine.pred(kv, toks[start : start + size], outputs="all")
        _close(d.logits, want[start : start + size], f"chunk {start}:{start + size}")
        start += size
    assert start == len(toks)


def test_mixed_batch_prefill_and_decode(engine, hf_model, kvs):
    vocab = engine.config.vocab_size
    # Files with prefixes of different lengths, then one batch that holds: single-token decodes
    # of unequal context, a fresh prompt (causal square) and a chunk on top of a prefix.
    prefixes = [_prompt(n, 10 + n, vocab) for n in (3, 17, 40, 129)]
    files = []
    for p in prefixes:
        kv = kvs()
        engine.pred(kv, p)
        files.append((kv, list(p)))
    fresh, fresh_toks = kvs(), _prompt(61, 99, vocab)
    chunk_kv, chunk_prefix = kvs(), _prompt(50, 98, vocab)
    engine.pred(chunk_kv, chunk_prefix)
    chunk_new = _prompt(23, 97, vocab)

    calls, expect = [], []
    for i, (kv, toks) in enumerate(files):
        t = 1000 + i
        calls.append(PredCall(kv, [t]))
        toks.append(t)
        expect.append((toks, -1))
    calls.insert(2, PredCall(fresh, fresh_toks, outputs="all"))
    expect.insert(2, (fresh_toks, None))
    calls.append(PredCall(chunk_kv, chunk_new, outputs="all"))
    expect.append((chunk_prefix + chunk_new, None))

    for res, (toks, which) in zip(engine.pred_batch(calls), expect):
        want = _reference(hf_model, toks)
        if which is None:
            n = res.logits.shape[0] if res.logits.dim() == 2 else 1
            _close(res.logits, want[-n:], f"prefill in mixed batch ({len(toks)} tokens)")
        else:
            _close(res.logits, want[which], f"decode in mixed batch (context {len(toks)})")


def test_decode_groups_equal_and_unequal(engine, hf_model, kvs):
    vocab = engine.config.vocab_size
    for lengths in ((33, 33, 33), (5, 48, 200, 16)):
        seqs = []
        for j, n in enumerate(lengths):
            kv, toks = kvs(), _prompt(n, 500 + 7 * j + n, vocab)
            engine.pred(kv, toks)
            seqs.append((kv, toks))
        for step in range(3):  # a few steps so contexts cross page boundaries
            calls = [PredCall(kv, [(step * 31 + j * 7) % vocab]) for j, (kv, _) in enumerate(seqs)]
            for j, ((_, toks), res) in enumerate(zip(seqs, engine.pred_batch(calls))):
                toks.append(calls[j].token_ids[0])
                _close(res.logits, _reference(hf_model, toks)[-1], f"decode lengths={lengths} step {step}")


def _flash_stand_in(q, k_cache, v_cache, cache_seqlens, block_table, causal):
    """flash_attn_with_kvcache's documented semantics in torch: paged K/V through a block
    table, the first cache_seqlens keys of each sequence, causal mask aligned bottom-right."""
    assert causal and block_table.dtype == torch.int32 and cache_seqlens.dtype == torch.int32
    out = torch.empty_like(q)
    for i in range(q.shape[0]):
        n, sq = int(cache_seqlens[i]), q.shape[1]
        k = k_cache[block_table[i].long()].flatten(0, 1)[:n].transpose(0, 1)
        v = v_cache[block_table[i].long()].flatten(0, 1)[:n].transpose(0, 1)
        mask = torch.arange(n)[None, :] <= torch.arange(sq)[:, None] + (n - sq)
        o = F.scaled_dot_product_attention(q[i].transpose(0, 1), k, v, attn_mask=mask, enable_gqa=True)
        out[i] = o.transpose(0, 1)
    return out


@pytest.mark.parametrize("page", [FLASH_BLOCK, 16])
def test_flash_paged_glue(page):
    """With 256-slot pages every group takes the paged kernel; with 16-slot pages none can."""
    torch.manual_seed(0)
    n_pages, kvh, d, h = 4096 // page, 3, 64, 9
    k_cache = torch.randn(n_pages * page, kvh, d, dtype=torch.bfloat16)
    v_cache = torch.randn(n_pages * page, kvh, d, dtype=torch.bfloat16)
    free = list(torch.randperm(n_pages).tolist())

    def seq(n_new: int, n_ctx: int) -> SeqInput:
        pages = [free.pop() for _ in range(-(-n_ctx // page))]
        ctx = [pages[i // page] * page + i % page for i in range(n_ctx)]
        return SeqInput([1] * n_new, list(range(n_ctx - n_new, n_ctx)), ctx[-n_new:], ctx, [n_new - 1])

    fb = ForwardBatch.build([seq(1, 300), seq(30, 400), seq(1, 40), seq(20, 20), seq(1, 513)])
    q = torch.randn(fb.token_ids.shape[0], h, d, dtype=torch.bfloat16)
    flash = FlashPaged.__new__(FlashPaged)  # no flash-attn on CPU: a torch stand-in for the kernel
    flash.kernel = _flash_stand_in
    plan = flash.plan(fb.groups)
    assert all((table is not None) == (page % FLASH_BLOCK == 0) for _, table, _ in plan)
    got = flash(q, k_cache, v_cache, plan)
    want = TorchSDPA()(q, k_cache, v_cache, TorchSDPA().plan(fb.groups))
    assert (got.float() - want.float()).abs().max().item() < 2e-2


# --- shared-prefix ("cascade") decode groups ---------------------------------------------------


def test_shared_prefix_grouping():
    """Decodes whose contexts start with the same slots (forks of one file) form a shared-prefix
    group; the prefix stops one slot short of the shortest context; others keep the plain path."""
    from symphony_core.model import forward_batch as B

    def dec(ctx: list[int]) -> SeqInput:
        return SeqInput([1], [len(ctx) - 1], [ctx[-1]], ctx, [0])

    doc = list(range(1000, 1000 + 70))  # 70 slots: 4 full 16-slot pages and a partial one
    forks = [dec(doc[:64] + list(range(5000 + 100 * i, 5000 + 100 * i + 6 + 3 * i))) for i in range(3)]
    other = dec(list(range(9000, 9040)))
    chunk = SeqInput([1] * 5, list(range(40, 45)), list(range(7000, 7005)), list(range(6960, 7005)), [4])
    fb = ForwardBatch.build([forks[0], other, forks[1], chunk, forks[2]])
    cascade = [g for g in fb.groups if g.prefix_slots is not None]
    assert len(cascade) == 1 and cascade[0].prefix_len == 64 and cascade[0].n_seqs == 3
    assert cascade[0].prefix_slots.tolist() == doc[:64] and cascade[0].mask is not None
    assert sorted(torch.cat([g.rows for g in fb.groups]).tolist()) == list(range(fb.token_ids.shape[0]))
    # Too short a shared prefix, or a single sequence: the plain decode group.
    assert all(g.prefix_slots is None for g in ForwardBatch.build([dec(doc[:8] + [1]), dec(doc[:8] + [2])]).groups)
    assert all(g.prefix_slots is None for g in ForwardBatch.build([forks[0], other]).groups)
    # Identical contexts still leave every sequence one suffix slot.
    same = ForwardBatch.build([dec(doc), dec(doc)]).groups
    assert same[0].prefix_len == len(doc) - 1 and same[0].context_len == 1
    assert B.CASCADE_MIN_PREFIX >= 1


@pytest.mark.parametrize("doc_len", [64, 100, 241])
def test_shared_prefix_decode_batch(engine, hf_model, kvs, monkeypatch, doc_len):
    """Forks of one document (and forks of a fork) decoded in one batch beside an unrelated decode
    and a prefill chunk: the shared-prefix path against transformers' full recompute, and against
    the same step with the shared-prefix path turned off (run on twins: forks of every file)."""
    from symphony_core.model import attention, forward_batch

    groups_seen = []
    real = attention._cascade_group

    def spy(q, k_cache, v_cache, g):
        groups_seen.append(g.n_seqs)
        return real(q, k_cache, v_cache, g)

    monkeypatch.setattr(attention, "_cascade_group", spy)
    # The compiled decode kernel beats shared-prefix groups, so its backend asks for none; the torch
    # SDPA backend (no compiled kernels, or SYMPHONY_CPU_KERNELS=torch) does: make this engine ask.
    monkeypatch.setattr(engine.model.attention, "shares_prefixes", True, raising=False)
    vocab = engine.config.vocab_size
    opened = []

    def fork(kv):
        f = engine.kv_fork(kv)
        opened.append(f)
        return f

    try:
        doc = _prompt(doc_len, 700 + doc_len, vocab)
        root = kvs()
        engine.pred(root, doc)
        files = []
        for i, extra in enumerate((0, 1, 3, 7, 20)):  # forks with suffixes of different lengths
            kv, toks = fork(root), list(doc)
            if extra:
                more = _prompt(extra, 800 + i, vocab)
                engine.pred(kv, more)
                toks += more
            files.append((kv, toks))
        mid_kv, mid = files[3]
        for i in range(2):  # forks of a fork
            kv, more = fork(mid_kv), _prompt(2 + i, 850 + i, vocab)
            engine.pred(kv, more)
            files.append((kv, mid + more))
        other, other_toks = kvs(), _prompt(90, 901, vocab)
        engine.pred(other, other_toks)
        chunk_base, chunk_prefix, chunk_new = kvs(), _prompt(30, 902, vocab), _prompt(11, 903, vocab)
        engine.pred(chunk_base, chunk_prefix)
        want_chunk = _reference(hf_model, chunk_prefix + chunk_new)[-len(chunk_new) :]

        def step(files, other, tokens):
            calls = [PredCall(kv, [t]) for kv, t in zip(files, tokens)]
            calls.insert(2, PredCall(other, [tokens[-1]]))
            calls.insert(4, PredCall(fork(chunk_base), chunk_new, outputs="all"))
            res = engine.pred_batch(calls)
            return [r for i, r in enumerate(res) if i not in (2, 4)], res[2], res[4]

        for s in range(2):  # two steps: suffixes grow, doc=241 fills its partial page
            tokens = [(37 * s + 11 * j + 5) % vocab for j in range(len(files))]
            twins, other_twin = [fork(kv) for kv, _ in files], fork(other)
            groups_seen.clear()
            got, got_other, got_chunk = step([kv for kv, _ in files], other, tokens)
            assert set(groups_seen) == {len(files)}, "the forks did not take the shared-prefix path"
            with monkeypatch.context() as m:
                m.setattr(forward_batch, "CASCADE_MIN_PREFIX", 1 << 30)
                groups_seen.clear()
                plain, plain_other, plain_chunk = step(twins, other_twin, tokens)
                assert not groups_seen
            for (_, toks), t, r, p in zip(files, tokens, got, plain):
                toks.append(t)
                want = _reference(hf_model, toks)[-1]
                what = f"shared-prefix decode, doc {doc_len}, context {len(toks)}, step {s}"
                _close(r.logits, want, what)
                _close(r.logits, p.logits, what + " vs the plain path")
                assert int(r.logits.argmax()) == int(want.argmax()), what
            other_toks.append(tokens[-1])
            _close(got_other.logits, _reference(hf_model, other_toks)[-1], "unrelated decode beside forks")
            _close(plain_other.logits, got_other.logits, "unrelated decode, plain path")
            _close(got_chunk.logits, want_chunk, "prefill chunk beside forks")
            _close(plain_chunk.logits, want_chunk, "prefill chunk, plain path")
    finally:
        for f in opened:
            engine.kv_close(f)


@pytest.mark.parametrize("r", [1, 15, 16, 40, 100])
def test_logits_in_vocabulary_blocks_are_the_plain_products_bit_for_bit(r):
    """The LM head from LOGITS_IN_BLOCKS_FROM rows runs a block of the vocabulary at a time: its
    logits are row-major and equal, bit for bit, to the one-call product's, for a bare weight and
    for the weight behind a RowsSwitchLinear (the last block is a short one: 3000 is not a multiple
    of VOCAB_BLOCK)."""
    from symphony_core.model.llama import VOCAB_BLOCK, logits_rows
    from symphony_core.model.quant import DenseLinear, RowsSwitchLinear

    gen = torch.Generator().manual_seed(r)
    w = torch.randn(3000, 64, generator=gen)
    assert w.shape[0] % VOCAB_BLOCK
    x = torch.randn(r + 3, 64, generator=gen)  # padded rows past r, as the forward pads for MKL
    want = torch.mm(w, x.t())[:, :r].t()
    for head in (w, RowsSwitchLinear([(10**9, DenseLinear(w))])):
        got = logits_rows(x, head, r)
        assert got.shape == (r, 3000) and got.is_contiguous()
        assert torch.equal(got, want)


def test_a_decode_that_opens_a_page(fresh_engine, hf_model, monkeypatch):
    """A decode whose file's last page is full (or that writes the first token of an empty file)
    takes a truly free page inline; once only prefix-cached pages are free it takes the full
    reservation path, which reuses one; with no page at all it fails alone. Logits match
    transformers on each path and the page accounting stays exact."""
    eng = fresh_engine(num_pages=4, page_size=16)
    pool, vocab = eng.pool, eng.config.vocab_size
    full = _prompt(16, 901, vocab)
    a = eng.kv_create()
    eng.pred(a, full)  # one full page
    cached = eng.kv_create()
    eng.pred(cached, _prompt(16, 902, vocab))
    eng.kv_close(cached)  # its page stays free, kept by the prefix cache
    assert pool.cached_pages == 1 and pool.free_pages == 3
    empty = eng.kv_create()
    reserves = []
    reserve = eng.kvfs.reserve
    monkeypatch.setattr(eng.kvfs, "reserve", lambda kv, *a, **k: reserves.append(kv) or reserve(kv, *a, **k))
    toks_a, toks_e = full + [11], [12]
    got_a, got_e = eng.pred_batch([PredCall(a, [11]), PredCall(empty, [12])])
    assert reserves == []  # both inline
    _close(got_a.logits, _reference(hf_model, toks_a)[-1], "decode into a new free page")
    _close(got_e.logits, _reference(hf_model, toks_e)[-1], "first token of an empty file")
    assert len(a.pages) == 2 and len(empty.pages) == 1 and pool.cached_pages == 1 and pool.free_pages == 1
    eng.kvfs.check()
    # Only the cached page is left free: the decode that opens a[2]'s page takes it through `reserve`.
    toks_a += _prompt(15, 903, vocab)
    eng.pred(a, toks_a[17:])  # a: 32 tokens, two full pages
    assert pool.free_pages == 1 and pool.cached_pages == 1
    reserves.clear()
    got = eng.pred(a, [13])
    assert reserves == [a]
    toks_a.append(13)
    _close(got.logits, _reference(hf_model, toks_a)[-1], "decode into a page the prefix cache gave up")
    assert len(a.pages) == 3 and pool.free_pages == 0 and pool.cached_pages == 0
    eng.kvfs.check()
    # No page left: the decode that needs one fails alone; its batch-mate runs and nothing leaks.
    for t in range(14, 14 + 15):
        eng.pred(empty, [t])
    before = list(empty.tokens)
    got_e, got_a = eng.pred_batch([PredCall(empty, [40]), PredCall(a, [41])])
    assert isinstance(got_e, OutOfPages) and empty.tokens == before
    toks_a.append(41)
    _close(got_a.logits, _reference(hf_model, toks_a)[-1], "decode beside one that found no page")
    eng.kvfs.check()
    for kv in (a, empty):
        eng.kv_close(kv)
    assert pool.free_pages == pool.n_pages

"""Must show 2 — generation: greedy decoding equals transformers' `generate` token for token,
the chat demo knows the capital of France, and the in-engine samplers and `Dist` behave.
"""

from __future__ import annotations

import math

import pytest
import torch

from symphony_core import Dist, PredCall, PredError, Sampler
from symphony_core.model.sampling import filtered_probs

NEW_TOKENS = 64

PLAIN = [
    "The history of the Roman Empire begins",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village by the sea,",
    "The three primary colors are",
]
CHAT = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain photosynthesis in one sentence.",
    "List three uses of the Python programming language.",
]


@pytest.fixture(scope="module")
def prompts(engine) -> list[list[int]]:
    out = [engine.tokenize(t) for t in PLAIN]
    out += [engine.tokenize(engine.chat_template([{"role": "user", "content": q}])) for q in CHAT]
    assert all(len(p) >= 3 for p in out)
    return out


@pytest.fixture(scope="module")
def hf_greedy(hf_model):
    """transformers' greedy continuation of one prompt, unpadded, EOS stopping disabled."""
    cache: dict[tuple[int, ...], list[int]] = {}

    def get(ids: list[int]) -> list[int]:
        key = tuple(ids)
        if key not in cache:
            x = torch.tensor([ids])
            with torch.inference_mode():
                y = hf_model.generate(
                    x,
                    attention_mask=torch.ones_like(x),
                    do_sample=False,
                    max_new_tokens=NEW_TOKENS,
                    eos_token_id=None,  # run the full 64 tokens, exactly like our loop
                    pad_token_id=0,
                )
            new = y[0, len(ids) :].tolist()
            assert len(new) == NEW_TOKENS, "transformers stopped early: EOS stopping is not disabled"
            cache[key] = new
        return cache[key]

    return get


def greedy(engine, ids: list[int], n: int = NEW_TOKENS, stop_at_eos: bool = False) -> list[int]:
    kv = engine.kv_create()
    try:
        d = engine.pred(kv, ids)
        out: list[int] = []
        for i in range(n):
            t = d.argmax()
            out.append(t)
            if stop_at_eos and t in engine.eos_token_ids:
                break
            if i < n - 1:
                d = engine.pred(kv, [t])
        assert kv.tokens == ids + out[:-1]
        return out
    finally:
        engine.kv_close(kv)


@pytest.mark.slow
@pytest.mark.parametrize("i", range(8))
def test_greedy_matches_transformers_generate(engine, hf_greedy, prompts, i):
    ours = greedy(engine, prompts[i])
    ref = hf_greedy(prompts[i])
    first_diff = next((k for k, (a, b) in enumerate(zip(ours, ref)) if a != b), None)
    assert ours == ref, (
        f"prompt {i}: first difference at new token {first_diff}: "
        f"ours {engine.detokenize(ours)!r} vs transformers {engine.detokenize(ref)!r}"
    )


@pytest.mark.slow
def test_batched_greedy_matches_transformers_generate(engine, hf_greedy, prompts):
    """All 8 prompts stepped together: one pass prefills all, then 63 passes of 8 decodes."""
    files = [engine.kv_create() for _ in prompts]
    try:
        res = engine.pred_batch([PredCall(kv, p) for kv, p in zip(files, prompts)])
        outs: list[list[int]] = [[] for _ in prompts]
        for step in range(NEW_TOKENS):
            assert all(isinstance(r, Dist) for r in res), res
            picks = [r.argmax() for r in res]
            for o, t in zip(outs, picks):
                o.append(t)
            if step < NEW_TOKENS - 1:
                res = engine.pred_batch([PredCall(kv, [t]) for kv, t in zip(files, picks)])
        for i, p in enumerate(prompts):
            assert outs[i] == hf_greedy(p), f"batched prompt {i}: {engine.detokenize(outs[i])!r}"
            assert files[i].len == len(p) + NEW_TOKENS - 1
    finally:
        for kv in files:
            engine.kv_close(kv)


def test_chat_demo_knows_paris(engine):
    text = engine.chat_template([{"role": "user", "content": "What is the capital of France?"}])
    assert text.rstrip().endswith("assistant")
    out = greedy(engine, engine.tokenize(text), n=24, stop_at_eos=True)
    answer = engine.detokenize([t for t in out if t not in engine.eos_token_ids])
    assert "Paris" in answer, answer


# --- in-engine samplers --------------------------------------------------------------------------

STORY = "Once upon a time, in a small village by the sea, there lived an old fisherman who"


@pytest.fixture(scope="module")
def story(engine) -> list[int]:
    return engine.tokenize(STORY)


def test_seeded_sampling_is_reproducible_and_batch_independent(engine, story):
    base = engine.kv_create()
    engine.pred(base, story)
    forks = [engine.kv_fork(base) for _ in range(4)]
    try:
        samplers = [
            Sampler(temperature=1.0, seed=7),
            Sampler(temperature=1.0, seed=7),
            Sampler(temperature=1.0, seed=8),
        ]
        toks = [[story[-1]] for _ in range(3)]
        seqs: list[list[int]] = [[], [], []]
        for _ in range(12):
            res = engine.pred_batch([PredCall(forks[j], toks[j], sampler=samplers[j]) for j in range(3)])
            for j, r in enumerate(res):
                assert isinstance(r.token, int) and r.probs[r.token] > 0
                seqs[j].append(r.token)
                toks[j] = [r.token]
        assert seqs[0] == seqs[1], "same seed, same context: the picks must repeat"
        assert seqs[0] != seqs[2], "a different seed gave the very same 12 samples"
        # the same seed alone (not batched with anyone) picks the same tokens
        alone, s, t = [], Sampler(temperature=1.0, seed=7), story[-1]
        for _ in range(12):
            t = engine.pred(forks[3], [t], sampler=s).token
            alone.append(t)
        assert alone == seqs[0]
    finally:
        for kv in [base, *forks]:
            engine.kv_close(kv)


def test_top_k_1_and_temperature_0_are_greedy(engine, story):
    specs = [
        Sampler(temperature=1.5, top_k=1, seed=3),
        Sampler(temperature=0.0, seed=3),
        "greedy",
        Sampler(temperature=1.5, seed=3),
    ]
    files = [engine.kv_create() for _ in specs]
    try:
        res = engine.pred_batch([PredCall(kv, story, outputs="all", sampler=s) for kv, s in zip(files, specs)])
        for s, r in zip(specs[:3], res[:3]):
            assert r.token == r.argmax(), f"{s} is not greedy"
        hot = res[3]
        assert len(hot.token) == len(story)
        assert hot.token != hot.argmax(), "temperature 1.5 picked the argmax at every one of the positions"
    finally:
        for kv in files:
            engine.kv_close(kv)


def test_top_p_and_min_p_only_pick_allowed_tokens(engine, story):
    specs = (
        [Sampler(temperature=1.3, top_p=0.8, seed=s) for s in range(3)]
        + [Sampler(temperature=1.3, min_p=0.1, seed=s) for s in range(3)]
        + [Sampler(temperature=2.0, top_k=20, top_p=0.9, min_p=0.02, seed=5)]
    )
    files = [engine.kv_create() for _ in specs]
    try:
        res = engine.pred_batch([PredCall(kv, story, outputs="all", sampler=s) for kv, s in zip(files, specs)])
        strict_subsets = off_argmax = 0
        for s, r in zip(specs, res):
            allowed = filtered_probs(r.logits, s.temperature, s.top_k, s.top_p, s.min_p) > 0
            for row, tok in enumerate(r.token):
                assert allowed[row, tok], f"{s} picked {tok}, outside its allowed set at position {row}"
                strict_subsets += int(1 < allowed[row].sum() < allowed.shape[1] // 2)
                off_argmax += int(tok != int(r.logits[row].argmax()))
        # the filters must have had something to cut and the samplers something to choose
        assert strict_subsets > len(specs) * len(story) // 4
        assert off_argmax > 0
    finally:
        for kv in files:
            engine.kv_close(kv)


def _naive_filter(logits: torch.Tensor, t: float, k: int, p: float, mp: float) -> torch.Tensor:
    probs = torch.softmax(logits.double() / max(t, 1e-6), -1)
    order = sorted(range(len(probs)), key=lambda i: -float(probs[i]))
    keep, mass = [], 0.0
    for rank, i in enumerate(order):
        if k and rank >= k:
            break
        if rank > 0 and mass >= p:
            break
        if rank > 0 and probs[i] < mp * probs[order[0]]:
            break
        keep.append(i)
        mass += float(probs[i])
    out = torch.zeros_like(probs)
    out[keep] = probs[keep]
    return out / out.sum()


def test_filtered_probs_matches_the_definitions():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(8, 60, generator=g) * 3
    params = [
        (1.0, 0, 1.0, 0.0),
        (0.7, 5, 1.0, 0.0),
        (1.0, 0, 0.5, 0.0),
        (1.5, 0, 0.9, 0.0),
        (1.0, 0, 1.0, 0.2),
        (2.0, 10, 0.8, 0.05),
        (0.5, 1, 1.0, 0.0),
        (1.0, 0, 0.01, 0.0),
    ]
    got = filtered_probs(logits, *(torch.tensor(c) for c in zip(*params)))
    for row, (t, k, p, mp) in enumerate(params):
        ref = _naive_filter(logits[row], t, k, p, mp).float()
        assert torch.allclose(got[row], ref, atol=1e-5), f"row {row} params {(t, k, p, mp)}"
        assert math.isclose(float(got[row].sum()), 1.0, rel_tol=1e-5)
    assert int((got[6] > 0).sum()) == 1 and int((got[7] > 0).sum()) == 1


def test_temperature_sampling_follows_the_probabilities(engine):
    """400 forks of one prefix each draw one token with the same seeded sampler in one batch;
    the counts must fit softmax(logits / T) and not softmax(logits)."""
    temp, n = 2.0, 400
    prefix = engine.tokenize("My favourite fruit is the")
    base = engine.kv_create()
    engine.pred(base, prefix[:-1])
    forks = [engine.kv_fork(base) for _ in range(n)]
    try:
        s = Sampler(temperature=temp, seed=11)
        res = engine.pred_batch([PredCall(kv, prefix[-1:], sampler=s) for kv in forks])
        logits = res[0].logits
        assert all(torch.equal(r.logits, logits) for r in res[1:4])
        counts = torch.bincount(torch.tensor([r.token for r in res]), minlength=logits.shape[0]).double()

        def chi2(probs: torch.Tensor) -> float:
            top = probs.argsort(descending=True)[:5]
            exp = torch.cat([probs[top], (1 - probs[top].sum()).reshape(1)]).double() * n
            obs = torch.cat([counts[top], (n - counts[top].sum()).reshape(1)])
            return float(((obs - exp) ** 2 / exp.clamp_min(1e-9)).sum())

        fit = chi2(torch.softmax(logits / temp, -1))
        wrong = chi2(torch.softmax(logits, -1))
        print(f"chi-square: {fit:.1f} against softmax(logits/{temp}), {wrong:.1f} against softmax(logits)")
        assert fit < 25.0, f"chi-square {fit:.1f} (5 dof): the draws do not follow softmax(logits/T)"
        assert wrong > 3 * fit and wrong > 25.0, f"T=1 fits as well ({wrong:.1f} vs {fit:.1f}): test has no power"
    finally:
        for kv in forks:
            engine.kv_close(kv)
        engine.kv_close(base)


# --- the Dist API ------------------------------------------------------------------------------------


def test_batch_argmax_is_taken_once_and_never_goes_stale(engine, story):
    """While someone watches the event stream (which names each pred's argmax), a decode batch's
    argmax is taken once for all rows; unwatched, none is taken. A Dist whose logits are
    replaced or written into later gives the argmax of what it holds now."""
    assert not engine.runtime.bus.active, "an earlier test left an event-bus subscriber attached"
    kvs = [engine.kv_create() for _ in range(6)]
    try:
        quiet = engine.pred_batch([PredCall(kv, story[i : i + 4]) for i, kv in enumerate(kvs[3:])])
        assert all(d._argmax is None for d in quiet), "an unobserved batch took an argmax nobody asked for"
        unsubscribe = engine.runtime.bus.subscribe(lambda ev: None)
        try:
            res = engine.pred_batch([PredCall(kv, story[i : i + 4]) for i, kv in enumerate(kvs[:3])])
        finally:
            unsubscribe()
        assert all(isinstance(d, Dist) and d._argmax is not None for d in res), "no batch argmax was handed over"
        for d in res + quiet:
            assert d.argmax() == int(torch.argmax(d.logits))
        a, b, c = res
        # The engine's logits are read-only outside inference mode (torch refuses the write).
        assert a.logits.is_inference() and not torch.is_inference_mode_enabled()
        forced = torch.zeros(engine.config.vocab_size)
        forced[7] = 1.0
        b.logits = forced  # a new tensor replaces the row
        assert b.argmax() == 7
        assert float(b.probs[7]) == pytest.approx(float(torch.softmax(forced, -1)[7]))
        forced[7], forced[9] = 0.0, 2.0  # a write into a tensor the LIP owns
        assert b.argmax() == 9 and float(b.probs[9]) == pytest.approx(float(torch.softmax(forced, -1)[9]))
        mine = Dist(c.logits.clone())
        top = mine.argmax()
        assert top == c.argmax()
        mine.logits[top] = float("-inf")
        assert mine.argmax() == int(torch.argmax(mine.logits)) != top
        rows = Dist(torch.stack([a.logits, mine.logits]))
        assert rows.argmax() == [a.argmax(), mine.argmax()]
        rows.argmax().append(0)  # the caller's copy, not the memo
        assert rows.argmax() == [a.argmax(), mine.argmax()]
    finally:
        for kv in kvs:
            engine.kv_close(kv)


def test_a_greedy_rows_argmax_comes_with_its_next_batch(engine, story):
    """A decode row whose file's last Dist had its argmax read gets its argmax taken with the batch
    (one call, while the logits are in cache); a row whose last Dist was sampled or read otherwise
    gets none (nobody pays for an argmax they do not read). Whole batch, some rows, or none; the
    pre-taken argmax is the logits' own, and goes stale like any other when the logits change."""
    assert not engine.runtime.bus.active, "an earlier test left an event-bus subscriber attached"
    kvs = [engine.kv_create() for _ in range(3)]
    try:
        first = engine.pred_batch([PredCall(kv, story[i : i + 5]) for i, kv in enumerate(kvs)])
        assert all(d._argmax is None for d in first), "fresh files: no argmax was read yet"
        greedy = [first[0].argmax(), first[1].argmax()]  # files 0 and 1 greedy; file 2 reads its logits
        int(first[2].logits.topk(3).indices[0])

        def step(tokens: list[int]) -> list[Dist]:
            return engine.pred_batch([PredCall(kv, [t]) for kv, t in zip(kvs, tokens)])

        some = step([*greedy, 7])
        assert [d._argmax is not None for d in some] == [True, True, False]
        for d in some[:2]:
            best = d.argmax()
            assert d._logits is None, "a pre-taken argmax made the row view after all"
            assert best == int(torch.argmax(d.logits))
        all_read = [d.argmax() for d in some]  # now every file's Dist had it read
        every = step(all_read)
        assert all(d._argmax is not None for d in every)
        assert [d.argmax() for d in every] == [int(torch.argmax(d.logits)) for d in every]
        none = step([9, 9, 9])  # `every`'s argmax was read: taken again; this batch's rows go unread
        assert all(d._argmax is not None for d in none)
        after = step([9, 9, 9])
        assert all(d._argmax is None for d in after), "rows nobody read the argmax of were charged one"
        d = after[0]
        assert d.argmax() == int(torch.argmax(d.logits))
        d.logits = torch.zeros(engine.config.vocab_size).index_fill_(0, torch.tensor([11]), 1.0)
        assert d.argmax() == 11
    finally:
        for kv in kvs:
            engine.kv_close(kv)


@pytest.mark.parametrize("runner", ["threads", "greenlets"])
def test_greedy_programs_get_their_argmax_with_the_batch(fresh_engine, runner, story):
    """Through LIPs (the path users run), on either runner: after a program's first `.argmax()`, every
    decode step's Dist arrives with it, the tokens those give are the logits' own argmax, and a program
    that samples instead is never handed one."""
    eng = fresh_engine(num_pages=128, lip_runner=runner)

    def greedy(sym, prompt, n):
        kv = sym.kv_create()
        d = sym.pred(kv, prompt)
        toks, pre = [d.argmax()], []
        for _ in range(n):
            d = sym.pred(kv, [toks[-1]])
            pre.append(d._argmax is not None)
            toks.append(d.argmax())
            assert toks[-1] == int(torch.argmax(d.logits))
        sym.kv_close(kv)
        return toks, pre

    def sampling(sym, prompt, n):
        kv = sym.kv_create()
        d = sym.pred(kv, prompt)
        pre = []
        for _ in range(n):
            tok = d.sample(temperature=0.8)
            d = sym.pred(kv, [tok])
            pre.append(d._argmax is not None)
        sym.kv_close(kv)
        return pre

    procs = [eng.run(greedy, story[i : i + 6], 8) for i in range(3)] + [eng.run(sampling, story[:6], 8)]
    outs = [p.result(timeout=120) for p in procs]
    for _, pre in outs[:3]:
        assert all(pre), f"a greedy program's decode steps came without their argmax: {pre}"
    assert not any(outs[3]), "a sampling program was handed an argmax it never reads"
    kv = eng.kv_create()
    ref = [eng.pred(kv, story[0:6]).argmax()]
    for _ in range(8):
        ref.append(eng.pred(kv, [ref[-1]]).argmax())
    eng.kv_close(kv)
    assert outs[0][0] == ref, "greedy tokens through LIPs differ from the engine's own"


def test_dist_api_for_all_outputs(engine, story):
    ids = story[:12]
    kv, kv2, kv3 = engine.kv_create(), engine.kv_create(), engine.kv_create()
    try:
        d = engine.pred(kv, ids, outputs="all")
        V = engine.config.vocab_size
        assert len(d) == 12 and d.logits.shape == (12, V) and d.token is None
        assert d.argmax() == [int(r.argmax()) for r in d.logits]
        assert len(list(d)) == 12
        assert torch.equal(d[-1].logits, d.logits[11]) and torch.equal(d[3].logits, d.logits[3])
        for i in (0, 5, 11):
            row = d[i]
            assert isinstance(row, Dist) and row.logits.shape == (V,)
            assert torch.allclose(row.probs, torch.softmax(row.logits, -1)) and abs(float(row.probs.sum()) - 1) < 1e-4
            top = row.topk(5)
            assert [t for t, _ in top] == row.logits.topk(5).indices.tolist()
            assert all(a[1] >= b[1] for a, b in zip(top, top[1:]))
            assert math.isclose(top[0][1], float(row.probs[top[0][0]]), rel_tol=1e-5)
            assert top[0][0] == row.argmax() == d.argmax()[i]
            lp = row.logprob(top[1][0])
            assert math.isclose(lp, float(torch.log_softmax(row.logits, -1)[top[1][0]]), rel_tol=1e-5)
            assert math.isclose(math.exp(lp), top[1][1], rel_tol=1e-4)
            assert row.sample(seed=5) == row.sample(seed=5)
            assert row.sample(top_k=1) == row.sample(temperature=0.0) == row.argmax()
            assert row.probs[row.sample(temperature=1.0, seed=1)] > 0
        with pytest.raises(PredError, match="index it first"):
            d.topk(3)
        with pytest.raises(PredError, match="index it first"):
            d.logprob(0)
        with pytest.raises(PredError, match=str(V)):
            d[0].logprob(V)
        with pytest.raises(IndexError):
            d[12]
        # picked outputs are the same rows
        p = engine.pred(kv2, ids, outputs=[0, -1, 3])
        assert p.logits.shape == (3, V)
        assert torch.allclose(p.logits, d.logits[[0, 11, 3]], atol=1e-4)
        # a sampler with outputs="all" gives one pick per row
        s = engine.pred(kv3, ids, outputs="all", sampler=Sampler(temperature=0.8, seed=2))
        assert isinstance(s.token, list) and len(s.token) == 12 and s[4].token == s.token[4]
        assert torch.allclose(s.logits, d.logits, atol=1e-4)
        # a single-position Dist
        one = engine.pred(kv, [ids[0]])
        assert len(one) == 1 and isinstance(one.argmax(), int)
        assert one[0] is one and one[-1] is one and one.topk(1)[0][0] == one.argmax()
        with pytest.raises(IndexError):
            one[1]
    finally:
        for f in (kv, kv2, kv3):
            engine.kv_close(f)

"""Users isolated from each other in the engine (issue 53): a bad sampler or a failing row fails only its own call.

Each test is one attack from a hostile call or program with a benign neighbour beside it, on the session
engine; the benign side's *exact* output (logits or tokens, compared with the same call run alone) is
checked while the attack runs, and the attacker gets a clear error of its own. The same attacks on a real
server, and the server's own bounds, are in tests/test_hostile_neighbours.py.
"""

from __future__ import annotations

import pytest
import torch

from symphony_core import PredCall, PredError, Sampler, SymphonyError

PROMPT = [504, 3458, 282, 4649, 314, 2113, 30, 378, 1345]
POISON = 4321  # a token id the fault-injecting forward below refuses


def _alone(engine, tokens, **kw):
    """The call run alone on a fresh file: the reference the benign neighbour must match."""
    kv = engine.kv_create()
    try:
        return engine.pred(kv, tokens, **kw)
    finally:
        engine.kv_close(kv)


def _batch(engine, calls):
    """`(tokens, sampler)` calls run as one batch on fresh files, without the attacker: the
    reference (the batch's make-up changes the float rounding, so it is the same make-up)."""
    kvs = [engine.kv_create() for _ in calls]
    try:
        return engine.pred_batch([PredCall(kv, t, sampler=s) for kv, (t, s) in zip(kvs, calls)])
    finally:
        _close(engine, *kvs)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same logits up to float rounding (the prefix cache may serve a prompt's start from a
    different batch's pass) and the same most likely token."""
    return bool(torch.allclose(a, b, atol=1e-3, rtol=0)) and int(a.argmax()) == int(b.argmax())


def _close(engine, *kvs):
    for kv in kvs:
        engine.kv_close(kv)


BAD_SAMPLERS = {
    "top_k 2**63": dict(top_k=2**63),
    "seed 2**64": dict(seed=2**64),
    "temperature 1e400": dict(temperature=float("inf")),  # 1e400 is inf as a float
    "temperature nan": dict(temperature=float("nan")),
    "top_k negative after build": ("top_k", -1),
    "seed as a string after build": ("seed", "x"),
}


def _bad_sampler(spec) -> Sampler:
    if isinstance(spec, dict):
        return Sampler(**spec)
    s = Sampler(temperature=0.7)  # a valid sampler, changed after it was built
    setattr(s, *spec)
    return s


@pytest.mark.parametrize("spec", list(BAD_SAMPLERS.values()), ids=list(BAD_SAMPLERS))
def test_bad_sampler_fails_only_its_own_pred(engine, spec):
    """A sampler no tensor can hold fails its own pred with a PredError naming the field, writes
    nothing to its file, and the two benign calls in the same batch (a plain one and a seeded
    sampled one) get exactly what they get alone."""
    ref_seeded, ref_plain = _batch(engine, [(PROMPT, Sampler(temperature=0.8, seed=7)), (PROMPT, None)])
    bad_kv, a, b = engine.kv_create(), engine.kv_create(), engine.kv_create()
    try:
        res = engine.pred_batch(
            [
                PredCall(a, PROMPT, sampler=Sampler(temperature=0.8, seed=7)),
                PredCall(bad_kv, PROMPT, sampler=_bad_sampler(spec)),
                PredCall(b, PROMPT),
            ]
        )
        assert isinstance(res[1], PredError) and "sampler" in str(res[1]), res[1]
        assert bad_kv.file.length == 0, "a failed pred left tokens in its file"
        assert _same(res[2].logits, ref_plain.logits)
        assert res[0].token == ref_seeded.token and _same(res[0].logits, ref_seeded.logits)
        assert a.file.length == b.file.length == len(PROMPT)
    finally:
        _close(engine, bad_kv, a, b)
    engine.kvfs.check()


def test_sampler_changed_between_check_and_batch(engine):
    """A program's other thread may change its sampler after `prepare` checked it: the batch
    checks again, so only that call fails, and its file is left as it was."""
    (ref,) = _batch(engine, [(PROMPT, Sampler(temperature=0.9, seed=3))])
    s = Sampler(temperature=0.7, seed=1)
    bad_kv, good = engine.kv_create(), engine.kv_create()
    try:
        calls = [PredCall(good, PROMPT, sampler=Sampler(temperature=0.9, seed=3)), PredCall(bad_kv, PROMPT, sampler=s)]
        for c in calls:
            engine.executor.prepare(c)
        s.top_k = 2**63  # the race: after the check, before the batch samples
        res = engine.executor.run(calls, prepared_apart=True)
        assert isinstance(res[1], PredError) and "top_k" in str(res[1]), res[1]
        assert bad_kv.file.length == 0
        assert res[0].token == ref.token and _same(res[0].logits, ref.logits)
    finally:
        _close(engine, bad_kv, good)
    engine.kvfs.check()


class _BrokenSampler(Sampler):
    """A sampler whose generator fails: what a sampler the checks cannot foresee does."""

    def generator(self) -> torch.Generator:
        raise RuntimeError("broken generator")


def test_sampler_failing_in_the_pick_fails_only_its_call(engine):
    """A call whose in-engine pick raises gets a PredError and its tokens taken back out of its
    file; the seeded neighbour sampled in the same batch draws exactly its solo token."""
    (ref,) = _batch(engine, [(PROMPT, Sampler(temperature=1.0, seed=11))])
    bad_kv, good = engine.kv_create(), engine.kv_create()
    try:
        res = engine.pred_batch(
            [
                PredCall(good, PROMPT, sampler=Sampler(temperature=1.0, seed=11)),
                PredCall(bad_kv, PROMPT, sampler=_BrokenSampler(temperature=0.5)),
            ]
        )
        assert isinstance(res[1], PredError) and "broken generator" in str(res[1]), res[1]
        assert bad_kv.file.length == 0
        assert res[0].token == ref.token and _same(res[0].logits, ref.logits)
    finally:
        _close(engine, bad_kv, good)
    engine.kvfs.check()


def test_row_failing_in_the_forward_pass_fails_alone(engine, monkeypatch):
    """If a row still makes the forward pass fail, only its call gets the error (the executor
    runs the members again apart); no file keeps a token of the failed pass, and every other
    call — a prompt and a decode — gets its exact solo logits."""
    forward = engine.model.forward

    def faulty(fb, k, v):
        if POISON in fb.token_ids.tolist():
            raise RuntimeError("injected fault")
        return forward(fb, k, v)

    ref_prompt = _alone(engine, PROMPT)
    dec_kv = engine.kv_create()
    engine.pred(dec_kv, PROMPT[:5])
    ref_dec_kv = engine.kv_fork(dec_kv)
    ref_dec = engine.pred(ref_dec_kv, [PROMPT[5]])
    bad_kv, good = engine.kv_create(), engine.kv_create()
    monkeypatch.setattr(engine.model, "forward", faulty)
    try:
        res = engine.pred_batch(
            [PredCall(good, PROMPT), PredCall(bad_kv, [1, 2, POISON]), PredCall(dec_kv, [PROMPT[5]])]
        )
        assert isinstance(res[1], SymphonyError) and "injected fault" in str(res[1]), res[1]
        assert bad_kv.file.length == 0
        assert _same(res[0].logits, ref_prompt.logits)
        assert _same(res[2].logits, ref_dec.logits)
        assert good.file.length == len(PROMPT) and dec_kv.file.length == 6
    finally:
        monkeypatch.setattr(engine.model, "forward", forward)
        _close(engine, bad_kv, good, dec_kv, ref_dec_kv)
    engine.kvfs.check()


def _generate(sym, prompt: list[int], n: int) -> list[int]:
    kv = sym.kv_create()
    out, toks = [], prompt
    for _ in range(n):
        d = sym.pred(kv, toks)
        toks = [int(d.argmax())]
        out.append(toks[0])
    return out


def _attack(sym, kind: str, rounds: int) -> list[str]:
    """Bad samplers, again and again, each pred's error collected."""
    errors = []
    for _ in range(rounds):
        kv = sym.kv_create()
        try:
            sym.pred(kv, PROMPT, sampler=_bad_sampler(BAD_SAMPLERS[kind]))
            errors.append("no error")
        except PredError as e:
            errors.append(str(e))
        assert kv.file.length == 0
        sym.kv_close(kv)
    return errors


def test_benign_generation_exact_during_sampler_attack_in_process(engine):
    """Through the schedulers, as programs: a benign greedy generation beside three programs
    sending bad samplers is token for token what it is alone; every attack pred fails alone."""
    ref = engine.run(_generate, PROMPT, 12).result(timeout=300)
    attackers = [engine.run(_attack, kind, 12) for kind in ("top_k 2**63", "seed 2**64", "temperature 1e400")]
    benign = engine.run(_generate, PROMPT, 12)
    assert benign.result(timeout=300) == ref
    for p in attackers:
        errors = p.result(timeout=300)
        assert all("sampler" in e for e in errors), errors

"""An overridden token shows the model's probability of it, marked as an override (issue 50):
not the 1.0 of the edited distribution the LIP receives."""

from __future__ import annotations

import pytest

from symphony_lab.debugger import Debugger

PROMPT = "The capital of France is"


def two_preds(sym, prompt):
    kv = sym.kv_create()
    d = sym.pred(kv, sym.tokenize(prompt))
    sym.pred(kv, [d.argmax()])
    sym.kv_close(kv)
    return d.argmax()


@pytest.fixture
def dbg(engine):
    d = Debugger(engine)
    yield d
    d.detach()


def _model_p(engine, token: int) -> float:
    kv = engine.kv_create()
    try:
        return float(engine.pred(kv, engine.tokenize(PROMPT)).probs[token])
    finally:
        engine.kv_close(kv)


@pytest.mark.parametrize("when", ["after", "before"])
def test_an_override_shows_the_models_probability(engine, dbg, when):
    """Forced at a stop after the pred (the edit applies at once) or before it (applied when the
    pred returns): the chosen token's `p` is the model's, `p_edited` the LIP's 1.0, `by` says override."""
    (forced,) = engine.tokenize(" London")
    dbg.set_breakpoint("pred", when=when, hit_count=1)
    if when == "before":
        dbg.set_breakpoint("pred", when="after", hit_count=1)
    pid = dbg.launch(two_preds, PROMPT)["pid"]
    s = dbg.wait_stopped(pid, timeout=60)
    assert (s["where"], s["call"]) == (when, "pred")
    dbg.override(pid, 1, token=forced)
    if when == "before":
        dbg.continue_(pid, 1)
        s = dbg.wait_stopped(pid, timeout=60)
        assert s["where"] == "after"
    shown = dbg.stops()["stops"][0]["result"]["chosen"]
    want = _model_p(engine, forced)
    assert shown["token"] == forced and shown["by"] == "override" and shown["p_edited"] == 1.0
    assert shown["p"] == pytest.approx(want, rel=1e-4) and shown["p"] < 0.5
    assert dbg.dist(pid, 1)["chosen"]["p"] == pytest.approx(want, rel=1e-4)
    dbg.continue_(pid)
    assert engine.runtime.processes[pid].result(60) == forced

"""fused_decode.py: a decode step's layers as one compiled call give the per-call loop's logits bit for bit,
for each weight format and row count the compiled kernels run; other batches take the loop."""

from __future__ import annotations

import pytest
import torch

from symphony_core import PredCall
from symphony_core.model.cpu_kernels import compiled

pytestmark = pytest.mark.skipif(compiled() is None, reason="the compiled CPU kernels are not built here")


def _decode_both_ways(eng, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of two decode steps of n sequences (each its own prompt), fused and then by the loop, each
    on fresh forks of the same files: the two runs see the same K/V and write their own."""
    m = eng.model
    kvs = [eng.kv_create() for _ in range(n)]
    try:
        eng.pred_batch([PredCall(kv, eng.tokenize(f"Note {i}: the" + " river" * (i % 7))) for i, kv in enumerate(kvs)])
        out = []
        for fused in (True, False):
            m.fused.enabled = fused
            forks = [eng.kv_fork(kv) for kv in kvs]
            first = eng.pred_batch([PredCall(f, [100 + i]) for i, f in enumerate(forks)])
            second = eng.pred_batch([PredCall(f, [d.argmax()]) for f, d in zip(forks, first)])
            out.append(torch.stack([d.logits for d in first + second]))
            for f in forks:
                eng.kv_close(f)
        return out[0], out[1]
    finally:
        m.fused.enabled = True
        for kv in kvs:
            eng.kv_close(kv)


def _assert_fused_matches_loop(eng, rows: tuple[int, ...]) -> None:
    for n in rows:
        fused, loop = _decode_both_ways(eng, n)
        assert eng.model.fused.stack(n) is not None, f"{n} rows did not run fused"
        assert torch.equal(fused, loop), f"{n} rows: fused logits differ by {(fused - loop).abs().max()}"


def _compiled_fp32_rows(model) -> int:
    """The most rows the fp32 engine's compiled kernel runs: its limit, or below where oneDNN's starts here."""
    from symphony_core.model.quant import CompiledDenseLinear

    return next(rows for rows, lin in model.lm_head.tiers if isinstance(lin, CompiledDenseLinear))


def test_fp32_fused_decode_is_the_loop_bit_for_bit(engine):
    top = _compiled_fp32_rows(engine.model)
    _assert_fused_matches_loop(engine, (1, 5, top))
    for wide in sorted({top + 1, max(32, top + 1)}):  # above the compiled kernel's rows (measured at load)
        if all(form is not None and form[0] == 3 for form in _forms(engine.model, wide)):
            _assert_fused_matches_loop(engine, (wide,))  # oneDNN's packed-weight matmul: the stack calls it too
        else:  # MKL's sgemm above the compiled fp32 kernel's rows: the loop runs it
            assert engine.model.fused.stack(wide) is None


def test_fp32_with_onednn_off_takes_the_loop_above_the_compiled_kernel(monkeypatch):
    from symphony_core import Engine

    monkeypatch.setenv("SYMPHONY_ONEDNN_FROM_ROWS", "off")
    eng = Engine(num_pages=256)
    try:
        top = _compiled_fp32_rows(eng.model)
        assert eng.model.fused.stack(top) is not None
        assert eng.model.fused.stack(top + 1) is None  # MKL's sgemm runs there, which the stack does not call
    finally:
        eng.shutdown()


@pytest.mark.slow  # ~20 s: loads a q8 and a q4 engine
@pytest.mark.parametrize("fmt", ["q8", "q4"])
def test_quantised_fused_decode_is_the_loop_bit_for_bit(fmt, monkeypatch):
    from symphony_core import Engine

    # 9 rows on the compiled fp32 tier (fused); a bf16 wide tier (CPUs with native bf16) runs the loop there
    monkeypatch.setenv("SYMPHONY_WIDE_BF16", "0")
    monkeypatch.setenv("SYMPHONY_ONEDNN_FROM_ROWS", "off")  # and the compiled fp32 kernel, not oneDNN's, at 9
    eng = Engine(num_pages=256, weights=fmt)
    try:
        _assert_fused_matches_loop(eng, (1, 2, 9))  # q4's int4 tier, then int8
        kinds = {form[0] for form in _forms(eng.model, 1)}
        assert kinds == ({2} if fmt == "q4" else {1})  # int4 or int8 kernels at one row
    finally:
        eng.shutdown()


def _forms(model, rows):
    from symphony_core.model.fused_decode import PROJECTIONS, kernel_form

    return [kernel_form(getattr(layer, attr), rows) for layer in model.layers for attr in PROJECTIONS]


def test_prefill_and_shared_prefix_batches_take_the_loop(engine, monkeypatch):
    from symphony_core.model.forward_batch import FOLD_MAX_CONTEXT, FOLD_MAX_QUERY

    m = engine.model
    loops = []
    real = m._layers
    monkeypatch.setattr(m, "_layers", lambda *a: loops.append(a[1].token_ids.shape[0]) or real(*a))
    kv = engine.kv_create()
    try:
        short = min(FOLD_MAX_QUERY - 1, _compiled_fp32_rows(m))
        engine.pred(kv, [1000 + i for i in range(short)])  # a short chunk: decode-style rows, fused
        assert loops == []
        long = max(FOLD_MAX_QUERY, FOLD_MAX_CONTEXT) + 1
        engine.pred(kv, [2000 + i for i in range(long)])  # a chunk attended as a block: the loop
        assert loops == [long]
        engine.pred(kv, [42])  # one decode: fused
        forks = [engine.kv_fork(kv) for _ in range(3)]
        # forks of one file decoding together: one plain group the compiled kernel reads in place, fused
        engine.pred_batch([PredCall(f, [7 + i]) for i, f in enumerate(forks)])
        assert loops == [long]
        # where the backend asks for shared-prefix groups (the torch SDPA one), they take the loop
        monkeypatch.setattr(m.attention, "shares_prefixes", True, raising=False)
        engine.pred_batch([PredCall(f, [9 + i]) for i, f in enumerate(forks)])
        assert loops == [long, 3]
        for f in forks:
            engine.kv_close(f)
    finally:
        engine.kv_close(kv)

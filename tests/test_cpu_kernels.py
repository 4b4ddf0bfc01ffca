"""The compiled CPU kernels (symphony_core/model/cpu_kernels): same results as the dequantised weights and
as torch's kernels, at the model's shapes and odd ones, with the AVX2 loops and the AVX-512 VNNI ones; the fp32 kernel as
torch's fp32 matmul (its AVX2 loops and its AVX-512 one for 2-8 rows), on the fp32 engine's own tensors; the fallback to
torch's kernels when forced.

`make setup` builds them (`make kernels`); on an AVX2 CPU they must load, so a failed build fails here.
"""

from __future__ import annotations

import pytest
import torch

from symphony_core.model import cpu_kernels
from symphony_core.model.cpu_kernels import loader
from symphony_core.model.quant import (
    CompiledDenseLinear,
    Int4Linear,
    Int8Linear,
    onednn_fp32,
    quantize_int4,
    quantize_int8,
)

needs_avx2 = pytest.mark.skipif(not loader.cpu_ok(), reason="the compiled kernels need an x86 CPU with AVX2/FMA")

# SmolLM2-135M's projections (out, in) and its LM head, then odd sizes (in not a multiple of 8 for int8)
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536), (49152, 576), (3, 32), (37, 100), (130, 96)]


def _int16_rounding_bound(x, w):
    """How far the quantised kernels may be from x @ wᵀ: they round x to int16 in groups of 32 (gemv.cpp
    `quantise_x`: at most half a step, a step being the group's largest |x| / 32767; a tail past the last
    full group stays fp32), then sum in fp32 in their own order."""
    rows, n = x.shape
    full = n // 32 * 32
    step = x[:, :full].abs().view(rows, -1, 32).amax(-1) / 32767
    half_step = torch.zeros_like(x)
    half_step[:, :full] = 0.51 * step.repeat_interleave(32, dim=1)  # 0.51: the scaling's own fp32 rounding
    return half_step @ w.abs().t() + 1e-5 * (x.abs() @ w.abs().t())


def _dequant4(nib, scale, lo):
    out_f, in_f = nib.shape
    return (nib.float().view(out_f, -1, 32) * scale[..., None] + lo[..., None]).view(out_f, in_f)


@needs_avx2
def test_compiled_kernels_load_here():
    assert cpu_kernels.compiled() is not None, "the CPU kernels did not load: run `make kernels` and read its log"


ISAS = ["avx2", "avx512_vnni"]


def _running_loops(kind: str, isa: str):
    """Run one of the compiled kernels' loop choices (`kind`: "quantised" or "f32_wide") for `isa`, putting the
    process's choice back after; skipped where the CPU lacks it."""
    mod = cpu_kernels.compiled()
    get, set_ = getattr(mod, f"get_{kind}_isa"), getattr(mod, f"set_{kind}_isa")
    before = get()
    try:
        set_(isa)
    except ValueError as e:
        pytest.skip(str(e))
    yield isa
    set_(before)


@pytest.fixture
def quantised_isa(request):
    """The int8 / int4 kernels' loops of one instruction set: gemv.cpp's AVX2 ones, or gemv_vnni.cpp's where
    the CPU has AVX-512 VNNI."""
    yield from _running_loops("quantised", request.param)


@needs_avx2
@pytest.mark.parametrize("quantised_isa", ISAS, indirect=True)
@pytest.mark.parametrize("shape", SHAPES)
def test_compiled_matches_dequantised_weights_and_torchs_kernels(shape, quantised_isa):
    torch.manual_seed(sum(shape))
    out_f, in_f = shape
    w = torch.randn(out_f, in_f) * 0.05
    w[:, 3] *= 40  # an outlier input channel, as this model has
    q, s = quantize_int8(w)
    deq8 = q.float() * s[:, None]
    int8 = Int8Linear(q, s, use_compiled=True)
    four = in_f % 32 == 0
    # torch's int8 kernel crashes at in = 100 (torch 2.13): compare with it on multiples of 32 only
    int8_torch = Int8Linear(q, s, use_compiled=False) if four else None
    assert int8.backend == "compiled"
    if four:
        nib, scale, lo = quantize_int4(w)
        deq4 = _dequant4(nib, scale, lo)
        int4 = Int4Linear(nib, scale, lo, use_compiled=True)
        int4_torch = Int4Linear(nib, scale, lo, use_compiled=False) if out_f % 16 == 0 else None  # torch's needs it
    for rows in (1, 2, 3, 4, 5, 9):  # above 4 the kernel runs 4 rows at a time
        x = torch.randn(rows, in_f)
        x[:, 7] *= 30  # an outlier activation, in the same group of 32 as the outlier weight channel
        ref = x @ deq8.t()
        got = int8(x)
        assert got.shape == (rows, out_f) and got.dtype == torch.float32
        assert ((got - ref).abs() <= _int16_rounding_bound(x, deq8)).all()
        # torch's kernel rounds the activations to bf16: the same up to that rounding
        if int8_torch is not None:
            assert (int8_torch(x) - got).abs().max() < 0.02 * ref.abs().max()
        if four:
            ref4 = x @ deq4.t()
            got4 = int4(x)
            # int4 rounds Σ q·x (the scale's part; the minimum's Σ x is fp32): bound by |q · scale|
            assert ((got4 - ref4).abs() <= _int16_rounding_bound(x, _dequant4(nib, scale, torch.zeros_like(lo)))).all()
            if int4_torch is not None:  # bf16 activations, scales and zeros: the outlier costs it ~3.5%
                assert (int4_torch(x) - got4).abs().max() < 0.06 * ref4.abs().max()


@pytest.fixture
def f32_wide_isa(request):
    """The fp32 kernel's loop for 2-8 rows of one instruction set: gemv.cpp's AVX2 one, or gemv_f32_wide.cpp's
    where the CPU has AVX-512."""
    yield from _running_loops("f32_wide", request.param)


@needs_avx2
@pytest.mark.parametrize("f32_wide_isa", ["avx2", "avx512"], indirect=True)
@pytest.mark.parametrize("shape", SHAPES + [(5, 15), (7, 1)])
def test_compiled_fp32_matches_torchs_fp32_matmul(shape, f32_wide_isa):
    torch.manual_seed(sum(shape) + 1)
    out_f, in_f = shape
    w = torch.randn(out_f, in_f) * 0.05
    w[:, min(3, in_f - 1)] *= 40
    lin = CompiledDenseLinear(w)
    assert lin.weight is w  # read in place, never copied
    # AVX2: up to 4 rows a pass, 4 or 3 output rows at once; AVX-512: groups of 2-8 rows, 6 to 2 output
    # rows at once, a last single row by the AVX2 loop; `in` not a multiple of 16 ends under a mask
    for rows in (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 17):
        x = torch.randn(rows, in_f)
        x[:, min(7, in_f - 1)] *= 30
        ref = x @ w.t()
        got = lin(x)
        assert got.shape == (rows, out_f) and got.dtype == torch.float32
        # fp32 products and sums in another order: within a few fp32 roundings of the largest term
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5 * (x.abs() @ w.abs().t()).max().item())


@needs_avx2
@pytest.mark.parametrize("shape", [(960, 576), (37, 100), (3, 32)])
def test_both_one_row_fp32_kernels_give_the_same_sums(shape):
    """kernel_tiers.py picks one of two one-row fp32 kernels per machine: they must agree bit for bit."""
    mod = cpu_kernels.compiled()
    assert mod is not None
    torch.manual_seed(sum(shape))
    w, x = torch.randn(*shape), torch.randn(1, shape[1])
    before = mod.get_f32_one_row()
    try:
        got = {}
        for kernel in ("blocked", "streamed"):
            mod.set_f32_one_row(kernel)
            assert mod.get_f32_one_row() == kernel
            got[kernel] = mod.f32_linear(x, w)
        torch.testing.assert_close(got["blocked"], x @ w.t(), rtol=1e-5, atol=1e-4)
        assert torch.equal(got["blocked"], got["streamed"])
        with pytest.raises(RuntimeError, match="'blocked' or 'streamed'"):
            mod.set_f32_one_row("fastest")
    finally:
        mod.set_f32_one_row(before)


@needs_avx2
def test_fp32_engine_runs_the_compiled_kernel_on_its_own_tensors(engine):
    from symphony_core.model.exact_blocks import MAX_ROWS as BLOCKS_MAX_ROWS
    from symphony_core.model.exact_blocks import BlocksLinear
    from symphony_core.model.quant import DenseLinear, OnednnLinear, RowsSwitchLinear
    from symphony_core.model.weight_formats import FP32_KERNEL_MAX_ROWS, fp32_weight

    m = engine.model
    assert engine.stats()["weights"] == "fp32" and m.pad is False
    # The compiled kernel up to its limit, then MKL; from where oneDNN's kernel measured faster here (kernel
    # tiers are timed per machine), oneDNN: right after the compiled kernel, or after MKL's middle tier.
    top = min(FP32_KERNEL_MAX_ROWS, m.onednn_from - 1) if m.onednn_from else FP32_KERNEL_MAX_ROWS
    wide_kind = OnednnLinear if m.onednn_from else DenseLinear
    middle = m.onednn_from > FP32_KERNEL_MAX_ROWS + 1  # MKL between the compiled kernel and oneDNN
    for lin in [m.layers[0].wqkv, m.layers[-1].w_down, m.lm_head]:
        assert isinstance(lin, RowsSwitchLinear)
        tiers = lin.tiers
        if isinstance(
            tiers[0][1], BlocksLinear
        ):  # decode's fewest rows from the GGUF's exact blocks (test_exact_blocks.py)
            (below, blocks), tiers = tiers[0], tiers[1:]
            assert below == BLOCKS_MAX_ROWS and blocks.weight is fp32_weight(lin) and lin.pick(1) is blocks
        (rows, fast), (_, wide) = tiers[0], tiers[-1]
        assert rows == top and isinstance(fast, CompiledDenseLinear) and isinstance(wide, wide_kind)
        assert len(tiers) == (3 if middle else 2), tiers
        assert all(t.weight is fp32_weight(lin) for _, t in lin.tiers)  # one tensor, shared (oneDNN packs its own copy)
        assert isinstance(lin.pick(BLOCKS_MAX_ROWS + 1), CompiledDenseLinear)
        if middle:
            assert lin.tiers[1][0] == m.onednn_from - 1 and isinstance(lin.tiers[1][1], DenseLinear)
            assert isinstance(lin.pick(top + 1), DenseLinear)
            assert isinstance(lin.pick(m.onednn_from), OnednnLinear)
        else:
            assert isinstance(lin.pick(top + 1), wide_kind)
    if engine.config.tie_embeddings:
        assert fp32_weight(m.lm_head) is m.embed


@needs_avx2
@pytest.mark.skipif(not onednn_fp32(), reason="torch has no oneDNN fp32 matmul here")
@pytest.mark.parametrize(
    "onednn_from, expected",
    [
        (0, [(63, "CompiledDenseLinear"), (1 << 30, "DenseLinear")]),
        (2, [(1, "CompiledDenseLinear"), (1 << 30, "OnednnLinear")]),
        (64, [(63, "CompiledDenseLinear"), (1 << 30, "OnednnLinear")]),
        (256, [(63, "CompiledDenseLinear"), (255, "DenseLinear"), (1 << 30, "OnednnLinear")]),
    ],
)
def test_fp32_tiers_wherever_onednn_starts(onednn_from, expected):
    """The fp32 tiers for each place the machine's timing can put oneDNN's start (ONEDNN_ROWS_TRIED): a start past
    the compiled kernel's limit keeps MKL in between (a 2-core CI machine measured 256 once)."""
    from symphony_core.model.weight_formats import FP32_KERNEL_MAX_ROWS, WIDE, _fp32_tiers

    assert (FP32_KERNEL_MAX_ROWS, WIDE) == (63, 1 << 30)
    w = torch.randn(96, 64)
    tiers = _fp32_tiers(w, True, onednn_from)
    assert [(rows, type(lin).__name__) for rows, lin in tiers] == expected
    assert all(lin.weight is w for _, lin in tiers)


@needs_avx2
@pytest.mark.parametrize("shape", [(960, 576), (130, 96), (3, 32), (37, 100)])
def test_both_instruction_sets_give_the_same_sums_but_for_their_order(shape):
    """The AVX-512 VNNI loops compute the AVX2 loops' integer group sums; only the fp32 adds of the groups
    differ in order. The default is VNNI where the CPU has it; asking for it elsewhere is refused clearly."""
    mod = cpu_kernels.compiled()
    before = mod.get_quantised_isa()
    if not mod.get_quantised_isa() == "avx512_vnni":
        with pytest.raises(ValueError, match="lacks AVX-512 VNNI"):
            mod.set_quantised_isa("avx512_vnni")
        pytest.skip("this CPU has no AVX-512 VNNI")
    torch.manual_seed(sum(shape))
    w = torch.randn(*shape) * 0.05
    q, s = quantize_int8(w)
    four = shape[1] % 32 == 0
    if four:
        nib, scale, lo = quantize_int4(w)
        int4 = Int4Linear(nib, scale, lo, use_compiled=True)
    try:
        for rows in (1, 2, 3, 4, 6):
            x = torch.randn(rows, shape[1])
            got = {}
            for isa in ISAS:
                mod.set_quantised_isa(isa)
                assert mod.get_quantised_isa() == isa
                got[isa] = (mod.int8_linear(x, q, s), int4(x) if four else None)
            for a, b in zip(got["avx2"], got["avx512_vnni"]):
                if a is not None:  # a few fp32 roundings of the largest partial sum
                    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5 * a.abs().max().item())
        with pytest.raises(ValueError, match="'avx2' or 'avx512_vnni'"):
            mod.set_quantised_isa("sse")
    finally:
        mod.set_quantised_isa(before)


@needs_avx2
def test_fp32_wide_loop_is_refused_clearly_where_the_cpu_lacks_it():
    mod = cpu_kernels.compiled()
    before = mod.get_f32_wide_isa()
    try:
        with pytest.raises(ValueError, match="'avx2' or 'avx512'"):
            mod.set_f32_wide_isa("avx10")
        try:
            mod.set_f32_wide_isa("avx512")
        except ValueError as e:
            assert "lacks AVX-512" in str(e) and mod.get_f32_wide_isa() == "avx2"
        else:
            assert mod.get_f32_wide_isa() == "avx512"
    finally:
        mod.set_f32_wide_isa(before)


@needs_avx2
def test_compiled_kernels_refuse_bad_input_clearly():
    mod = cpu_kernels.compiled()
    q, s = quantize_int8(torch.randn(8, 64))
    with pytest.raises(RuntimeError, match="x has 32 features but the weight takes 64"):
        mod.int8_linear(torch.randn(1, 32), q, s)
    with pytest.raises(RuntimeError, match="2-D float32"):
        mod.int8_linear(torch.randn(1, 64, dtype=torch.float64), q, s)
    with pytest.raises(ValueError, match="multiple of 32"):
        Int4Linear(torch.zeros(8, 48, dtype=torch.uint8), torch.ones(8, 1), torch.zeros(8, 1))
    w = torch.randn(8, 64)
    with pytest.raises(RuntimeError, match="x has 32 features but the weight takes 64"):
        mod.f32_linear(torch.randn(1, 32), w)
    with pytest.raises(RuntimeError, match="contiguous float32"):
        mod.f32_linear(torch.randn(1, 8), w.t())
    with pytest.raises(ValueError, match="not contiguous"):
        CompiledDenseLinear(w.t())


def test_env_var_forces_torchs_kernels(monkeypatch, capsys):
    q, s = quantize_int8(torch.randn(16, 64))
    x = torch.randn(2, 64)
    monkeypatch.setenv(loader.ENV, "torch")
    forced = Int8Linear(q, s)
    assert forced.backend == "torch" and cpu_kernels.compiled() is None
    assert f"{loader.ENV}=torch" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="not available"):
        Int8Linear(q, s, use_compiled=True)
    monkeypatch.setenv(loader.ENV, "fast")
    with pytest.raises(ValueError, match="choose one of auto, torch"):
        Int8Linear(q, s)
    monkeypatch.setenv(loader.ENV, "auto")
    auto = Int8Linear(q, s)
    assert auto.backend == ("compiled" if loader.cpu_ok() else "torch")
    assert (auto(x) - forced(x)).abs().max() < 0.02 * forced(x).abs().max()


def test_fp32_engine_forced_to_torch_keeps_mkl_and_agrees(monkeypatch, engine):
    """SYMPHONY_CPU_KERNELS=torch leaves fp32 on the plain tensors (MKL, padded rows); its logits are the
    compiled kernel's to fp32 rounding, prefill and decode."""
    from symphony_core import Engine, PredCall

    monkeypatch.setenv(loader.ENV, "torch")
    eng = Engine(num_pages=32)
    try:
        assert isinstance(eng.model.layers[0].wqkv, torch.Tensor) and eng.model.pad is True

        def logits(e):
            kv = e.kv_create()
            first = e.pred_batch([PredCall(kv, e.tokenize("The capital of France is"))])[0]
            second = e.pred_batch([PredCall(kv, [first.argmax()])])[0]
            e.kv_close(kv)
            return [torch.as_tensor(d.logits) for d in (first, second)]

        for mkl, ours in zip(logits(eng), logits(engine)):
            assert mkl.argmax() == ours.argmax()
            torch.testing.assert_close(ours, mkl, rtol=1e-4, atol=1e-4)
    finally:
        eng.shutdown()


@pytest.mark.slow  # ~25 s: loads a q4 engine
def test_q4_engine_runs_torchs_kernels_when_forced(monkeypatch, engine):
    """The whole engine honours the variable: torch's kernels in every quantised tier, at their own
    row limits, and the same first greedy tokens as fp32 on a held prompt."""
    from symphony_core import Engine, PredCall
    from symphony_core.model.quant import Int4Linear, Int8Linear, RowsSwitchLinear
    from symphony_core.model.weight_formats import KERNEL_MAX_ROWS

    monkeypatch.setenv(loader.ENV, "torch")
    eng = Engine(num_pages=32, weights="q4")
    try:
        linears = [lin for layer in eng.model.layers for lin in (layer.wqkv, layer.w_down)] + [eng.model.lm_head]
        assert all(isinstance(s, RowsSwitchLinear) for s in linears)
        # the fp32 tiers above them (MKL, oneDNN: measured per machine) have no compiled form to force off
        quantised = [lin for s in linears for _, lin in s.tiers if isinstance(lin, (Int4Linear, Int8Linear))]
        assert quantised and {lin.backend for lin in quantised} == {"torch"}
        assert eng.model.layers[0].wqkv.tiers[0][0] == KERNEL_MAX_ROWS["torch"][0]
        prompt = "The capital of France is"

        def two(e):  # the prompt runs the fp32 tier (5 rows), the next token the quantised one
            kv = e.kv_create()
            toks = [e.pred_batch([PredCall(kv, e.tokenize(prompt))])[0].argmax()]
            toks.append(e.pred_batch([PredCall(kv, toks[-1:])])[0].argmax())
            e.kv_close(kv)
            return toks

        assert two(eng) == two(engine)
    finally:
        eng.shutdown()

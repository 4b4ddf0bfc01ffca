"""exact_blocks.py and gemv_blocks.cpp: fp32 matmuls from the GGUF blocks that hold the fp32 weights exactly
give the dense kernel's result (bit for bit at one row), and the fp32 engine uses them only where the blocks
equal its weights."""

from __future__ import annotations

import contextlib

import pytest
import torch

from symphony_core import PredCall
from symphony_core.model import exact_blocks as eb
from symphony_core.model.cpu_kernels import compiled, loader
from symphony_core.model.gguf_blocks import dequantize
from symphony_core.model.registry import resolve_model
from tests.exact_blocks_helpers import dense_only

pytestmark = pytest.mark.skipif(
    not loader.cpu_ok() or compiled() is None, reason="the compiled CPU kernels are not built here"
)


def _q4_1(out: int, cols: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random Q4_1 blocks whose d and m are fp16 values, as a GGUF's are."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (out, cols), dtype=torch.uint8, generator=g)
    d = (torch.rand(out, cols // 32, generator=g) * 0.02).half().float()
    m = (-torch.rand(out, cols // 32, generator=g) * 0.15).half().float()
    return q, d, m


def _q8_0(out: int, cols: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(-127, 128, (out, cols), dtype=torch.int8, generator=g)
    return q, (torch.rand(out, cols // 32, generator=g) * 0.01).half().float()


@pytest.fixture(params=["avx2", "avx512"])
def f32_wide_isa(request):
    mod = compiled()
    before = mod.get_f32_wide_isa()
    try:
        mod.set_f32_wide_isa(request.param)
    except ValueError as e:
        pytest.skip(str(e))
    yield request.param
    mod.set_f32_wide_isa(before)


@pytest.mark.parametrize("fmt", ["Q4_1", "Q8_0"])
@pytest.mark.parametrize("shape", [(960, 576), (37, 96), (5, 32), (1536, 576)])
def test_blocks_give_the_dense_kernels_sums(fmt, shape, f32_wide_isa):
    mod = compiled()
    out, cols = shape
    if fmt == "Q4_1":
        parts = _q4_1(out, cols, sum(shape))
        w, packed = dequantize(parts), eb.pack_q4_1(*parts)
    else:
        parts = _q8_0(out, cols, sum(shape))
        w, packed = eb.dequantize_q8_0(*parts), eb.pack_q8_0(*parts)
    lin = eb.BlocksLinear(fmt, packed, w)
    assert packed.dtype == torch.uint8 and packed.shape == (out, cols // 32 * (24 if fmt == "Q4_1" else 36))
    before = mod.get_f32_one_row()
    try:
        for one_row in ("blocked", "streamed"):  # both dense one-row kernels sum in the same order
            mod.set_f32_one_row(one_row)
            x = torch.randn(1, cols)
            assert torch.equal(lin(x), mod.f32_linear(x, w)), f"{one_row}: one row differs from the dense kernel"
    finally:
        mod.set_f32_one_row(before)
    for rows in (2, 3, 4, 5, 8, 9):
        x = torch.randn(rows, cols)
        got = lin(x)
        if rows <= eb.MAX_ROWS or f32_wide_isa == "avx2":  # the dense kernel's own order: its sums bit for bit
            assert torch.equal(got, mod.f32_linear(x, w)), f"{rows} rows differ from the dense kernel"
        else:  # past MAX_ROWS the engine runs the dense tiers; here the blocks group rows by 4, the dense loop by 8
            ref = x.double() @ w.double().t()
            torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5 * (x.abs() @ w.abs().t()).max().item())


def test_blocks_refuse_bad_input_clearly():
    mod = compiled()
    packed = eb.pack_q4_1(*_q4_1(8, 64, 1))
    with pytest.raises(RuntimeError, match="x has 32 features but the weight takes 64"):
        mod.q4_1_f32_linear(torch.randn(1, 32), packed)
    with pytest.raises(RuntimeError, match=r"Q4_1 blocks must be a contiguous uint8 CPU tensor \[out, in / 32 \* 24\]"):
        mod.q4_1_f32_linear(torch.randn(1, 64), packed[:, :40])
    with pytest.raises(RuntimeError, match="Q8_0 blocks must be"):
        mod.q8_0_f32_linear(torch.randn(1, 64), packed.float())
    with pytest.raises(RuntimeError, match="2-D float32"):
        mod.q4_1_f32_linear(torch.randn(1, 64, dtype=torch.float64), packed)


def test_env_var_turns_the_blocks_off_and_refuses_other_values(monkeypatch, tmp_path):
    w = {"lm_head": torch.zeros(4, 32)}
    monkeypatch.setenv(eb.ENV, "off")
    assert eb.exact_blocks(w, 1, 1, tmp_path / "x.gguf", tmp_path) == {}
    monkeypatch.setenv(eb.ENV, "fast")
    with pytest.raises(ValueError, match="SYMPHONY_FP32_BLOCKS='fast': choose 'auto'"):
        eb.exact_blocks(w, 1, 1, tmp_path / "x.gguf", tmp_path)


def _dense_weights(model) -> dict[str, torch.Tensor]:
    from symphony_core.model.weight_formats import PARTS, fp32_weight

    out = {f"{i}.{a}": fp32_weight(getattr(layer, a)) for i, layer in enumerate(model.layers) for a in PARTS}
    out["lm_head"] = fp32_weight(model.lm_head)
    return out


def test_fp32_engine_runs_every_smollm2_tensor_from_its_blocks_below_max_rows(engine):
    m = engine.model
    lins = [getattr(layer, a) for layer in m.layers for a in ("wqkv", "wo", "w_gate_up", "w_down")] + [m.lm_head]
    for lin in lins:
        rows, first = lin.tiers[0]
        assert isinstance(first, eb.BlocksLinear) and rows == eb.MAX_ROWS
        assert first.weight is lin.tiers[-1][1].weight  # the dense tensor it equals, which the wider tiers run
        assert lin.pick(eb.MAX_ROWS) is first and lin.pick(eb.MAX_ROWS + 1) is not first
    assert {lin.tiers[0][1].fmt for lin in lins[:-1]} == {"Q4_1"} and m.lm_head.tiers[0][1].fmt == "Q8_0"
    assert m.fused.stack(1) is not None  # the one-call decode step runs them too


def test_engine_logits_with_and_without_the_blocks(engine):
    """Decode steps of one and of three rows: the dense kernels' logits bit for bit, fused step or per-call loop.
    Each variant decodes on its own forks of the same prefilled files."""
    m = engine.model
    kvs = [engine.kv_create() for _ in range(3)]
    got: dict[tuple[bool, int, bool], torch.Tensor] = {}
    try:
        engine.pred_batch([PredCall(kv, engine.tokenize(f"Item {i}: the" + " sea" * i)) for i, kv in enumerate(kvs)])
        for blocks in (True, False):
            with contextlib.nullcontext() if blocks else dense_only(m):
                for fused in (True, False):
                    m.fused.enabled = fused
                    for n in (1, 3):
                        forks = [engine.kv_fork(kv) for kv in kvs[:n]]
                        first = engine.pred_batch([PredCall(f, [100 + i]) for i, f in enumerate(forks)])
                        second = engine.pred_batch([PredCall(f, [d.argmax()]) for f, d in zip(forks, first)])
                        got[blocks, n, fused] = torch.stack([torch.as_tensor(d.logits) for d in first + second])
                        for f in forks:
                            engine.kv_close(f)
    finally:
        m.fused.enabled = True
        for kv in kvs:
            engine.kv_close(kv)
    for key in got:
        if key[0]:
            assert torch.equal(got[key], got[False, *key[1:]]), f"{key[1]} rows, fused={key[2]}: logits differ"


def test_only_tensors_the_blocks_hold_exactly_are_taken_and_the_cache_is_checked(engine, tmp_path, monkeypatch):
    gguf = resolve_model("smollm2").path
    cfg = engine.config
    weights = _dense_weights(engine.model)
    off_by_one_ulp = weights["3.wo"].clone()
    off_by_one_ulp[7, 11] = torch.nextafter(off_by_one_ulp[7, 11], torch.tensor(1.0))
    weights["3.wo"] = off_by_one_ulp
    (tmp_path / "model.safetensors").write_bytes(b"converted weights")
    found = eb.exact_blocks(weights, cfg.n_heads, cfg.n_kv_heads, gguf, tmp_path)
    assert "3.wo" not in found and "3.w_down" in found and "lm_head" in found
    assert len(found) == len(weights) - 1
    assert all(lin.weight is weights[k] for k, lin in found.items())
    assert (tmp_path / "fp32-blocks.safetensors").exists()

    def unread(*_):
        raise AssertionError("read the GGUF again")

    monkeypatch.setattr(eb, "_read", unread)
    again = eb.exact_blocks(weights, cfg.n_heads, cfg.n_kv_heads, gguf, tmp_path)  # from the cache
    assert again.keys() == found.keys()
    assert all(torch.equal(again[k].blocks, found[k].blocks) and again[k].fmt == found[k].fmt for k in found)
    (tmp_path / "model.safetensors").write_bytes(b"converted again")  # other fp32 weights: the cache is stale
    with pytest.raises(AssertionError, match="read the GGUF again"):
        eb.exact_blocks(weights, cfg.n_heads, cfg.n_kv_heads, gguf, tmp_path)


def test_the_cache_is_not_loaded_as_weights_and_survives_a_read_only_or_corrupt_file(
    engine, tmp_path, monkeypatch, capsys
):
    from symphony_core.model.loader import is_derived_cache, load_model

    assert (engine.model_dir / "fp32-blocks.safetensors").exists()  # the session engine wrote it
    assert is_derived_cache(engine.model_dir / "fp32-blocks.safetensors")
    assert not any(k.startswith(("0.", "lm_head")) and "." not in k[2:] for k in load_model("smollm2").weights)
    assert all(v.dtype == torch.float32 for v in load_model("smollm2").weights.values())  # no uint8 blocks among them

    gguf, cfg = resolve_model("smollm2").path, engine.config
    weights = _dense_weights(engine.model)
    (tmp_path / "model.safetensors").write_bytes(b"converted weights")
    (tmp_path / "fp32-blocks.safetensors").write_bytes(b"not a safetensors file")
    found = eb.exact_blocks(weights, cfg.n_heads, cfg.n_kv_heads, gguf, tmp_path)
    assert len(found) == len(weights) and "could not be read" in capsys.readouterr().err
    cached = tmp_path / "fp32-blocks.safetensors"
    assert cached.stat().st_size > 1000  # rewritten whole
    cached.unlink()
    tmp_path.chmod(0o555)
    try:
        again = eb.exact_blocks(weights, cfg.n_heads, cfg.n_kv_heads, gguf, tmp_path)
    finally:
        tmp_path.chmod(0o755)
    assert again.keys() == found.keys()
    if not cached.exists():  # (root ignores the mode)
        assert "could not cache the fp32 blocks" in capsys.readouterr().err


def test_cached_blocks_that_no_longer_hold_the_weights_are_read_again(engine, tmp_path, monkeypatch):
    gguf, cfg = resolve_model("smollm2").path, engine.config
    weights = _dense_weights(engine.model)
    (tmp_path / "model.safetensors").write_bytes(b"converted weights")
    eb.exact_blocks(weights, cfg.n_heads, cfg.n_kv_heads, gguf, tmp_path)
    reread = []
    real_read = eb._read
    monkeypatch.setattr(eb, "_read", lambda *a: reread.append(1) or real_read(*a))
    swapped = dict(weights, **{"2.wo": weights["3.wo"], "3.wo": weights["2.wo"]})  # the same files, laid out otherwise
    found = eb.exact_blocks(swapped, cfg.n_heads, cfg.n_kv_heads, gguf, tmp_path)
    assert reread == [1] and "2.wo" not in found and "3.wo" not in found
    for key, lin in found.items():
        assert torch.equal(eb.unpack(lin.fmt, lin.blocks), swapped[key])

"""Weight formats a CPU engine can run: "fp32" (exact), "q8" (int8) and "q4" (4-bit, its LM head int8).

- fp32: the dequantised weights as they are; the reference the parity tests check. Where the compiled
  kernels load, each projection and the LM head runs the compiled fp32 kernel up to `FP32_KERNEL_MAX_ROWS`
  rows and MKL's sgemm above, on the same tensors (no copy; fp32 throughout, only the summation order
  differs) — and oneDNN's fp32 kernel, on a packed copy, from the rows where it measured faster than both
  (kernel_tiers.py; on AVX-512 CPUs). Below `exact_blocks.MAX_ROWS` rows, a tensor that came from GGUF
  blocks which hold it exactly runs from those blocks instead (exact_blocks.py: the same fp32 arithmetic on
  a sixth of the bytes).
- q8: every projection and the LM head as per-row int8 weights, quantised from the fp32 weights
  (the activations rounded only for the dot products: to int16 per group of 32 in the compiled kernels,
  bf16 in torch's).
- q4: the projections as 4-bit groups of 32 — straight from the GGUF's Q4_1 blocks when the model
  came as a Q4_1 GGUF (no second rounding), else quantised the same way from fp32; the LM head
  int8 (the shipped file keeps it at 8 bits).

Both switch kernels by the rows of the call (`KERNEL_MAX_ROWS`, the compiled int8 limit measured per
machine by kernel_tiers.py): the weight-only kernels win while reading the weights is the cost (decode),
the wide tier above. That is bf16 (`Bf16Linear`, oneDNN) where the CPU multiplies bf16 natively and it
measured faster than fp32 (`_wide_tiers`), else fp32's own
tiers (the compiled fp32 kernel to `FP32_KERNEL_MAX_ROWS`, MKL's sgemm for wide batches and prefill,
where the matmul is compute-bound). The weight-only kernels are Symphony's own compiled ones
(cpu_kernels/, built by `make kernels`) where they load, else torch's.

Quantised tensors are cached beside the converted fp32 weights (`quant-q8.safetensors`,
`quant-q4.safetensors`), so they are computed once; packing them for the kernels happens at load.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from ..errors import ModelError
from .cpu_kernels import compiled
from .cpu_kernels import digest as kernels_digest
from .exact_blocks import MAX_ROWS as BLOCKS_MAX_ROWS
from .exact_blocks import exact_blocks
from .huge_pages import into_huge_pages
from .kernel_tiers import BF16_ENV, SAMPLE_LAYERS, f32_one_row, int8_max_rows, onednn_from_rows, wide_bf16
from .quant import (
    INT4_GROUP,
    Bf16Linear,
    CompiledDenseLinear,
    DenseLinear,
    Int4Linear,
    Int8Linear,
    OnednnLinear,
    RowsSwitchLinear,
    TierLinear,
    native_bf16,
    onednn_fp32,
    quantize_int4,
    quantize_int8,
)

WEIGHT_FORMATS = ("fp32", "q8", "q4")
# Which kernel runs at how many rows, by kernel backend: (int4 up to, int8 up to) rows; MKL's fp32
# sgemm above (wide batches and prefill are compute-bound, and the weight-only kernels lose). int4 is
# q4's only (q8 has no int4 tier). Measured by `python -m bench.kernels` on the 2-core AVX2 EPYC
# (Zen 1), ms per step's matmuls, alternating, median; a shared, noisy machine:
# - 2 threads, fp32 / torch int8 / torch int4 / compiled int8 / compiled int4 (a quiet moment):
#   1 row 44.9 / 25.7 / 22.5 / 15.1 / 18.3; 2 rows 45.3 / 28.4 / 28.0 / 18.8 / 23.7; 4 rows 46.1 / 42.6 /
#   42.2 / 26.2 / 37.1; 8 rows 67.9 / 79.3 / 78.8 / 48.2 / 70.8; 16 rows 112.4 / 151.4 / 155.5 / 94.6 / 138.5.
# - 1 thread, same order: 1 row 80.2 / 45.7 / 40.7 / 25.8 / 32.1; 16 rows 213 / 304 / 309 / 187 / 270.
# The compiled int8 kernel beats MKL's fp32 to 16 rows; torch's lose from 8. Since the compiled fp32
# kernel (FP32_KERNEL_MAX_ROWS below) it is the fp32 tier to beat: (bench.kernels, 2 threads, 09:47, compiled
# int8 / compiled fp32) 4 rows 25.9 / 32.7, 8 rows 48.1 / 47.9, 16 rows 93.5 / 81.1, so the compiled int8
# runs up to 8 rows and exact fp32 above. Since the quantised kernels take int16 activations (gemv.cpp;
# bench.kernels, 2 threads, 20:55, compiled fp32 / int8 / int4): 1 row 31.5 / 11.0 / 13.3; 2 rows 33.0 /
# 16.0 / 19.1; 4 rows 32.9 / 26.8 / 32.8; 5 rows 39.4 / 33.7 / 42.9; 6 rows 44.6 / 42.3 / 49.1; 8 rows
# 50.2 / 50.5 / 62.7: the same tiers. On this CPU unpacking nibbles costs more than the bytes it
# saves, so the compiled int4 trails the compiled int8 even at 1 row; q4 keeps it for 1-2 rows (its
# 4-bit weights are what q4 means) — (0, 8) would trade that for ~15-20% of the matmul time.
# The compiled int8 limit here is the floor: a q8 / q4 engine measures where int8 stops winning on its
# machine at the counts of INT8_ROWS_TRIED below (kernel_tiers.py; 8 rows on the Zen 1 above, 63 on a Zen 3 EPYC).
KERNEL_MAX_ROWS = {"compiled": (2, 8), "torch": (4, 4)}
# Rows up to which every backend runs a format's own quantised kernel (q4's int4, q8's int8): tests
# and bench/quality.py decode in groups of this, so they measure those kernels.
QUANTISED_MAX_ROWS = min(min(rows) for rows in KERNEL_MAX_ROWS.values())
# fp32: the compiled kernel up to this many rows, MKL's sgemm above. `python -m bench.kernels` on the 2-core
# Zen 1 EPYC, ms per step's matmuls, MKL padded / compiled, medians, alternating:
# - 2 threads: 1 row 42.4 / 29.5; 2 rows 42.2 / 31.1; 4 rows 41.4 / 34.0; 8 rows 66.9 / 50.9; 16 rows
#   104.5 / 85.9; 32 rows 161.2 / 149.2; 64 rows 299.6 / 283.8.
# - 1 thread: 1 row 80.7 / 48.0; 16 rows 209.7 / 176.7; 32 rows 331.3 / 335.1; 64 rows 573.6 / 645.0.
# - 2 threads, another alternating run (MKL padded / MKL unpadded / compiled): 33 rows 223 / 223 /
#   172; 37 rows 222 / 257 / 190; 45 rows 246 / 293 / 225; 57 rows 316 / 333 / 292; 64 rows 298 / 298 / 290.
# Once the weights are no longer the cost MKL's sgemm computes faster: from ~64 rows on two threads (the
# engine's default here: memory stays the bottleneck that long) and ~32 on one. MKL takes 64 rows and up,
# where llama.py never pads (so the fp32 model runs unpadded); on one thread 32-63 rows lose up to ~12%.
FP32_KERNEL_MAX_ROWS = 63
# The row counts a q8 / q4 engine times int8 against fp32 at, from KERNEL_MAX_ROWS's floor. They stop at
# FP32_KERNEL_MAX_ROWS: above it llama.py hands MKL's sgemm feature-major activations, which the
# row-reading kernels would have to copy first.
INT8_ROWS_TRIED = (KERNEL_MAX_ROWS["compiled"][1], 16, 32, 48, FP32_KERNEL_MAX_ROWS)
WIDE = 1 << 30
# The row count a quantised engine times bf16 against fp32 at, where the CPU multiplies bf16 natively: a wide
# batch, where the matmul is compute-bound. On a 2-core Zen 5 EPYC (AVX512-BF16), ms per model step's matmuls,
# bf16 (oneDNN) / fp32 (MKL sgemm): 16 rows 16.2 / 44.0, 64 rows 33.3 / 102.7, 512 rows 203 / 674.
BF16_ROWS_TRIED = 64
# The row counts every CPU engine times oneDNN's packed fp32 matmul against the compiled kernel and MKL at
# (kernel_tiers.py, 4.): from decode's few rows, where the fused decode stack needs the compiled kernel, to prefill.
ONEDNN_ROWS_TRIED = (8, 16, 32, 64, 256)
CACHE_VERSION = "2"


def check_weight_format(fmt: str, device: torch.device) -> str:
    if fmt not in WEIGHT_FORMATS:
        raise ModelError(f"weights={fmt!r}: choose one of {', '.join(WEIGHT_FORMATS)}")
    if fmt != "fp32" and device.type != "cpu":
        raise ModelError(
            f"weights={fmt!r} runs on the CPU only (its kernels are fbgemm's and torch's CPU int4); "
            f"on {device.type} use the default"
        )
    return fmt


PARTS = ("wqkv", "wo", "w_gate_up", "w_down")  # a layer's projections, as llama.py's LayerWeights names them


def _pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    return q[:, 0::2] | (q[:, 1::2] << 4)


def _unpack_nibbles(p: torch.Tensor) -> torch.Tensor:
    return torch.stack([p & 0x0F, p >> 4], dim=-1).view(p.shape[0], -1)


def _int4_parts(layer: int, attr: str, fused: torch.Tensor, blocks: dict) -> tuple:
    """(nibbles, scale, minimum) of one fused weight: the GGUF's Q4_1 blocks where the file has them all."""
    if (layer, attr) in blocks:
        return blocks[layer, attr]
    return quantize_int4(fused)


def _compute(model, fmt: str, gguf_path: Path | None) -> dict[str, torch.Tensor]:
    """The quantised tensors of every projection (and the LM head), as a flat dict to cache."""
    out: dict[str, torch.Tensor] = {}
    blocks = {}
    if fmt == "q4" and gguf_path is not None:
        from .gguf_blocks import read_q4_1

        blocks = read_q4_1(gguf_path, model.cfg.n_heads, model.cfg.n_kv_heads)
    for i, layer in enumerate(model.layers):
        for attr in PARTS:
            w = getattr(layer, attr)
            key = f"{i}.{attr}"
            out[key + ".q8"], out[key + ".q8_scale"] = quantize_int8(w)
            if fmt == "q4" and fp32_weight(w).shape[1] % INT4_GROUP == 0:  # else this projection stays int8
                q, scale, minimum = _int4_parts(i, attr, w, blocks)
                out[key + ".q4"], out[key + ".q4_scale"], out[key + ".q4_min"] = _pack_nibbles(q), scale, minimum
    out["lm_head.q8"], out["lm_head.q8_scale"] = quantize_int8(model.lm_head)
    return out


def _load_or_compute(model, fmt: str, gguf_path: Path | None, cache_dir: Path | None) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file, save_file

    path = cache_dir / f"quant-{fmt}.safetensors" if cache_dir is not None else None
    if path is not None and path.exists():
        with safe_open(str(path), "pt") as f:
            current = (f.metadata() or {}).get("version") == CACHE_VERSION
        if current:
            return load_file(str(path))
    print(f"symphony: quantising the weights to {fmt} once" + (f"; cached at {path}" if path else ""), file=sys.stderr)
    tensors = _compute(model, fmt, gguf_path)
    if path is not None:
        tmp = path.with_suffix(f".tmp{id(tensors)}")
        try:
            save_file(tensors, str(tmp), metadata={"version": CACHE_VERSION, "source": str(gguf_path or "fp32")})
            tmp.replace(path)
        except (OSError, SafetensorError) as e:  # a read-only cache still runs, it just quantises again next time
            print(f"symphony: could not cache the {fmt} weights: {e}", file=sys.stderr)
            tmp.unlink(missing_ok=True)
    return tensors


def _reachable(tiers: list[tuple[int, TierLinear]]) -> list[tuple[int, TierLinear]]:
    """The tiers a call can reach: one whose max_rows a tier before it already covers never runs."""
    out: list[tuple[int, TierLinear]] = []
    for max_rows, lin in tiers:
        if not out or max_rows > out[-1][0]:
            out.append((max_rows, lin))
    return out


def fp32_weight(linear) -> torch.Tensor:
    """The fp32 tensor behind one of the model's projections: the tensor itself, or its widest tier's weight."""
    if isinstance(linear, torch.Tensor):
        return linear
    if isinstance(linear, RowsSwitchLinear):
        linear = linear.tiers[-1][1]
    if not isinstance(linear, DenseLinear | CompiledDenseLinear | OnednnLinear):
        raise TypeError(f"{type(linear).__name__} holds no fp32 weight")
    return linear.weight


def _fp32_tiers(w: torch.Tensor, use_compiled: bool, onednn_from: int = 0) -> list[tuple[int, TierLinear]]:
    """The fp32 forms of `w`, sharing it: the compiled kernel up to FP32_KERNEL_MAX_ROWS rows where it can
    read `w` (contiguous fp32 on the CPU), then MKL's sgemm; oneDNN's kernel on a packed copy from
    `onednn_from` rows where that is set (kernel_tiers.onednn_from_rows), the narrower tiers below it."""
    tiers: list[tuple[int, TierLinear]] = [(WIDE, DenseLinear(w))]
    if use_compiled and w.dtype == torch.float32 and w.device.type == "cpu" and w.is_contiguous():
        tiers.insert(0, (FP32_KERNEL_MAX_ROWS, CompiledDenseLinear(w)))
    if onednn_from:
        below = [(min(rows, onednn_from - 1), lin) for rows, lin in tiers if onednn_from > 1]
        tiers = _reachable([*below, (WIDE, OnednnLinear(w))])
    return tiers


def _onednn_from(model, use_compiled: bool, cache_dir: Path | None) -> int:
    """From how many rows this engine's fp32 matmuls run oneDNN's kernel (0: never), timed on SAMPLE_LAYERS of
    its layers against the other fp32 tiers where not cached (kernel_tiers.onednn_from_rows)."""
    if model.device.type != "cpu" or model.dtype != torch.float32 or not onednn_fp32():
        return 0

    def sample() -> list[tuple[OnednnLinear, RowsSwitchLinear]]:
        return [
            (OnednnLinear(w), RowsSwitchLinear(_fp32_tiers(w, use_compiled)))
            for layer in model.layers[:SAMPLE_LAYERS]
            for w in (getattr(layer, attr) for attr in PARTS)
        ]

    return onednn_from_rows(sample, ONEDNN_ROWS_TRIED, kernels_digest(), cache_dir)


def _fp32_kind(onednn_from: int) -> str:
    """The fp32 tiers' description in the kernel-tier cache's keys of the measurements made against them."""
    return f"fp32, oneDNN from {onednn_from} rows" if onednn_from else "fp32"


def _apply_fp32(model, gguf_path: Path | None, cache_dir: Path | None) -> None:
    if model.device.type != "cpu" or model.dtype != torch.float32 or (ops := compiled()) is None:
        return  # llama.py's plain torch.mm on the tensors, padded as MKL likes
    onednn_from = model.onednn_from = _onednn_from(model, True, cache_dir)
    for layer in model.layers:
        for attr in PARTS:
            setattr(layer, attr, RowsSwitchLinear(_fp32_tiers(getattr(layer, attr), True, onednn_from)))
    model.lm_head = RowsSwitchLinear(_fp32_tiers(model.lm_head, True, onednn_from))
    model.pad = False  # padding is for MKL, which now runs from 64 rows only: matmul_rows pads none of those
    # Which fp32 kernel streams one row fastest depends on the CPU (kernel_tiers.py); timed on every layer,
    # as a decode step streams them: on 6 layers (85 MB) the two measured alike on a Zen 3 EPYC where the
    # whole model's 420 MB showed streamed's 3-10%.
    sample = [getattr(layer, attr).pick(1) for layer in model.layers for attr in PARTS]
    ops.set_f32_one_row(f32_one_row(sample, ops.set_f32_one_row, kernels_digest(), cache_dir))
    # Decode's few rows from the GGUF's blocks where they hold these very weights (exact_blocks.py).
    dense = {f"{i}.{attr}": fp32_weight(getattr(layer, attr)) for i, layer in enumerate(model.layers) for attr in PARTS}
    dense["lm_head"] = fp32_weight(model.lm_head)
    blocks = exact_blocks(dense, model.cfg.n_heads, model.cfg.n_kv_heads, gguf_path, cache_dir)
    for lin, packed in zip(blocks.values(), into_huge_pages([lin.blocks for lin in blocks.values()])):
        lin.blocks = packed
    for key, lin in blocks.items():
        layer, _, attr = key.partition(".")
        owner, attr = (model, "lm_head") if key == "lm_head" else (model.layers[int(layer)], attr)
        setattr(owner, attr, RowsSwitchLinear(_reachable([(BLOCKS_MAX_ROWS, lin), *getattr(owner, attr).tiers])))
    model.fused.clear()


def _wide_tiers(model, use_compiled: bool, cache_dir: Path | None) -> tuple[dict, list, str]:
    """A quantised engine's tiers for the batches too wide for its int8 kernel, per (layer, projection) and for
    the LM head, and their kind: bf16 where this CPU multiplies it natively and it measured faster than fp32
    at BF16_ROWS_TRIED rows (kernel_tiers.wide_bf16; `SYMPHONY_WIDE_BF16` decides instead), else fp32's own."""
    onednn_from = _onednn_from(model, use_compiled, cache_dir)
    fp32_kind = _fp32_kind(onednn_from)
    keys = [(i, attr) for i in range(len(model.layers)) for attr in PARTS]

    def fp32(k: tuple[int, str]) -> list[tuple[int, TierLinear]]:
        return _fp32_tiers(getattr(model.layers[k[0]], k[1]), use_compiled, onednn_from)

    def all_fp32() -> tuple[dict, list, str]:
        model.onednn_from = onednn_from
        return {k: fp32(k) for k in keys}, _fp32_tiers(model.lm_head, use_compiled, onednn_from), fp32_kind

    if model.device.type != "cpu" or not (native_bf16() or os.environ.get(BF16_ENV, "").strip() == "1"):
        return all_fp32()
    # The sample's layers first: the rest are rounded (or packed) only once bf16 (or fp32) is the answer.
    bf16s = {k: Bf16Linear(getattr(model.layers[k[0]], k[1])) for k in keys if k[0] < SAMPLE_LAYERS}
    sample = [(lin, RowsSwitchLinear(fp32(k))) for k, lin in bf16s.items()]
    if not wide_bf16(sample, BF16_ROWS_TRIED, kernels_digest(), cache_dir, against=fp32_kind):
        return all_fp32()
    bf16s.update({k: Bf16Linear(getattr(model.layers[k[0]], k[1])) for k in keys if k not in bf16s})
    # Streamed at the narrower of the rows they run (a few dozen): into huge pages as the other weights.
    head = Bf16Linear(model.lm_head)
    lins = [*bf16s.values(), head]
    for lin, w in zip(lins, into_huge_pages([lin.weight for lin in lins])):
        lin.weight = w
    return {k: [(WIDE, lin)] for k, lin in bf16s.items()}, [(WIDE, head)], "bf16"


def apply_weight_format(model, fmt: str, gguf_path: Path | None = None, cache_dir: Path | None = None) -> None:
    """Replace `model`'s projections and LM head (fp32 tensors) by row-switched linears, in place."""
    if fmt == "fp32":
        _apply_fp32(model, gguf_path, cache_dir)
        return
    t = _load_or_compute(model, fmt, gguf_path, cache_dir)
    # The weights a decode step streams go into huge pages, as the fp32 ones did (huge_pages.py).
    streamed = [k for k in t if k.endswith(".q8")]
    t.update(zip(streamed, into_huge_pages([t[k] for k in streamed])))
    use_compiled = compiled() is not None
    int4_rows, int8_rows = KERNEL_MAX_ROWS["compiled" if use_compiled else "torch"]
    int8s = {
        (i, attr): Int8Linear(t[f"{i}.{attr}.q8"], t[f"{i}.{attr}.q8_scale"], use_compiled=use_compiled)
        for i in range(len(model.layers))
        for attr in PARTS
    }
    wides, head_wide, wide_kind = _wide_tiers(model, use_compiled, cache_dir)
    if use_compiled:  # how far int8 wins depends on the CPU (kernel_tiers.py)
        sample = [
            (int8s[i, attr], RowsSwitchLinear(wides[i, attr]))
            for i in range(min(SAMPLE_LAYERS, len(model.layers)))
            for attr in PARTS
        ]
        int8_rows = int8_max_rows(sample, INT8_ROWS_TRIED, kernels_digest(), cache_dir, against=wide_kind)
    int4s = {
        (i, attr): Int4Linear(
            _unpack_nibbles(t[f"{i}.{attr}.q4"]), t[f"{i}.{attr}.q4_scale"], t[f"{i}.{attr}.q4_min"], use_compiled
        )
        for i in range(len(model.layers) if fmt == "q4" else 0)
        for attr in PARTS
        if f"{i}.{attr}.q4" in t
    }
    if use_compiled:  # the compiled kernels' packing of the int4 weights is made here: into huge pages too
        for lin, packed in zip(int4s.values(), into_huge_pages([lin.packed for lin in int4s.values()])):
            lin.packed = packed
    for i, layer in enumerate(model.layers):
        for attr in PARTS:
            tiers: list[tuple[int, TierLinear]] = [(int8_rows, int8s[i, attr])]
            if (i, attr) in int4s:
                tiers.insert(0, (int4_rows, int4s[i, attr]))
            tiers += wides[i, attr]  # wider batches: fp32 or bf16, compute-bound
            setattr(layer, attr, RowsSwitchLinear(_reachable(tiers)))
    head = Int8Linear(t["lm_head.q8"], t["lm_head.q8_scale"], use_compiled=use_compiled)
    model.lm_head = RowsSwitchLinear(_reachable([(int8_rows, head), *head_wide]))
    model.pad = False  # row padding is an MKL sgemm effect; the quantised kernels gain nothing from it
    model.weight_format = fmt
    model.fused.clear()

"""Linear layers for CPU decoding: int8 and int4 weight-only, fp32 by the compiled kernel, and MKL's fp32 (or
oneDNN's bf16, for quantised engines on CPUs that multiply bf16 natively) above.

Each layer computes `x @ Wᵀ` for x [T, in] fp32 and returns [T, out] fp32, like `F.linear`.
Kernels were chosen by measurement at SmolLM2-135M's shapes on a 2-core AVX2 CPU
(bench/kernels.py; bench/RESULTS.md). The weight-only ones run Symphony's compiled kernels
(cpu_kernels/gemv.cpp: activations rounded to int16 per group of 32, weights widened in registers) where they load, else
torch's own (bf16 activations); `use_compiled` / `SYMPHONY_CPU_KERNELS=torch` choose.

- `Int8Linear`: per-row int8 weights. fbgemm's dynamic int8 (activations quantised per tensor)
  was measured and rejected: fast, but it agrees with fp32 on under half of the next tokens of
  this model.
- `Int4Linear`: 4-bit weights in groups of 32 with a scale and minimum per group (the GGUF's Q4_1
  blocks map onto it exactly). Reads half the bytes of int8; fastest for one or two rows, slower
  than int8 from ~4 rows (its widening costs more per weight).
- `DenseLinear`: the fp32 weight, for wide batches and prefill, where MKL's sgemm is compute-bound
  and faster than either weight-only kernel.
- `OnednnLinear`: the fp32 weight packed for oneDNN's fp32 matmul, where it measured faster than both
  (AVX-512 CPUs), from the row count kernel_tiers.py finds.
- `CompiledDenseLinear`: the same fp32 tensor (shared, not copied) run by the compiled kernel, for the
  few rows of decode, where MKL's sgemm reads the weights at ~2/3 of the memory's speed and it at ~all.
- `RowsSwitchLinear`: one weight held in several forms, run by whichever is fastest at the batch's rows.

fp32 stays exact either way (fp32 products and sums, only their order differs from MKL's); without the
compiled kernels it is `torch.mm` on the plain tensors in llama.py.
"""

from __future__ import annotations

from types import ModuleType

import torch

from .cpu_kernels import compiled
from .exact_blocks import BlocksLinear

INT4_GROUP = 32
# The batch size oneDNN's fp32 weights are packed for: one packing serves every row count (on the Zen 5 EPYC a
# packing for 8, 32, 64, 256 or 1024 rows ran each of 2-256 rows within noise of the best).
ONEDNN_PACK_ROWS = 64


def _kernels(use_compiled: bool | None) -> ModuleType | None:
    """The compiled kernels to run, or None for torch's: None asks cpu_kernels (built and allowed?)."""
    if use_compiled is False:
        return None
    mod = compiled()
    if use_compiled and mod is None:
        raise RuntimeError("the compiled CPU kernels are not available here (see the note above; `make kernels`)")
    return mod


class Int8Linear:
    """Per-row int8 weights. The activations are not quantised to int8: fbgemm's dynamic int8 does so per
    tensor, which this model's outlier channels do not survive (bench/RESULTS.md). Runs the compiled
    kernel (activations rounded to int16 per group of 32, 2^-16 of the group's largest) when cpu_kernels has it, else
    `aten._weight_int8pack_mm` (bf16 activations)."""

    def __init__(self, qweight: torch.Tensor, scales: torch.Tensor, use_compiled: bool | None = None) -> None:
        """qweight int8 [out, in]; scales fp32 [out] (w ≈ qweight * scale). use_compiled: None picks
        the compiled kernel where it loads; True demands it; False runs torch's."""
        self.kernels = _kernels(use_compiled)
        self.backend = "compiled" if self.kernels is not None else "torch"
        self.qweight = qweight.contiguous()
        self.scales = (
            scales.float().contiguous() if self.kernels is not None else scales.to(torch.bfloat16).contiguous()
        )
        self.shape = tuple(qweight.shape)

    def numel(self) -> int:
        return self.shape[0] * self.shape[1]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernels is not None:
            return self.kernels.int8_linear(x.float(), self.qweight, self.scales)
        return torch.ops.aten._weight_int8pack_mm(x.to(torch.bfloat16).contiguous(), self.qweight, self.scales).float()


class DenseLinear:
    """The fp32 weight itself (`W·xᵀ`, MKL sgemm), for row counts where that beats the quantised kernels."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight
        self.shape = tuple(weight.shape)

    def numel(self) -> int:
        return self.weight.numel()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(self.weight, x.t()).t()


class OnednnLinear:
    """The fp32 weight packed once, at load, into oneDNN's blocked layout and multiplied by its fp32 matmul: the
    same fp32 products and sums as MKL's sgemm, in another order. On a CPU with AVX-512 oneDNN runs them with
    512-bit FMAs; the MKL that torch ships reached about what 256-bit ones allow on a 2-core Zen 5 EPYC (~210
    GFLOP/s at 64-512 rows against oneDNN's ~470), and the compiled fp32 kernel lost to it from ~8 rows there.
    kernel_tiers.py measures from which rows it runs on each machine. The packed copy is a second copy of the
    weight's bytes; `weight` stays the plain tensor, shared with the narrower tiers."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, ONEDNN_PACK_ROWS)
        self.shape = tuple(weight.shape)

    def numel(self) -> int:
        return self.weight.numel()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")


def onednn_fp32() -> bool:
    """Whether torch's oneDNN can run fp32 matmuls here (an x86 CPU build with oneDNN)."""
    try:
        return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    except (AttributeError, RuntimeError):
        return False


class Bf16Linear:
    """The weight rounded to bf16, multiplied by oneDNN's bf16 matmul (activations rounded to bf16, fp32 sums and
    result): on a CPU with native bf16 dot products (AVX512-BF16, AMX) 3-4x fp32 sgemm's rate, where the matmul
    is compute-bound (wide batches, prefill). Quantised engines only: fp32 stays exact."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight.to(torch.bfloat16).contiguous()
        self.shape = tuple(weight.shape)

    def numel(self) -> int:
        return self.weight.numel()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(x.to(torch.bfloat16), self.weight.t()).float()


def native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively, where oneDNN's bf16 matmul can outrun fp32."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


class CompiledDenseLinear:
    """The fp32 weight itself, run by the compiled kernel (cpu_kernels/gemv.cpp `f32_linear`): x @ Wᵀ with fp32
    products and sums, reading `weight` in place — it stays the model's own tensor, shared with any other tier."""

    def __init__(self, weight: torch.Tensor) -> None:
        if weight.dtype != torch.float32 or weight.device.type != "cpu" or not weight.is_contiguous():
            raise ValueError(
                f"CompiledDenseLinear takes a contiguous float32 CPU weight, got {weight.dtype} on {weight.device}"
                + ("" if weight.is_contiguous() else " (not contiguous)")
            )
        kernels = _kernels(True)
        assert kernels is not None  # _kernels(True) raises where they do not load
        self.kernels = kernels
        self.backend = "compiled"
        self.weight = weight
        self.shape = tuple(weight.shape)

    def numel(self) -> int:
        return self.weight.numel()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernels.f32_linear(x, self.weight)


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: (qweight int8 [out, in], scales fp32 [out])."""
    scales = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12).float()
    q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scales


class Int4Linear:
    """4-bit weights in groups of 32 along `in` (w = q * scale + min, q in 0..15): the compiled kernel
    (int16 activations per group of 32) when cpu_kernels has it, else torch's int4 kernel (bf16 activations)."""

    def __init__(
        self, nibbles: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor, use_compiled: bool | None = None
    ) -> None:
        """nibbles uint8 [out, in] with values 0..15; scale, minimum fp32 [out, in / 32]; use_compiled
        as for Int8Linear."""
        out_f, in_f = nibbles.shape
        if in_f % (2 * 16) or in_f % INT4_GROUP:
            raise ValueError(f"int4 weights need the input size to be a multiple of 32, got {in_f}")
        self.kernels = _kernels(use_compiled)
        self.backend = "compiled" if self.kernels is not None else "torch"
        self.shape = (out_f, in_f)
        if self.kernels is not None:
            # gemv.cpp's layout: byte j of a group's 16 holds element j (low nibble) and j + 16 (high)
            g = nibbles.to(torch.uint8).view(out_f, in_f // INT4_GROUP, INT4_GROUP)
            self.packed = (g[..., :16] | (g[..., 16:] << 4)).reshape(out_f, in_f // 2).contiguous()
            self.scale, self.minimum = scale.float().contiguous(), minimum.float().contiguous()
            return
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(nibbles.to(torch.int32).contiguous(), 2)
        # The kernel computes (q - 8) * scale + zero: zero = minimum + 8 * scale.
        zero = minimum + 8 * scale
        self.scales_zeros = torch.stack([scale.t(), zero.t()], dim=-1).to(torch.bfloat16).contiguous()

    def numel(self) -> int:
        return self.shape[0] * self.shape[1]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernels is not None:
            return self.kernels.int4_linear(x.float(), self.packed, self.scale, self.minimum)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.to(torch.bfloat16).contiguous(), self.packed, INT4_GROUP, self.scales_zeros
        )
        return y.float()


def quantize_int4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit groups of 32 from min/max (as Q4_1 does): (nibbles, scale, minimum)."""
    out_f, in_f = w.shape
    g = w.float().view(out_f, in_f // INT4_GROUP, INT4_GROUP)
    lo, hi = g.amin(-1), g.amax(-1)
    scale = ((hi - lo) / 15.0).clamp(min=1e-12)
    q = torch.round((g - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.uint8)
    return q.view(out_f, in_f), scale, lo


TierLinear = (
    Int8Linear | Int4Linear | DenseLinear | CompiledDenseLinear | OnednnLinear | Bf16Linear | BlocksLinear
)  # one form a RowsSwitchLinear may run


class RowsSwitchLinear:
    """One weight held in several forms: `tiers` [(max_rows, linear), ...] in increasing max_rows;
    a call runs the first tier whose max_rows covers its rows (the last tier takes the rest)."""

    def __init__(self, tiers: list[tuple[int, TierLinear]]) -> None:
        self.tiers = tiers
        self.shape = tiers[0][1].shape

    def numel(self) -> int:
        return self.shape[0] * self.shape[1]

    def pick(self, rows: int):
        for max_rows, lin in self.tiers:
            if rows <= max_rows:
                return lin
        return self.tiers[-1][1]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.pick(x.shape[0])(x)


QuantLinear = (
    Int8Linear
    | Int4Linear
    | DenseLinear
    | CompiledDenseLinear
    | OnednnLinear
    | Bf16Linear
    | BlocksLinear
    | RowsSwitchLinear
)


def sgemm_weight(linear: torch.Tensor | QuantLinear, rows: int) -> torch.Tensor | None:
    """The fp32 weight that `linear` hands to MKL's sgemm (`W·xᵀ`) at `rows` rows, or None where a
    compiled or quantised kernel runs there instead."""
    if isinstance(linear, RowsSwitchLinear):
        linear = linear.pick(rows)
    if isinstance(linear, DenseLinear):
        return linear.weight
    return linear if isinstance(linear, torch.Tensor) else None

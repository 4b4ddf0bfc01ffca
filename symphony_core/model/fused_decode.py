"""Decode steps whose layers run as one compiled call (cpu_kernels/decode_stack.cpp).

llama.py's layer loop calls ten kernels a layer from Python; at one row each call's overhead
(interpreter, pybind11, torch's argument handling) is a tenth of the kernel's own time, ~2-3 ms of a
step over 30 layers. When a step qualifies, `DecodeStack.run` makes the same calls on the same
tensors in C++, so its result is bit for bit the loop's.

A step qualifies when every row is a single-token decode read from the pool in place (one
`CompiledDecode` group, no shared prefix) and, at its row count, every projection runs one of
the compiled kernels (fp32, int8 or int4: gemv.cpp; fp32 from exact blocks: gemv_blocks.cpp) or oneDNN's fp32 matmul on its packed weight
(quant.OnednnLinear; the stack calls it through torch's dispatcher). Which kernel a projection runs
depends on the rows (weight_formats.py's tiers), so a stack is made per row count on first use,
over the same weight tensors.
"""

from __future__ import annotations

import torch

from .exact_blocks import BlocksLinear
from .quant import CompiledDenseLinear, Int4Linear, Int8Linear, OnednnLinear, RowsSwitchLinear

# The projections of a layer in the order DecodeStack takes them.
PROJECTIONS = ("wqkv", "wo", "w_gate_up", "w_down")


def kernel_form(linear, rows: int) -> tuple[int, list[torch.Tensor]] | None:
    """(kind, tensors) of the kernel `linear` runs at `rows` as DecodeStack takes it, or None where it runs
    one the stack does not call."""
    tier = linear.pick(rows) if isinstance(linear, RowsSwitchLinear) else linear
    if isinstance(tier, CompiledDenseLinear):
        return 0, [tier.weight]
    if isinstance(tier, Int8Linear) and tier.backend == "compiled":
        return 1, [tier.qweight, tier.scales]
    if isinstance(tier, Int4Linear) and tier.backend == "compiled":
        return 2, [tier.packed, tier.scale, tier.minimum]
    if isinstance(tier, OnednnLinear):
        return 3, [tier.packed]
    if isinstance(tier, BlocksLinear):
        return (4 if tier.fmt == "Q4_1" else 5), [tier.blocks]
    return None


class FusedDecode:
    """The model's `DecodeStack`s, one per row count, made on first use (None where one cannot run)."""

    def __init__(self, model) -> None:
        self.model = model
        self.enabled = True  # False runs llama.py's per-call loop (tests and A/B measurements)
        self._stacks: dict[int, object | None] = {}

    def clear(self) -> None:
        """The model's projections were replaced (weight_formats.py): make the stacks again."""
        self._stacks.clear()

    def stack(self, rows: int):
        if not self.enabled:
            return None
        if rows not in self._stacks:
            self._stacks[rows] = self._make(rows)
        return self._stacks[rows]

    def _make(self, rows: int):
        m = self.model
        if m.ops is None or not m.plain:
            return None
        norms, kinds, weights = [], [], []
        for layer in m.layers:
            norms += [layer.attn_norm, layer.mlp_norm]
            for attr in PROJECTIONS:
                form = kernel_form(getattr(layer, attr), rows)
                if form is None:
                    return None
                kinds.append(form[0])
                weights.append(form[1])
        return m.ops.DecodeStack(norms, kinds, weights, m.cfg.n_heads, m.cfg.rms_eps)

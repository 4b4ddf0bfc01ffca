"""fp32 weights read from the GGUF blocks they were dequantised from: the same numbers in 5-6 bits a weight.

A model that came as a GGUF has fp32 weights that are its blocks dequantised: Q4_1's w = q · d + m and
Q8_0's w = q · d, each exact in fp32 (cpu_kernels/gemv_blocks.cpp says why). Where a projection's (or the
LM head's) blocks give back its fp32 tensor bit for bit — checked here, per tensor, before use — the fp32
engine's decode rows run `BlocksLinear`, which widens the blocks in registers and multiplies in fp32:
the dense kernel's products and sums in its order, from a sixth of the bytes (SmolLM2-135M:
538 MB a one-row step in fp32, ~100 MB as blocks). Wider batches keep the dense tiers, which are
compute-bound there. Nothing is rounded: engines with and without it give the same tokens.

`SYMPHONY_FP32_BLOCKS=off` keeps the dense fp32 tensors only (A/B measurements; the benchmark's dense row).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from .cpu_kernels import compiled
from .gguf_blocks import dequantize
from .loader import is_derived_cache

ENV = "SYMPHONY_FP32_BLOCKS"
GROUP = 32
GROUP_BYTES = {"Q4_1": 24, "Q8_0": 36}  # one group's bytes in the packed rows below (gemv_blocks.cpp's layout)
# Rows up to which the blocks run, the dense tiers above: SmolLM2-135M's 120 projections, AVX-512 loops, 2-core
# Zen 4 EPYC, blocks / dense ms: 1 row 4.6 / 9.3, 4 rows 8.2 / 12.4, 6 rows 12.1 / 12.5, 8 rows 14.9 / 14.0 (AVX2
# loops: 4 rows 11.7 / 17.0, 6 rows 19.0 / 19.9); 4 leaves a margin on both.
MAX_ROWS = 4
CACHE_VERSION = "1"


def enabled() -> bool:
    value = os.environ.get(ENV, "auto").strip().lower()
    if value not in ("auto", "off"):
        raise ValueError(f"{ENV}={value!r}: choose 'auto' (the default) or 'off'")
    return value == "auto"


def pack_q4_1(q: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """nibbles uint8 [out, in] (0..15), d, m fp32 [out, in / 32] -> gemv_blocks.cpp's Q4_1 rows uint8
    [out, in / 32 * 24]: per group, 16 bytes of nibbles (element j low, j + 16 high), d, m."""
    out, cols = q.shape
    g = q.to(torch.uint8).view(out, cols // GROUP, GROUP)
    nibbles = g[..., :16] | (g[..., 16:] << 4)
    scales = [t.float().contiguous().view(torch.uint8).view(out, cols // GROUP, 4) for t in (d, m)]
    return torch.cat([nibbles, *scales], dim=-1).reshape(out, -1).contiguous()


def pack_q8_0(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """q int8 [out, in], d fp32 [out, in / 32] -> Q8_0 rows uint8 [out, in / 32 * 36]: 32 int8, then d."""
    out, cols = q.shape
    g = q.to(torch.int8).contiguous().view(torch.uint8).view(out, cols // GROUP, GROUP)
    return torch.cat([g, d.float().contiguous().view(torch.uint8).view(out, cols // GROUP, 4)], dim=-1).reshape(out, -1)


def dequantize_q8_0(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    out, cols = q.shape
    return (q.float().view(out, -1, GROUP) * d[..., None]).view(out, cols)


def unpack(fmt: str, packed: torch.Tensor) -> torch.Tensor:
    """Packed rows (either layout above) back to the fp32 weights they hold."""
    rows = packed.shape[0]
    g = packed.view(rows, -1, GROUP_BYTES[fmt])
    if fmt == "Q4_1":
        q = torch.cat([g[..., :16] & 0x0F, g[..., :16] >> 4], dim=-1).reshape(rows, -1)
        d, m = (g[..., a : a + 4].contiguous().view(torch.float32)[..., 0] for a in (16, 20))
        return dequantize((q, d, m))
    q = g[..., :32].contiguous().view(torch.int8).reshape(rows, -1)
    return dequantize_q8_0(q, g[..., 32:36].contiguous().view(torch.float32)[..., 0])


def _still_exact(found: dict[str, tuple[str, torch.Tensor]], weights: dict[str, torch.Tensor]) -> bool:
    """Cached blocks against the weights now: shapes, and a first, middle and last row of each bit for bit (a
    change to how a model's tensors are laid out would otherwise pass a cache keyed by files alone)."""
    for key, (fmt, packed) in found.items():
        w = weights.get(key)
        width = w.shape[1] // GROUP * GROUP_BYTES[fmt] if w is not None else -1
        if w is None or tuple(packed.shape) != (w.shape[0], width):
            return False
        rows = sorted({0, w.shape[0] // 2, w.shape[0] - 1})
        if not torch.equal(unpack(fmt, packed[rows]), w[rows]):
            return False
    return True


class BlocksLinear:
    """fp32 `x @ Wᵀ` with W held as exact Q4_1 or Q8_0 blocks (`fmt`), run by the compiled kernel. `weight`
    is the dense fp32 tensor they equal (the wider tiers run it)."""

    KERNELS = {"Q4_1": "q4_1_f32_linear", "Q8_0": "q8_0_f32_linear"}

    def __init__(self, fmt: str, blocks: torch.Tensor, weight: torch.Tensor) -> None:
        kernels = compiled()
        if kernels is None:
            raise RuntimeError(
                "BlocksLinear runs the compiled CPU kernels, which are not available here (`make kernels`)"
            )
        self.fmt = fmt
        self.blocks = blocks.contiguous()
        self.weight = weight
        self.shape = tuple(weight.shape)
        self.backend = "compiled"
        self._run = getattr(kernels, self.KERNELS[fmt])

    def numel(self) -> int:
        return self.shape[0] * self.shape[1]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._run(x.float(), self.blocks)


def _read(weights: dict[str, torch.Tensor], n_heads: int, n_kv_heads: int, gguf_path: Path) -> dict[str, tuple]:
    """{key: (fmt, packed blocks)} for every tensor of `weights` whose blocks in the file equal it."""
    from .gguf_blocks import read_q4_1, read_q8_0  # the GGUF reader: only on a cache miss

    out: dict[str, tuple[str, torch.Tensor]] = {}
    for (layer, attr), parts in read_q4_1(gguf_path, n_heads, n_kv_heads).items():
        w = weights.get(f"{layer}.{attr}")
        if w is not None and torch.equal(dequantize(parts), w):
            out[f"{layer}.{attr}"] = ("Q4_1", pack_q4_1(*parts))
    head = read_q8_0(gguf_path, ("output.weight", "token_embd.weight"))
    if head is not None and "lm_head" in weights and torch.equal(dequantize_q8_0(*head), weights["lm_head"]):
        out["lm_head"] = ("Q8_0", pack_q8_0(*head))
    return out


def _checked_against(cache_dir: Path | None) -> str:
    """The converted fp32 weights a cache of blocks was checked against (converted again: checked again)."""
    if cache_dir is None:
        return ""
    files = sorted(p for p in cache_dir.glob("*.safetensors") if not is_derived_cache(p))
    return ";".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)


def exact_blocks(
    weights: dict[str, torch.Tensor], n_heads: int, n_kv_heads: int, gguf_path: Path | None, cache_dir: Path | None
) -> dict[str, BlocksLinear]:
    """BlocksLinear for each of the model's fp32 `weights` ({"layer.projection" | "lm_head": tensor}) that the
    GGUF's blocks hold exactly: read from the file and checked once, then cached beside the converted weights
    (`fp32-blocks.safetensors`)."""
    if gguf_path is None or compiled() is None or not enabled():
        return {}
    if any(w.device.type != "cpu" or w.dtype != torch.float32 for w in weights.values()):
        return {}
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file, save_file

    path = cache_dir / "fp32-blocks.safetensors" if cache_dir is not None else None
    checked = _checked_against(cache_dir)
    found: dict[str, tuple[str, torch.Tensor]] | None = None
    if path is not None and path.exists():
        try:
            with safe_open(str(path), "pt") as f:
                meta = f.metadata() or {}
            if meta.get("version") == CACHE_VERSION and meta.get("checked against") == checked:
                found = {k: (meta[k], t) for k, t in load_file(str(path)).items()}
        except (OSError, SafetensorError) as e:  # unreadable: read the GGUF again, and write a good one
            print(f"symphony: the cached fp32 blocks could not be read ({e}); reading the GGUF", file=sys.stderr)
        if found is not None and not _still_exact(found, weights):
            found = None
    if found is None:
        found = _read(weights, n_heads, n_kv_heads, gguf_path)
        if path is not None:
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            try:
                meta = {
                    "version": CACHE_VERSION,
                    "checked against": checked,
                    **{k: fmt for k, (fmt, _) in found.items()},
                }
                save_file({k: t for k, (_, t) in found.items()}, str(tmp), metadata=meta)
                tmp.replace(path)
            except (OSError, SafetensorError) as e:  # a read-only cache still runs; it reads the GGUF again next time
                print(f"symphony: could not cache the fp32 blocks: {e}", file=sys.stderr)
                tmp.unlink(missing_ok=True)
    return {k: BlocksLinear(fmt, blocks, weights[k]) for k, (fmt, blocks) in found.items() if k in weights}

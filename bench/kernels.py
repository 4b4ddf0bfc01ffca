"""The matmul kernels behind the weight formats, timed at the model's own shapes: which wins at how many rows.

For T rows, one model step's worth of matmuls (the 30 layers' four projections + the LM head)
through: fp32 by MKL's sgemm (`W·xᵀ`, padded as llama.py pads rows for it) and by Symphony's compiled
fp32 kernel (symphony_core/model/cpu_kernels, the same tensors, unpadded) and by oneDNN's fp32 kernel on a packed
copy (where torch has oneDNN; the fp32 tier above the compiled kernel where it measures faster), int8 weight-only and int4
weight-only, each by torch's kernels (bf16 activations) and by the compiled ones (int16 activations; on a
CPU with AVX-512 VNNI also through their AVX2 loops, the A/B of gemv_vnni.cpp; the compiled fp32 kernel likewise,
the A/B of gemv_f32_wide.cpp), and
the weights rounded to bf16 through oneDNN (the quantised engines' wide tier on CPUs with native bf16); the
compiled columns are skipped when not built (`make kernels`). The kernels alternate within each repeat (a
noisy shared machine then slows all of them alike); the figure is the median. This is what set
`KERNEL_MAX_ROWS` and `FP32_KERNEL_MAX_ROWS` in symphony_core/model/weight_formats.py.

    python -m bench.kernels [--quick] [--rows 1,2,4,8,16,32,512] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from symphony_core.model import cpu_kernels
from symphony_core.model.quant import native_bf16, onednn_fp32

from .common import publish
from .machine import describe


def measure(rows: list[int], repeats: int) -> list[dict]:
    from symphony_core import Engine
    from symphony_core.model.llama import matmul_rows
    from symphony_core.model.quant import Bf16Linear, CompiledDenseLinear, Int8Linear, OnednnLinear, quantize_int8
    from symphony_core.model.weight_formats import fp32_weight

    fp32 = Engine(num_pages=16)
    q4 = Engine(num_pages=16, weights="q4")
    attrs = ("wqkv", "wo", "w_gate_up", "w_down")
    dense = [fp32_weight(getattr(layer, a)) for layer in fp32.model.layers for a in attrs]
    dense.append(fp32_weight(fp32.model.lm_head))
    switch = [getattr(layer, a) for layer in q4.model.layers for a in attrs]
    head8 = q4.model.lm_head.tiers[0][1]
    int4 = [s.tiers[0][1] for s in switch] + [head8]  # the LM head stays int8 in q4
    int8 = [Int8Linear(*quantize_int8(w)) for w in dense[:-1]] + [head8]  # as weights="q8" makes them
    if head8.backend == "compiled":  # the same weights again, run by torch's kernels
        torch8 = [torch_int8(lin) for lin in int8]
        torch4 = [torch_int4(lin) for lin in int4[:-1]] + [torch8[-1]]
        fp32c = [CompiledDenseLinear(w) for w in dense]
        forms = {"fp32 compiled": fp32c, "int8": torch8, "int4": torch4, "int8 compiled": int8, "int4 compiled": int4}
        if cpu_kernels.compiled().get_quantised_isa() == "avx512_vnni":  # the AVX2 loops too, for the A/B
            forms |= {"int8 compiled AVX2": int8, "int4 compiled AVX2": int4}
        if cpu_kernels.compiled().get_f32_wide_isa() == "avx512":
            forms["fp32 compiled AVX2"] = fp32c
    else:  # not built: the engine's own linears already run torch's kernels
        forms = {"int8": int8, "int4": int4}
    if onednn_fp32():
        forms["fp32 oneDNN"] = [OnednnLinear(w) for w in dense]
    forms["bf16"] = [Bf16Linear(w) for w in dense]  # q8's and q4's wide tier where the CPU multiplies bf16 natively
    out = []
    for t in rows:
        xs = {k: torch.randn(t, k) for k in {w.shape[1] for w in dense}}
        padded = {k: F.pad(x, (0, 0, 0, matmul_rows(t) - t)) for k, x in xs.items()}
        fns = {
            "fp32": lambda padded=padded: [torch.mm(w, padded[w.shape[1]].t()) for w in dense],
            **{k: (lambda xs=xs, lins=lins: [lin(xs[lin.shape[1]]) for lin in lins]) for k, lins in forms.items()},
        }
        for k in [k for k in fns if k.endswith(" AVX2")]:
            fns[k] = on_avx2(fns[k])
        times = {k: [] for k in fns}
        with torch.inference_mode():
            for fn in fns.values():
                fn()
            for _ in range(repeats):
                for k, fn in fns.items():
                    t0 = time.perf_counter()
                    fn()
                    times[k].append(time.perf_counter() - t0)
        row = {"rows": t, **{k: 1e3 * statistics.median(v) for k, v in times.items()}}
        print(f"  rows {t}: " + ", ".join(f"{k} {row[k]:.1f} ms" for k in fns), flush=True)
        out.append(row)
    return out


def on_avx2(fn):
    """`fn` with the compiled kernels running their AVX2 loops (gemv.cpp) instead of AVX-512 ones (the int8 /
    int4 VNNI loops, the fp32 loop for 2-8 rows), putting the process's choice back after."""
    mod = cpu_kernels.compiled()

    def run():
        before = mod.get_quantised_isa(), mod.get_f32_wide_isa()
        mod.set_quantised_isa("avx2")
        mod.set_f32_wide_isa("avx2")
        try:
            return fn()
        finally:
            mod.set_quantised_isa(before[0])
            mod.set_f32_wide_isa(before[1])

    return run


def torch_int8(lin):
    """The same int8 weights as the compiled `lin`, run by torch's kernel."""
    from symphony_core.model.quant import Int8Linear

    return Int8Linear(lin.qweight, lin.scales.float(), use_compiled=False)


def torch_int4(lin):
    """The same int4 weights as the compiled `lin` (unpacked from gemv.cpp's layout), run by torch's kernel."""
    from symphony_core.model.quant import INT4_GROUP, Int4Linear

    out_f, in_f = lin.shape
    g = lin.packed.view(out_f, in_f // INT4_GROUP, INT4_GROUP // 2)
    nibbles = torch.cat([g & 0x0F, g >> 4], dim=-1).view(out_f, in_f)
    return Int4Linear(nibbles, lin.scale, lin.minimum, use_compiled=False)


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="rows 1 and 8, 2 repeats")
    ap.add_argument("--rows", default="1,2,4,8,16,32,512")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [1, 8] if args.quick else [int(r) for r in args.rows.split(",")]
    res = measure(rows, 2 if args.quick else args.repeats)
    publish(__name__, {"rows": res})
    lines = [
        "### Matmul kernels of the weight formats, one model step's matmuls (ms, median, alternating)",
        "",
        f"Machine: {describe()}",
        "",
        "| rows | fp32, MKL W·xᵀ (padded) | fp32, compiled | fp32, compiled, AVX2 loops | fp32, oneDNN (packed) "
        "| int8, torch (bf16 act.) "
        "| int4, torch (bf16 act.) | int8, compiled (int16 act.) | int4, compiled (int16 act.) "
        "| int8, compiled, AVX2 loops | int4, compiled, AVX2 loops | bf16, oneDNN (bf16 act.) | fastest |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    kinds = (
        "fp32",
        "fp32 compiled",
        "fp32 compiled AVX2",
        "fp32 oneDNN",
        "int8",
        "int4",
        "int8 compiled",
        "int4 compiled",
    )
    kinds += ("int8 compiled AVX2", "int4 compiled AVX2", "bf16")
    for r in res:
        best = min((k for k in kinds if k in r), key=lambda k: r[k])
        cells = " | ".join(f"{r[k]:.1f}" if k in r else "—" for k in kinds)
        lines.append(f"| {r['rows']} | {cells} | {best} |")
    lines += [
        "",
        'The int4 column\'s LM head runs int8 (as in `weights="q4"`); fp32 reads 538 MB a step, '
        "int8 ~134 MB, int4 ~53 MB + the 28 MB int8 LM head, bf16 269 MB. bf16 (weights and activations rounded "
        "to bf16, fp32 sums) is the wide tier of q8 and q4 on a CPU that multiplies bf16 natively "
        f"(this one: {'yes' if native_bf16() else 'no'}), where it measured faster than fp32 (kernel_tiers.py). "
        "fp32 oneDNN computes the fp32 products on a packed copy of the weights; every engine runs it from the rows "
        "where it measured faster than the compiled kernel and MKL (kernel_tiers.py). The compiled int8 / int4 "
        "kernels run AVX-512 VNNI loops where the CPU has them (gemv_vnni.cpp), the compiled fp32 kernel an "
        "AVX-512 loop for 2-8 rows at a time (gemv_f32_wide.cpp); the AVX2 loops columns time the "
        "same weights through gemv.cpp's AVX2 loops on such a CPU. — : not built here (the "
        "compiled kernels: `make kernels`), not in this torch (oneDNN) or no AVX-512 (VNNI) here.",
    ]
    md = "\n".join(lines)
    print(md)
    return md


if __name__ == "__main__":
    main()

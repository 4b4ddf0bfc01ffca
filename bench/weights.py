"""Weight formats next to llama.cpp, side by side in one run: prefill 512, greedy decode of 1/8/32 sequences.

Rows: Symphony with `weights="fp32" | "q8" | "q4"` and llama.cpp (llama-cpp-python's low-level
API, every sequence in one `llama_batch`) on the shipped Q4_1 GGUF and on F32 / Q8_0 files made
from it by llama.cpp's own quantiser. Same prompts (32-64-token windows of one English text, as
bench/decode.py), same threads; each repeat runs every engine once, in a rotated order, so
drift on a shared machine spreads over all of them; medians of the repeats. A 512-token prefill
takes about a second and two runs of it can differ by 20% here, so each repeat runs the prefill
`--prefill-runs` times per engine (rounds over all engines, the order rotated each round) and
its median is over all of them; a decode of 64 tokens is as short and as noisy (one sequence's lasts
0.3-1 s), and runs `--decode-runs` times per repeat in the same way. Ratios are Symphony ÷ peer. A
format's LIPs run beside its `pred_batch` in every round, `--lip-pairs` times (ABBA...), and "LIPs ÷
pred_batch" is the median of those adjacent pairs' ratios: apart by a few runs, one ratio swung from
0.77 to 1.08 between runs of the suite.

    python -m bench.weights [--quick] [--batches 1,8,32] [--new 64] [--prefill 512] [--repeats 3] [--prefill-runs 3]
                            [--decode-runs 3] [--lip-pairs 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from symphony_core.model import exact_blocks

from . import llama_cpp_peer
from .common import publish
from .decode import TEXT, greedy_program, make_prompts, matmul_params, run_lips, run_ours
from .machine import describe, read_bandwidth, wait_until_idle
from .targets import floor_line

OURS = ("fp32", "fp32-dense", "q8", "q4")
# fp32 on its dense tensors alone (SYMPHONY_FP32_BLOCKS=off): what fp32 reads when its model did not come as GGUF blocks
# that hold its weights exactly, and the bytes llama.cpp F32 reads. The same numbers as "fp32" (exact_blocks.py).
DENSE = "fp32-dense"
LIPS = ("fp32", "q4")  # also run through programs, one per sequence: the path users run
PEERS = ("Q4_1", "F32", "Q8_0")


def _prefill_prompt(tokenize, n: int) -> list[int]:
    ids = tokenize(TEXT)
    return (ids * (n // len(ids) + 1))[:n]


def _ours_prefill(eng, prompt: list[int]) -> float:
    kv = eng.kv_create()
    try:
        t0 = time.perf_counter()
        eng.pred(kv, prompt)
        return time.perf_counter() - t0
    finally:
        eng.kv_close(kv)


def _lip_prefill(eng, prompt: list[int]) -> float:
    t0 = time.perf_counter()
    stamps, _ = eng.run(greedy_program, prompt, 1).result(timeout=600)
    return stamps[0] - t0


def random_model_files(spec: str) -> dict[str, Path]:
    """ "random:FAMILY:SIZE" (e.g. random:qwen2:0.5b, Qwen2.5-0.5B's shape): a random-weight model written once under
    the model cache as F32 and Q4_1 GGUFs by Symphony's GGUF writer (symphony_core/model/random_models.py)."""
    from symphony_core.model.gguf_writer import write_gguf
    from symphony_core.model.loader import cache_root
    from symphony_core.model.random_models import make_random_model

    _, family, size = spec.split(":")
    out = cache_root() / f"random-{family}-{size}"
    if not (out / "config.json").exists():
        make_random_model(family, out, size=size)
    return {
        qt: p if (p := out / f"{family}-{size}.{qt}.gguf").exists() else write_gguf(out, p, qtype=qt)
        for qt in ("F32", "Q4_1")
    }


def model_files(model: str | None) -> dict[str, Path]:
    """The GGUF each of our formats loads, by format: the shipped Q4_1 file for every one by default (fp32 and q8
    from its dequantised weights); for a random model its F32 file for fp32 and q8, its Q4_1 file for q4."""
    from symphony_core.model.registry import DEFAULT_MODEL, resolve_model

    if model is None or not model.startswith("random:"):
        path = resolve_model(model or DEFAULT_MODEL, install=False).path
        return {"fp32": path, DENSE: path, "q8": path, "q4": path, "Q4_1": path}
    files = random_model_files(model)
    return {"fp32": files["F32"], DENSE: files["F32"], "q8": files["F32"], "q4": files["Q4_1"], **files}


def _peer_files(threads: int, files: dict[str, Path]) -> tuple[dict[str, Path], str | None]:
    from symphony_core.model.loader import cache_root

    why = llama_cpp_peer.available()
    if why:
        return {}, why
    src = files["Q4_1"]
    out = cache_root() / "llama-cpp"
    out.mkdir(parents=True, exist_ok=True)
    peers = {"Q4_1": src}
    if "F32" in files:
        peers["F32"] = files["F32"]
    for ft in ("F32", "Q8_0"):
        if ft in peers:
            continue
        try:
            made = out / f"{src.stem.rsplit('.', 1)[0]}.{ft}.gguf"
            peers[ft] = llama_cpp_peer.quantize(files.get("F32", src), made, ft, threads)
        except Exception as e:  # noqa: BLE001 - report it, keep the others
            print(f"  llama.cpp quantiser could not make {ft}: {e}", flush=True)
    return peers, None


def _engine(Engine, source: Path, pages: int, fmt: str):
    if fmt != DENSE:
        return Engine(str(source), num_pages=pages, weights=fmt, prefix_cache=False)
    saved = os.environ.get(exact_blocks.ENV)
    os.environ[exact_blocks.ENV] = "off"
    try:
        return Engine(str(source), num_pages=pages, weights="fp32", prefix_cache=False)
    finally:
        if saved is None:
            del os.environ[exact_blocks.ENV]
        else:
            os.environ[exact_blocks.ENV] = saved


def bench(batches, new, prefill_n, repeats, idle_wait, threads, prefill_runs=1, model=None, decode_runs=1, lip_pairs=1):
    from symphony_core import Engine

    hi = 64
    pages = (max(*batches, 2) * (hi + new) + prefill_n) // 16 + 64
    # The prefix cache off: the prefill runs feed one prompt again and again, and must compute it every time.
    sources = model_files(model)
    engines = {f: _engine(Engine, sources[f], pages, f) for f in OURS}
    files, skipped = _peer_files(threads, sources)
    peers = {}
    seqs = max(*batches, 2)  # the warm-up decodes two prompts
    for ft, path in files.items():
        try:
            peers[ft] = llama_cpp_peer.Peer(path, threads, n_seq=seqs, n_ctx=seqs * (hi + new) + prefill_n)
        except Exception as e:  # noqa: BLE001
            print(f"  llama.cpp could not load {path.name}: {e}", flush=True)
    # Runs go in units: a format's pred_batch and its LIPs side by side (the pair's ratio compares runs taken
    # together), every other engine alone.
    units = [[f"ours {f}", f"ours {f} LIPs"] if f in LIPS else [f"ours {f}"] for f in OURS]
    units += [[f"llama.cpp {p}"] for p in peers]
    names = [n for u in units for n in u]

    def run_decode(name, prompts):
        if name.endswith("LIPs"):
            return run_lips(engines[name.split()[1]], prompts, new)
        if name.startswith("ours"):
            return run_ours(engines[name.split()[1]], prompts, new)
        return peers[name.split()[1]].decode(prompts, new)

    def run_prefill(name, prompt):
        if name.endswith("LIPs"):
            return _lip_prefill(engines[name.split()[1]], prompt)
        if name.startswith("ours"):
            return _ours_prefill(engines[name.split()[1]], prompt)
        return peers[name.split()[1]].prefill(prompt)

    tok = engines["fp32"].tokenize
    warm = make_prompts(tok, 2, 8, 16, seed=99)
    for n in names:
        run_decode(n, warm)
    times: dict[str, dict] = {n: {"prefill": [], **{b: [] for b in batches}} for n in names}
    outs: dict[str, dict] = {n: {} for n in names}
    contended = runs = 0
    prompt = _prefill_prompt(tok, prefill_n)
    cases = [("prefill", None)] + [("decode", b) for b in batches]
    bandwidth = []  # GB/s, once a repeat: the floor under the single-stream decodes
    for r in range(repeats):
        bandwidth.append(read_bandwidth())
        for kind, b in cases:
            prompts = make_prompts(tok, b, 32, hi, seed=b) if b else None
            rounds = prefill_runs if kind == "prefill" else decode_runs
            for k in range(r * rounds, (r + 1) * rounds):
                # rotate which unit goes first, and within a pair which of the two
                turn = units[k % len(units) :] + units[: k % len(units)]
                # A decode's pred_batch and LIPs run `lip_pairs` times each, ABBA..., so a round adds that
                # many adjacent pairs: one pair's ratio spreads over ±8% here (0.87-1.07 the middle half of
                # 15 pairs at q4 on a quiet machine), and 9 of them left a median several percent off.
                paired = 1 if kind == "prefill" else lip_pairs
                order = [
                    n
                    for u in turn
                    for j in range(paired if len(u) == 2 else 1)
                    for n in (u if (k + j) % 2 == 0 else u[::-1])
                ]
                for n in order:
                    busy = wait_until_idle(idle_wait)
                    contended += int(busy is not None and busy >= 0.1)
                    runs += 1
                    if kind == "prefill":
                        times[n]["prefill"].append(run_prefill(n, prompt))
                    else:
                        _, dec, out = run_decode(n, prompts)
                        times[n][b].append(dec)
                        outs[n].setdefault(b, out)
            print(
                f"  repeat {r + 1}/{repeats} {kind} {b or prefill_n}: "
                + ", ".join(f"{n} {times[n][b or 'prefill'][-1]:.2f}s" for n in names),
                flush=True,
            )
    for p in peers.values():
        p.close()
    med = statistics.median
    rows = []
    for n in names:
        row = {"engine": n, "prefill": prefill_n / med(times[n]["prefill"])}
        for b in batches:
            row[f"decode_{b}"] = b * (new - 1) / med(times[n][b])
            ref = outs["ours fp32"][b]
            row[f"same8_{b}"] = sum(a[:8] == o[:8] for a, o in zip(outs[n][b], ref))
            row[f"same_{b}"] = sum(a == o for a, o in zip(outs[n][b], ref))
            if n.endswith("LIPs"):  # its speed ÷ its pred_batch's, run by run (a time ratio inverted)
                base = times[n.removesuffix(" LIPs")][b]
                row[f"paired_{b}"] = med(t0 / t1 for t0, t1 in zip(base, times[n][b]))
                row["pairs"] = len(base)
        rows.append(row)
    # A one-row decode reads each fp32 weight once (the norms and the token's embedding row are a rounding error).
    floor = {"bandwidth_gbs": med(bandwidth), "fp32_weight_bytes": 4 * matmul_params(engines["fp32"].model)}
    return rows, skipped, f"{contended}/{runs}", floor


def verdicts(rows: list[dict], batches: list[int]) -> list[tuple[str, str, str, bool | None]]:
    """The issue's targets for weight formats: (target, measured, goal, met)."""
    by = {r["engine"]: r for r in rows}
    out = []
    f32 = by.get("llama.cpp F32")
    peers = [r for n, r in by.items() if n.startswith("llama.cpp")]

    def best(key):
        q = max((by[f"ours {f}"] for f in ("q8", "q4") if f"ours {f}" in by), key=lambda r: r[key])
        return q, q["engine"].split()[1]

    if f32 and 1 in batches:
        x = by["ours fp32"]["decode_1"] / f32["decode_1"]
        out.append(("fp32 single stream", f"{x:.2f}× llama.cpp F32{_dense_note(by, f32)}", "≥ 1.0×", x >= 1.0))
    q41 = by.get("llama.cpp Q4_1")
    if q41 and 1 in batches:
        q, f = best("decode_1")
        x = q["decode_1"] / q41["decode_1"]
        out.append(("quantised single stream", f"{x:.2f}× llama.cpp Q4_1 ({f})", "≥ 0.6× (aim 1.0×)", x >= 0.6))
    if peers and 8 in batches:
        q, f = best("decode_8")
        worst = min(q["decode_8"] / p["decode_8"] for p in peers)
        out.append(
            (
                "quantised 8 sequences",
                f"{worst:.2f}× the fastest llama.cpp variant ({f})",
                "≥ 1.0× every variant",
                worst >= 1.0,
            )
        )
    if f32 and 32 in batches:
        q, f = best("decode_32")
        x = q["decode_32"] / f32["decode_32"]
        out.append(("quantised 32 sequences", f"{x:.2f}× llama.cpp F32 ({f})", "≥ 1.3×", x >= 1.3))
    if f32:
        q, f = best("prefill")
        x = q["prefill"] / f32["prefill"]
        out.append(
            (
                "prefill 512",
                f"{x:.2f}× llama.cpp F32 ({f}; fp32 {by['ours fp32']['prefill'] / f32['prefill']:.2f}×)",
                "≥ 1.2×",
                x >= 1.2,
            )
        )
    return out + lip_verdicts(by, batches)


def _dense_note(by: dict[str, dict], f32: dict) -> str:
    """fp32 on its dense tensors against llama.cpp F32 (the same bytes), beside the default fp32's figure."""
    dense = by.get(f"ours {DENSE}")
    return f" (on its dense tensors: {dense['decode_1'] / f32['decode_1']:.2f}×)" if dense else ""


def lip_verdicts(by: dict[str, dict], batches: list[int]) -> list[tuple[str, str, str, bool | None]]:
    """The program path's targets: each format's LIPs against its own `pred_batch`, and against llama.cpp."""
    out = []
    for f in LIPS:
        lip, ref = by.get(f"ours {f} LIPs"), by.get(f"ours {f}")
        if lip and ref:
            xs = [lip.get(f"paired_{b}", lip[f"decode_{b}"] / ref[f"decode_{b}"]) for b in batches]
            # two decimals, or three where two would round across the goal (0.948 shown as 0.95 and missed)
            shown = " / ".join(f"{x:.3f}×" if (round(x, 2) >= 0.95) != (x >= 0.95) else f"{x:.2f}×" for x in xs)
            pairs = lip.get("pairs")
            how = f" (median of {pairs} adjacent pair{'s' if pairs != 1 else ''})" if pairs else ""
            out.append(
                (
                    f"LIPs ÷ pred_batch, {f}",
                    f"{shown} at {'/'.join(map(str, batches))} seq{how}",
                    "≥ 0.95×",
                    min(xs) >= 0.95,
                )
            )
    for f, peer in (("fp32", "F32"), ("q4", "Q4_1")):
        lip, p = by.get(f"ours {f} LIPs"), by.get(f"llama.cpp {peer}")
        if lip and p and 1 in batches:
            x = lip["decode_1"] / p["decode_1"]
            note = _dense_note(by, p) if f == "fp32" else ""
            out.append((f"through LIPs, {f} single stream", f"{x:.2f}× llama.cpp {peer}{note}", "≥ 1.2×", x >= 1.2))
    peers = [r for n, r in by.items() if n.startswith("llama.cpp")]
    lips = [r for n, r in by.items() if n.endswith("LIPs")]
    for b in (8, 32):
        if peers and lips and b in batches:
            best = max(lips, key=lambda r: r[f"decode_{b}"])
            worst = min(best[f"decode_{b}"] / p[f"decode_{b}"] for p in peers)
            out.append(
                (
                    f"through LIPs, {b} sequences",
                    f"{worst:.2f}× the fastest llama.cpp ({best['engine']})",
                    "≥ 1.3× every variant",
                    worst >= 1.3,
                )
            )
    return out


def table(numbers: dict, repeats: int, contended: str) -> str:
    """The section's markdown from what `main` publishes (its floor keys included), the repeats and the
    count of runs started under load."""
    rows, batches, new, prefill_n = numbers["rows"], numbers["batches"], numbers["new"], numbers["prefill"]
    model, skipped = numbers["model"], numbers["skipped"]
    counts = [(numbers["prefill_runs"], "the prefill"), (numbers["decode_runs"], "each decode")]
    more = [f"{n} runs for {what}" for n, what in counts if n != repeats]
    pairs = max((r.get("pairs", 0) for r in rows), default=0)
    if pairs > numbers["decode_runs"]:
        more.append(f"{pairs} runs each of a pred_batch and its LIPs, in adjacent pairs")
    runs = f"median of {repeats}" + (f" ({', '.join(more)})" if more else "")
    lines = [
        f"### Weight formats against llama.cpp: prefill {prefill_n}, greedy decode of {new} tokens, {runs}",
        "",
        f"Model: {model or 'SmolLM2-135M-Instruct (the shipped Q4_1 GGUF)'}. Rows `ours FORMAT` go through "
        "`Engine.pred_batch` (the engine-only path); rows `ours FORMAT LIPs` run the same greedy loop as one program "
        "per sequence (`bench.decode.greedy_program`, the path users run). `ours fp32` decodes its fewest rows from "
        "the GGUF blocks that hold its fp32 weights exactly (symphony_core/model/exact_blocks.py: the same numbers, "
        f"a sixth of the bytes); `ours {DENSE}` is the same engine on its dense fp32 tensors alone, the bytes "
        "llama.cpp F32 reads",
        "",
        f"Machine: {describe()}; llama.cpp through llama-cpp-python's low-level API, every sequence in one batch",
        "",
        "| engine | prefill tok/s | "
        + " | ".join(f"decode {b} seq tok/s" for b in batches)
        + " | "
        + " | ".join(f"same first 8 / all tokens as ours fp32 ({b} seq)" for b in batches)
        + " |",
        "|---|---:|" + "---:|" * len(batches) * 2,
    ]
    for r in rows:
        lines.append(
            f"| {r['engine']} | {r['prefill']:.0f} | "
            + " | ".join(f"{r[f'decode_{b}']:.1f}" for b in batches)
            + " | "
            + " | ".join(f"{r[f'same8_{b}']}/{b} · {r[f'same_{b}']}/{b}" for b in batches)
            + " |"
        )
    peers = [r for r in rows if r["engine"].startswith("llama.cpp")]
    if peers:
        lines += [
            "",
            "Ratios, Symphony ÷ llama.cpp (columns: the peer; rows: our format; prefill / decode 1 / 8 / 32):",
            "",
            "| ours | " + " | ".join(p["engine"] for p in peers) + " |",
            "|---|" + "---|" * len(peers),
        ]
        for r in rows:
            if r["engine"].startswith("ours"):
                cells = []
                for p in peers:
                    keys = ["prefill"] + [f"decode_{b}" for b in batches]
                    cells.append(" / ".join(f"{r[k] / p[k]:.2f}×" for k in keys))
                lines.append(f"| {r['engine']} | " + " | ".join(cells) + " |")
        lines += ["", "| target | measured | goal | verdict |", "|---|---|---|---|"]
        for name, measured, goal, ok in verdicts(rows, batches):
            lines.append(f"| {name} | {measured} | {goal} | {'met' if ok else '**missed**'} |")
    else:
        lines += ["", f"llama.cpp: skipped ({skipped})."]
    if "bandwidth_gbs" in numbers and 1 in batches:
        lines += ["", floor_line(rows, numbers) + "."]
    lines += [
        "",
        f"Runs started while other processes used ≥ 10% of the CPUs: {contended}. Decode tok/s counts "
        "the tokens after the first (the prompts' prefill excluded); \"same\" compares each sequence's "
        "greedy tokens with Symphony fp32's.",
    ]
    return "\n".join(lines)


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="toy size: batches 1 and 4, 8 new tokens, prefill 64, 1 repeat"
    )
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument(
        "--new", type=int, default=64, help="new tokens per sequence (default 64: six engines share the run)"
    )
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prefill-runs", type=int, default=3, help="prefill runs per engine in each repeat")
    ap.add_argument("--decode-runs", type=int, default=3, help="decode runs per engine and batch size in each repeat")
    ap.add_argument(
        "--lip-pairs",
        type=int,
        default=2,
        help="in each decode run, a format's pred_batch and LIPs run this many adjacent pairs (their ratio's noise)",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--model",
        default=None,
        help="a GGUF, a built-in name, or random:FAMILY:SIZE (e.g. random:qwen2:0.5b, a random-weight model of "
        "Qwen2.5-0.5B's shape written as F32 and Q4_1 GGUFs); default: the shipped SmolLM2",
    )
    ap.add_argument(
        "--idle-wait",
        type=float,
        default=None,
        help="seconds to wait for idle CPUs before each run (default 10; quick 0)",
    )
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.prefill_runs < 1 or args.decode_runs < 1 or args.lip_pairs < 1:
        ap.error("--repeats, --prefill-runs, --decode-runs and --lip-pairs take at least 1")
    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    new, prefill_n, repeats, prefill_runs = args.new, args.prefill, args.repeats, args.prefill_runs
    decode_runs = args.decode_runs
    if args.quick:
        batches, new, prefill_n, repeats, prefill_runs, decode_runs, args.lip_pairs = [1, 4], 8, 64, 1, 1, 1, 1
    idle = args.idle_wait if args.idle_wait is not None else (0.0 if args.quick else 10.0)
    rows, skipped, contended, floor = bench(
        batches, new, prefill_n, repeats, idle, args.threads, prefill_runs, args.model, decode_runs, args.lip_pairs
    )
    numbers = {
        "rows": rows,
        "batches": batches,
        "new": new,
        "prefill": prefill_n,
        "prefill_runs": repeats * prefill_runs,
        "decode_runs": repeats * decode_runs,
        "skipped": skipped,
        "model": args.model,
        "verdicts": [list(v) for v in verdicts(rows, batches)],
        **floor,
    }
    publish(__name__, numbers)
    md = table(numbers, repeats, contended)
    print(md)
    return md


def sized(argv=None) -> str:
    """The same side by side on a 0.5B-class model (Qwen2.5-0.5B's shape, random weights, F32 and Q4_1 GGUFs
    written by Symphony): whether the ratios hold past 135M parameters (`python -m bench --only model_size`)."""
    argv = list(argv or [])
    return main([*argv, "--model", "random:qwen2:tiny" if "--quick" in argv else "random:qwen2:0.5b"])


if __name__ == "__main__":
    main()

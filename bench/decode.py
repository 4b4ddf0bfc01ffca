"""Batched greedy decode: our engine next to transformers `generate`, same weights, same run.

For each batch size: B prompts of 32-64 tokens, 128 new tokens each, greedy, no stop at EOS.
Ours prefills all prompts in one `pred_batch`, then steps every sequence together with
`pred_batch([PredCall(kv, [tok]), ...])`. transformers runs `generate` on the left-padded batch
(fp32, use_cache=True, do_sample=False, a pad token and an attention mask); its decode-only
time is end-to-end minus a `max_new_tokens=1` run (the prefill and first token). Tokens/s
count new tokens only; figures are medians over the repeats, ours and theirs interleaved.

    python -m bench.decode [--quick] [--batches 1,8,32] [--new 128] [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from .common import busy, publish
from .machine import describe, wait_until_idle

TEXT = (
    "The history of astronomy is the story of people looking up at the night sky and trying to "
    "explain what they saw. Early farmers tracked the seasons by the rising of bright stars; "
    "sailors crossed oceans by the height of the pole star; and philosophers argued for centuries "
    "about whether the Earth or the Sun stood at the centre of everything. Telescopes changed the "
    "question from what moves to what things are made of, and spectroscopy answered it: the same "
    "elements that make up our bodies burn in the atmospheres of distant suns. Today, large "
    "surveys map billions of galaxies, and small satellites measure the faint wobble of stars "
    "that betrays the planets circling them. Write a short summary of this text for a child, "
    "then list three questions a student might ask next, and answer each one in a sentence."
)


def make_prompts(tokenize, n: int, lo: int, hi: int, seed: int = 0) -> list[list[int]]:
    """n prompts of lo..hi tokens: windows of one English text, so greedy output is text-like."""
    ids = tokenize(TEXT)
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(lo, min(hi, len(ids)))
        start = rng.randint(0, len(ids) - length)
        out.append(ids[start : start + length])
    return out


def run_ours(eng, prompts: list[list[int]], new: int) -> tuple[float, float, list[list[int]]]:
    """(prefill seconds, decode seconds, generated ids) for one batched greedy generation."""
    from symphony_core import PredCall

    kvs = [eng.kv_create() for _ in prompts]
    try:
        t0 = time.perf_counter()
        firsts = eng.pred_batch([PredCall(kv, p) for kv, p in zip(kvs, prompts)])
        toks = [d.argmax() for d in firsts]
        t1 = time.perf_counter()
        out = [[t] for t in toks]
        for _ in range(new - 1):
            res = eng.pred_batch([PredCall(kv, [t]) for kv, t in zip(kvs, toks)])
            toks = [d.argmax() for d in res]
            for o, t in zip(out, toks):
                o.append(t)
        t2 = time.perf_counter()
    finally:
        for kv in kvs:
            eng.kv_close(kv)
    return t1 - t0, t2 - t1, out


def greedy_program(sym, prompt: list[int], new: int) -> tuple[list[float], list[int]]:
    """The LIP a user writes for greedy decoding: a pred for the prompt, then one per token.
    Returns when each pred returned (perf_counter) and the tokens."""
    kv = sym.kv_create()
    try:
        toks = [sym.pred(kv, prompt).argmax()]
        stamps = [time.perf_counter()]
        for _ in range(new - 1):
            toks.append(sym.pred(kv, [toks[-1]]).argmax())
            stamps.append(time.perf_counter())
    finally:
        sym.kv_close(kv)
    return stamps, toks


def run_lips(eng, prompts: list[list[int]], new: int) -> tuple[float, float, list[list[int]]]:
    """`run_ours` through programs: one `greedy_program` per prompt, all at once (the path users run).
    Decode time is the window in which every program decodes (from the moment the last one has
    its first token to the moment the first one ends: programs whose prompts were prefilled in
    different batches start and end a few steps apart, and `pred_batch` has no such ragged
    edges), scaled to `len(prompts) * (new - 1)` tokens by the tokens that came inside it, so it
    reads as `run_ours`'s decode time does."""
    t0 = time.perf_counter()
    procs = [eng.run(greedy_program, p, new) for p in prompts]
    done = [pr.result(timeout=3600) for pr in procs]
    start = max(stamps[0] for stamps, _ in done)
    end = min(stamps[-1] for stamps, _ in done)
    inside = sum(1 for stamps, _ in done for t in stamps[1:] if start < t <= end)
    decode = (end - start) * len(prompts) * (new - 1) / max(inside, 1)
    return start - t0, decode, [toks for _, toks in done]


def hf_inputs(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def run_hf(model, prompts: list[list[int]], new: int, pad_id: int) -> tuple[float, list[list[int]]]:
    ids, mask = hf_inputs(prompts, pad_id)
    t0 = time.perf_counter()
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=new,
        eos_token_id=None,  # no stop at EOS: both sides produce exactly `new` greedy tokens
        do_sample=False,
        use_cache=True,
        pad_token_id=pad_id,
    )
    return time.perf_counter() - t0, out[:, ids.shape[1] :].tolist()


def matmul_params(model) -> int:
    """The weights one decode token is multiplied by: every layer's projections and the LM head."""
    projections = (w for layer in model.layers for w in (layer.wqkv, layer.wo, layer.w_gate_up, layer.w_down))
    return sum(w.numel() for w in projections) + model.lm_head.numel()


def flops_per_token(eng, context: float) -> float:
    """Model FLOPs of one decode token: every projection and the LM head, plus attention."""
    cfg = eng.config
    return 2 * matmul_params(eng.model) + 4 * cfg.n_layers * cfg.n_heads * cfg.head_dim * context


def _matmul_gflops(eng, rows: int) -> float:
    """The machine's matmul rate now, at `rows` rows on the engine's own fp32 weights (bench/matmul.py)."""
    from .matmul import measure

    with torch.inference_mode():
        return measure(eng.model, [rows], 3, 0.0)[0]["gflops"]


def bench(batches: list[int], new: int, repeats: int, lo: int, hi: int, idle_wait: float) -> list[dict]:
    from transformers import AutoModelForCausalLM

    from symphony_core import Engine

    # The prefix cache off: repeats feed the same prompts, and transformers recomputes every one.
    eng = Engine(num_pages=max(256, 4 * max(batches) * (hi + new) // 16), prefix_cache=False)
    hf = AutoModelForCausalLM.from_pretrained(str(eng.model_dir), dtype=torch.float32).eval()
    pad_id = hf.generation_config.pad_token_id
    if pad_id is None:
        pad_id = hf.config.pad_token_id if hf.config.pad_token_id is not None else min(eng.eos_token_ids)
    # Warm both (allocator, oneDNN/MKL kernels, lazy imports) outside the timings.
    warm = make_prompts(eng.tokenize, 2, lo, hi, seed=99)
    run_ours(eng, warm, 4)
    run_hf(hf, warm, 4, pad_id)

    rows = []
    for b in batches:
        prompts = make_prompts(eng.tokenize, b, lo, hi, seed=b)
        mean_context = sum(len(p) for p in prompts) / b + new / 2
        decode_gflop = b * (new - 1) * flops_per_token(eng, mean_context) / 1e9  # model work of our decode steps
        ours_pre, ours_dec, hf_e2e, hf_first = [], [], [], []
        # Target C at the widest batch: the matmuls alone, timed just before and just after each of our
        # runs, so both sides of the ratio see the machine in the same state (this machine's speed drifts
        # by tens of percent between the matmul section and this one).
        paired = b == max(batches)
        c_runs: list[float] = []
        same, contended = 0, 0
        for r in range(repeats):
            contended += busy(wait_until_idle(idle_wait))
            mm_before = _matmul_gflops(eng, b) if paired else 0.0
            pre, dec, ours_out = run_ours(eng, prompts, new)
            if paired:
                c_runs.append(decode_gflop / dec / ((mm_before + _matmul_gflops(eng, b)) / 2))
            ours_pre.append(pre)
            ours_dec.append(dec)
            contended += busy(wait_until_idle(idle_wait))
            e2e, hf_out = run_hf(hf, prompts, new, pad_id)
            hf_e2e.append(e2e)
            contended += busy(wait_until_idle(idle_wait))
            hf_first.append(run_hf(hf, prompts, 1, pad_id)[0])
            if r == 0:
                same = sum(a == h for a, h in zip(ours_out, hf_out))
            print(f"  batch {b} repeat {r + 1}/{repeats}: ours {pre + dec:.2f} s, transformers {e2e:.2f} s", flush=True)
        med = statistics.median
        decode_tokens, all_tokens = b * (new - 1), b * new
        row = {
            "batch": b,
            "ours_decode": decode_tokens / med(ours_dec),
            "ours_gflops": decode_gflop / med(ours_dec),
            "hf_decode": decode_tokens / max(1e-9, med(e - f for e, f in zip(hf_e2e, hf_first))),
            "ours_e2e": all_tokens / med(p + d for p, d in zip(ours_pre, ours_dec)),
            "hf_e2e": all_tokens / med(hf_e2e),
            "same": same,
            "contended": f"{contended}/{3 * repeats}" if idle_wait > 0 else "not checked",
        }
        if c_runs:
            row["c_runs"] = c_runs
            row["c_paired"] = med(c_runs)
        rows.append(row)
    return rows


def table(rows: list[dict], new: int, repeats: int, lo: int, hi: int) -> str:
    lines = [
        f"### Batched greedy decode (W1/W2): {lo}-{hi}-token prompts, {new} new tokens, median of {repeats}",
        "",
        f"Machine: {describe()}",
        "",
        "| sequences | ours decode tok/s | transformers decode tok/s | ratio | ours decode GFLOP/s | ours end-to-end tok/s "
        "| transformers end-to-end tok/s | ratio | same greedy tokens | runs started under other load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['batch']} | {r['ours_decode']:.1f} | {r['hf_decode']:.1f} | {r['ours_decode'] / r['hf_decode']:.2f}× "
            f"| {r['ours_gflops']:.0f} "
            f"| {r['ours_e2e']:.1f} | {r['hf_e2e']:.1f} | {r['ours_e2e'] / r['hf_e2e']:.2f}× | {r['same']}/{r['batch']} "
            f"| {r['contended']} |"
        )
    for r in rows:
        if "c_paired" in r:
            lines += [
                "",
                f"Target C at {r['batch']} sequences, paired: our decode GFLOP/s in each run over the matmuls' own "
                f"GFLOP/s at {r['batch']} rows (bench/matmul.py's timing, the mean of one just before and one just "
                f"after that run): {', '.join(f'{c:.2f}' for c in r['c_runs'])}; median **{r['c_paired']:.2f}**.",
            ]
    lines += [
        "",
        "llama.cpp: in the weight formats section (bench/weights.py: its low-level API, every sequence in one batch).",
    ]
    lines += [
        "",
        "Decode-only counts the tokens after the first (ours: the `pred_batch` steps; transformers: "
        "`generate` end-to-end minus a `max_new_tokens=1` run). End-to-end counts every new token "
        "over prefill + decode. GFLOP/s: model FLOPs of our decode steps (projections, LM head, "
        'attention) per second; compare with the matmul table. "Same greedy tokens": sequences whose output equals transformers\' '
        "token for token (fp32 ties can flip a late token). Each timed run first waits (up to "
        "--idle-wait s) for the CPUs to be idle; the last column counts runs that began while "
        "other processes still used >= 10% of them.",
    ]
    return "\n".join(lines)


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="toy size: batches 1 and 4, 8-16-token prompts, 8 new tokens")
    ap.add_argument("--batches", default=None, help="comma-separated batch sizes (default 1,8,32)")
    ap.add_argument("--new", type=int, default=None, help="new tokens per sequence (default 128)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--idle-wait",
        type=float,
        default=None,
        help="seconds to wait for idle CPUs before each timed run (default 120; quick 0)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.quick:
        batches, new, lo, hi = [1, 4], 8, 8, 16
    else:
        batches, new, lo, hi = [1, 8, 32], 128, 32, 64
    if args.batches:
        batches = [int(b) for b in args.batches.split(",")]
    new = args.new or new
    idle_wait = args.idle_wait if args.idle_wait is not None else (0.0 if args.quick else 120.0)
    rows = bench(batches, new, args.repeats, lo, hi, idle_wait)
    publish(__name__, {"rows": rows, "new": new, "repeats": args.repeats, "prompt_tokens": [lo, hi]})
    md = table(rows, new, args.repeats, lo, hi)
    print(md)
    return md


if __name__ == "__main__":
    main()

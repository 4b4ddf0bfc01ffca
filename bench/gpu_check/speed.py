"""The speed section of `make gpu-check`: a random-weights 1B-class Llama, Symphony beside transformers.

Decode: B sequences with 128-token prompts, then `steps` greedy steps; Symphony's through
`Executor.run` (a whole step a call: one forward, the CUDA graph where it replays, the batch's argmax),
transformers' through `generate` with its dynamic cache, its static cache, and its static cache under
`torch.compile` (transformers compiles the decode step itself for a static cache unless told not to).
transformers' decode rate is (B x (steps - 1)) / (time of steps tokens - time of 1 token), so its prefill
stays out. Prefill: one 2,048-token prompt and 8 of 512. The HBM floor at batch 1: a decode step reads
every weight once, so it takes at least weight bytes / copy bandwidth (a device-to-device copy of
1 GiB, counting bytes read and written); the fraction reached is that floor over the measured step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from .families import make_model, prompt, speed_config

CTX = 128


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _sync_time(fn: Callable[[], object], repeat: int = 1) -> float:
    _sync()
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    _sync()
    return (time.perf_counter() - t0) / repeat


def copy_bandwidth() -> float:
    """Bytes a second a device-to-device copy moves, read plus written (median of 20 copies of 1 GiB)."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return 2 * n / times[len(times) // 2]


def _checked(results: list) -> list:
    """`Executor.run` returns a failed call's error in its slot: raise the first."""
    for r in results:
        if isinstance(r, Exception):
            raise r
    return results


def symphony_decode(eng, batch: int, steps: int) -> float:
    """Tokens a second over `steps` decode steps of `batch` sequences."""
    from symphony_core.executor import PredCall

    vocab = eng.config.vocab_size
    kvs = [eng.kv_create() for _ in range(batch)]
    for i in range(0, batch, 32):
        _checked(eng.executor.run([PredCall(kv, prompt(CTX, i + j, vocab)) for j, kv in enumerate(kvs[i : i + 32])]))
    toks = [3] * batch

    def step() -> None:
        nonlocal toks
        res = _checked(eng.executor.run([PredCall(kv, [t]) for kv, t in zip(kvs, toks)], argmax=True))
        toks = [r.argmax() for r in res]

    for _ in range(3):
        step()
    dt = _sync_time(step, steps)
    for kv in kvs:
        eng.kv_close(kv)
    return batch / dt


def symphony_prefill(eng, n_prompts: int, length: int) -> float:
    from symphony_core.executor import PredCall

    vocab = eng.config.vocab_size

    def run() -> None:
        kvs = [eng.kv_create() for _ in range(n_prompts)]
        _checked(eng.executor.run([PredCall(kv, prompt(length, i, vocab)) for i, kv in enumerate(kvs)]))
        for kv in kvs:
            eng.kv_close(kv)

    run()
    return n_prompts * length / _sync_time(run, 3)


def hf_decode(model, batch: int, steps: int, mode: str) -> float:
    """transformers' `generate` decode rate; mode: "dynamic", "static" or "static+compile"."""
    ids = torch.tensor([prompt(CTX, i, model.config.vocab_size) for i in range(batch)], device=model.device)
    kw: dict = {"do_sample": False, "pad_token_id": 0, "attention_mask": torch.ones_like(ids)}
    if mode != "dynamic":
        kw["cache_implementation"] = "static"
        kw["disable_compile"] = mode == "static"

    def gen(n: int) -> Callable[[], object]:
        return lambda: model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)

    with torch.inference_mode():
        gen(steps)()  # warm-up (and compilation)
        gen(1)()
        t1 = _sync_time(gen(1))
        tn = _sync_time(gen(steps))
    return batch * (steps - 1) / (tn - t1)


def hf_prefill(model, n_prompts: int, length: int) -> float:
    ids = torch.tensor([prompt(length, i, model.config.vocab_size) for i in range(n_prompts)], device=model.device)
    with torch.inference_mode():
        model(ids)
        return n_prompts * length / _sync_time(lambda: model(ids), 3)


# A torch.compile'd generate compiles for a minute or more per batch size: it is left out (and noted) once
# the run has less than this many seconds left.
COMPILE_NEEDS_S = 150.0


def speed(
    workdir: Path,
    batches: list[int],
    steps: int,
    compile_batches: list[int],
    log: Callable[[str], None],
    deadline: float = float("inf"),
) -> dict:
    from symphony_core import Engine

    d = workdir / "llama-1b-random"
    hf = make_model(speed_config(), d, device="cuda", dtype=torch.bfloat16)
    weight_bytes = sum(p.numel() * p.element_size() for p in {id(p): p for p in hf.parameters()}.values())
    out: dict = {"model": "Llama 3.2 1B shapes, random bf16 weights", "weight_bytes": weight_bytes, "ctx": CTX}
    out["copy_bandwidth_GBps"] = copy_bandwidth() / 1e9
    t0 = time.perf_counter()
    eng = Engine(str(d), device="cuda", dtype=torch.bfloat16, kv_cache_gb=8.0)
    out["symphony_load_s"] = time.perf_counter() - t0  # the CUDA graphs are captured in it
    out["symphony_attention"] = eng.model.attention.name
    out["symphony_cuda_graphs"] = eng.executor.decode_graphs is not None
    rows = [{"batch": b} for b in batches]
    try:
        # Symphony's figures first, then transformers': a decode replaying our CUDA graphs after transformers'
        # torch.compile'd generate (CUDA-graph trees of its own) faulted once on an H200 (illegal address), so
        # the run measures each side on its own and probes that order last (`decode_after_hf_compile`).
        for row in rows:
            row["symphony"] = symphony_decode(eng, row["batch"], steps)
            log(f"  decode batch {row['batch']}: symphony {row['symphony']:.0f} tok/s")
        prefill = {"symphony_1x2048": symphony_prefill(eng, 1, 2048), "symphony_8x512": symphony_prefill(eng, 8, 512)}
        for row in rows:
            b = row["batch"]
            for mode in ("dynamic", "static") + (("static+compile",) if b in compile_batches else ()):
                if mode == "static+compile" and deadline - time.perf_counter() < COMPILE_NEEDS_S:
                    row["hf_" + mode + "_error"] = "left out: the run's time budget"
                    continue
                try:
                    row["hf_" + mode] = hf_decode(hf, b, steps, mode)
                    log(f"  decode batch {b}: transformers {mode} {row['hf_' + mode]:.0f} tok/s")
                except Exception as e:  # a mode this transformers or card does not take: noted, not fatal
                    row["hf_" + mode + "_error"] = f"{type(e).__name__}: {e}"[:300]
        out["decode"] = rows
        out["prefill"] = prefill | {"hf_1x2048": hf_prefill(hf, 1, 2048), "hf_8x512": hf_prefill(hf, 8, 512)}
        try:
            symphony_decode(eng, 8, 4)
            out["decode_after_hf_compile"] = "ok"
        except Exception as e:  # the CUDA context may be lost: nothing runs on it after this
            out["decode_after_hf_compile"] = f"{type(e).__name__}: {e}"[:200]
        log(f"  Symphony decode at batch 8 after transformers' runs: {out['decode_after_hf_compile']}")
    finally:
        try:
            eng.shutdown()
        except Exception as e:
            out["shutdown_error"] = f"{type(e).__name__}: {e}"[:200]
    one = next((r for r in rows if r["batch"] == 1), None)
    if one is not None:
        floor_s = weight_bytes / (out["copy_bandwidth_GBps"] * 1e9)
        out["batch1_step_ms"] = 1e3 / one["symphony"]
        out["batch1_floor_ms"] = 1e3 * floor_s
        out["batch1_fraction_of_hbm_floor"] = floor_s * one["symphony"]
    out["ok"] = True
    return out


def markdown(result: dict) -> list[str]:
    """The speed figures as a markdown table (for bench/RESULTS.md's GPU section)."""
    modes = ["dynamic", "static", "static+compile"]
    lines = [
        "| sequences | Symphony tok/s | "
        + " | ".join(f"transformers {m}" for m in modes)
        + " | Symphony / best transformers |",
        "|---|---|" + "---|" * len(modes) + "---|",
    ]
    for row in result.get("decode", []):
        hf = [row.get("hf_" + m) for m in modes]
        best = max((v for v in hf if v), default=None)
        cells = [f"{v:,.0f}" if v else ("error" if row.get(f"hf_{m}_error") else "-") for v, m in zip(hf, modes)]
        ratio = f"{row['symphony'] / best:.2f}x" if best else "-"
        if best and not row.get("hf_static+compile"):
            ratio += " (eager transformers)"
        lines.append(f"| {row['batch']} | {row['symphony']:,.0f} | " + " | ".join(cells) + f" | {ratio} |")
    p = result.get("prefill")
    if p:
        lines.append("")
        lines.append(
            f"Prefill tok/s: 1 x 2,048 tokens: Symphony {p['symphony_1x2048']:,.0f}, transformers {p['hf_1x2048']:,.0f}; "
            f"8 x 512: Symphony {p['symphony_8x512']:,.0f}, transformers {p['hf_8x512']:,.0f}."
        )
    if "decode_after_hf_compile" in result:
        lines.append(
            f"Symphony's decode at batch 8 after transformers' torch.compile'd runs: {result['decode_after_hf_compile'].splitlines()[0]}."
        )
    if "batch1_fraction_of_hbm_floor" in result:
        lines.append(
            f"Batch 1: {result['batch1_step_ms']:.2f} ms a step against a floor of {result['batch1_floor_ms']:.2f} ms "
            f"({result['weight_bytes'] / 1e9:.2f} GB of weights at {result['copy_bandwidth_GBps']:,.0f} GB/s copy "
            f"bandwidth): {100 * result['batch1_fraction_of_hbm_floor']:.0f}% of the HBM floor."
        )
    return lines

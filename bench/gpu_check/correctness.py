"""The correctness sections of `make gpu-check`: parity with transformers, KVFS on the device, programs.

Each returns a dict of figures with `ok` (its pass criterion met) and never raises for a failed
check: the caller records what came back (or the error) and goes on to the next section.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import torch

from .families import FAMILIES, make_model, prompt


def greedy(sym, tokens: list[int], n: int) -> list[int]:
    """A LIP: `n` greedy tokens after `tokens` (`sym` may also be an Engine: the same calls)."""
    kv = sym.kv_create()
    out: list[int] = []
    for _ in range(n):
        t = sym.pred(kv, tokens).argmax()
        out.append(t)
        tokens = [t]
    sym.kv_close(kv)
    return out


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


def parity(family: str, workdir: Path, device: str, dtype: torch.dtype, steps: int = 64) -> dict:
    """Logits of a 100-token prompt and `steps` greedy tokens against transformers' forward, same device
    and dtype. In fp32 the logits must agree to 1e-4 (relative); in half precision, where both round,
    Symphony's distance from transformers' fp32 logits must be at most twice transformers' own (+1e-3).
    A greedy divergence counts as agreement where transformers' own top two logits at that step are
    closer than twice the largest logit error seen on the prompt (a near tie in this dtype)."""
    from symphony_core import Engine

    d = workdir / f"tiny-{family}"
    cfg = FAMILIES[family]()
    hf32 = make_model(cfg, d).to(device)
    hf = copy.deepcopy(hf32).to(dtype) if dtype != torch.float32 else hf32
    eng = Engine(str(d), device=device, dtype=dtype, num_pages=128)
    try:
        ids = prompt(100, 1, cfg.vocab_size)
        with torch.no_grad():
            want = hf(torch.tensor([ids], device=device)).logits[0].float()
            exact = hf32(torch.tensor([ids], device=device)).logits[0].float()
        kv = eng.kv_create()
        got = eng.pred(kv, ids, outputs="all").logits.float().to(device)
        err = float((got - want).abs().max())
        # greedy: transformers one token at a time over its own cache; Symphony continuing `kv`
        hf_toks, gaps, past, x = [], [], None, torch.tensor([ids], device=device)
        with torch.no_grad():
            for _ in range(steps):
                o = hf(x, past_key_values=past, use_cache=True)
                past, last = o.past_key_values, o.logits[0, -1].float()
                top2 = last.topk(2).values
                gaps.append(float(top2[0] - top2[1]))
                hf_toks.append(int(last.argmax()))
                x = torch.tensor([[hf_toks[-1]]], device=device)
        sym_toks, tok = [], int(got[-1].argmax())
        for i in range(steps):
            sym_toks.append(tok)
            if i + 1 < steps:
                tok = eng.pred(kv, [tok]).argmax()
        eng.kv_close(kv)
        first = next((i for i, (a, b) in enumerate(zip(hf_toks, sym_toks)) if a != b), steps)
        near_tie = first < steps and gaps[first] < 2 * err
        rel = _rel(got, want)
        # In half precision both sides round: held to transformers' own error against its fp32 forward.
        ours_vs_fp32, theirs_vs_fp32 = _rel(got, exact), _rel(want, exact)
        logits_ok = ours_vs_fp32 <= 2 * theirs_vs_fp32 + 1e-3 if dtype != torch.float32 else rel < 1e-4
        return {
            "family": family,
            "dtype": str(dtype).replace("torch.", ""),
            "prompt_logits_rel_err": rel,
            "prompt_logits_max_abs_err": err,
            "ours_vs_fp32_rel_err": ours_vs_fp32,
            "transformers_vs_fp32_rel_err": theirs_vs_fp32,
            "greedy_steps": steps,
            "greedy_agree": first,
            "divergence_is_near_tie": near_tie,
            "pages_used_after": eng.kvfs.stats()["pages_used"],
            "ok": logits_ok and (first == steps or near_tie) and eng.kvfs.stats()["pages_used"] == 0,
        }
    finally:
        eng.shutdown()


def kvfs_ops(workdir: Path, device: str, dtype: torch.dtype) -> dict:
    """Fork, copy-on-write and truncate on the device: each branch's logits against a fresh file fed the
    same tokens, and every page accounted for."""
    from symphony_core import Engine

    d = workdir / "tiny-llama"
    if not (d / "config.json").exists():
        make_model(FAMILIES["llama"](), d)
    eng = Engine(str(d), device=device, dtype=dtype, num_pages=64, page_size=16, prefix_cache=False)
    out: dict = {}
    try:
        ids = prompt(37, 2)  # 2 pages and 5 slots: the fork shares a partial last page

        def fresh(tokens: list[int]) -> torch.Tensor:
            kv = eng.kv_create()
            lg = eng.pred(kv, tokens).logits.float()
            eng.kv_close(kv)
            return lg

        kv = eng.kv_create()
        eng.pred(kv, ids)
        fork = eng.kv_fork(kv)
        out["shared_pages_after_fork"] = sum(a == b for a, b in zip(kv.pages, fork.pages))
        a = eng.pred(kv, [7]).logits.float()
        b = eng.pred(fork, [8]).logits.float()
        out["copy_on_write"] = kv.pages[:-1] == fork.pages[:-1] and kv.pages[-1] != fork.pages[-1]
        out["branch_a_max_err"] = float((a - fresh(ids + [7])).abs().max())
        out["branch_b_max_err"] = float((b - fresh(ids + [8])).abs().max())
        eng.kv_truncate(kv, 20)
        c = eng.pred(kv, [9]).logits.float()
        out["truncate_max_err"] = float((c - fresh(ids[:20] + [9])).abs().max())
        out["truncated_length"] = kv.len
        eng.kvfs.check()
        eng.kv_close(kv)
        eng.kv_close(fork)
        out["pages_used_after"] = eng.kvfs.stats()["pages_used"]
        tol = 5e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-4
        errs = [out["branch_a_max_err"], out["branch_b_max_err"], out["truncate_max_err"]]
        out["ok"] = (
            out["shared_pages_after_fork"] == 3
            and out["copy_on_write"]
            and max(errs) < tol
            and out["truncated_length"] == 21
            and out["pages_used_after"] == 0
        )
        return out
    finally:
        eng.shutdown()


def programs(workdir: Path, device: str, dtype: torch.dtype, n_programs: int = 64, tokens: int = 32) -> dict:
    """`n_programs` concurrent greedy LIPs; the prefix example (examples/lips/prefix_parallel.py); one
    debugger stop, an override of the token a pred chose, and the program going on from it."""
    from examples.lips.prefix_parallel import prefix_parallel
    from symphony_core import Engine
    from symphony_lab.debugger import Debugger

    d = workdir / "tiny-llama"
    if not (d / "config.json").exists():
        make_model(FAMILIES["llama"](), d)
    eng = Engine(str(d), device=device, dtype=dtype, num_pages=1024)
    out: dict = {}
    try:
        prompts = [prompt(5 + i % 40, 100 + i) for i in range(n_programs)]
        t0 = time.perf_counter()
        procs = [eng.run(greedy, p, tokens) for p in prompts]
        results = [p.result(timeout=300) for p in procs]
        dt = time.perf_counter() - t0
        alone = [greedy(eng, p, tokens) for p in prompts[:4]]
        out["lips"] = n_programs
        out["lips_all_finished"] = all(len(r) == tokens for r in results)
        out["lips_tokens_per_s"] = n_programs * tokens / dt
        out["lips_first4_equal_alone"] = sum(r == a for r, a in zip(results, alone))

        res = eng.run(prefix_parallel, max_tokens=8).result(timeout=300)
        again = eng.run(prefix_parallel, max_tokens=8).result(timeout=300)
        out["prefix_example"] = {
            "answers": len(res["answers"]),
            "prefix_tokens": res["prefix_tokens"],
            "pages_held": res["pages_held"],
            "pages_if_copied": res["pages_if_copied"],
            "second_run_found_cache": again["cached"],
        }
        eng.kv_remove(res["path"])

        dbg = Debugger(eng)
        try:
            pid = dbg.launch(
                "examples.lips.streaming_completion:complete", "w7 w8 w9", max_tokens=6, stop_on_entry=True
            )["pid"]
            dbg.wait_stopped(pid, timeout=60)
            dbg.step(pid, 1)
            stop = dbg.wait_stopped(pid, timeout=60)
            chosen = stop["result"]["chosen"]["token"]
            forced = 11 if chosen != 11 else 12
            applied = dbg.override(pid, 1, token=forced)["applied"]
            dbg.continue_(pid)
            done = dbg.wait_process(pid, timeout=120)
        finally:
            dbg.detach()
        toks = done["result"]["tokens"]
        out["debugger"] = {"stopped_at": stop["call"], "override_applied": applied, "first_token": toks[0]}
        eng.kvfs.check()
        out["pages_used_after"] = eng.kvfs.stats()["pages_used"]
        out["ok"] = (
            out["lips_all_finished"]
            and res["pages_held"] < res["pages_if_copied"]
            and again["cached"]
            and applied
            and toks[0] == forced
            and done["status"] == "finished"
        )
        return out
    finally:
        eng.shutdown()

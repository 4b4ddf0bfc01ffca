"""The stall one user's long prompt causes another user's short program, with and without the
batch scheduler's fair-share chunks (symphony_core/sched/fair_chunks.py), in one engine.

The victim (user "victim") generates 12 tokens greedily from a 9-token prompt; the neighbour
(user "big") feeds one prompt of `--prompt` tokens at the same moment. Each configuration is
run `--rounds` times, alternating, and the victim's median wall time is reported beside its
time alone: the ratio to alone is the stall. `shared_chunk=None` is the scheduler before the
change (a prompt takes the whole 512-token budget of every batch it is in).

    python -m bench.neighbour_stall [--prompt 3000] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from symphony_core import Engine
from symphony_core.sched.fair_chunks import SHARED_CHUNK

PROMPT = [504, 3458, 282, 4649, 314, 2113, 30, 378, 1345]


def victim(sym, n: int) -> list[int]:
    kv = sym.kv_create()
    out, toks = [], PROMPT
    for _ in range(n):
        toks = [int(sym.pred(kv, toks).argmax())]
        out.append(toks[0])
    return out


def big(sym, n: int) -> int:
    kv = sym.kv_create()
    sym.pred(kv, [(11 * i) % 2000 + 100 for i in range(n)])
    return n


def timed_victim(eng: Engine, prompt: int | None) -> tuple[float, float | None, list[int]]:
    """The victim's wall time (and the big prompt's, when there is one) and its tokens."""
    t0 = time.perf_counter()
    b = eng.launch(big, prompt, user="big") if prompt else None
    v = eng.launch(victim, 12, user="victim")
    toks = v.result(timeout=900)
    tv = time.perf_counter() - t0
    tb = None
    if b is not None:
        b.result(timeout=900)
        tb = time.perf_counter() - t0
    return tv, tb, toks


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args(argv)
    eng = Engine(num_pages=1024)
    batch = eng.runtime.batch
    timed_victim(eng, None)  # warm up
    times: dict[str, list[float]] = {"alone": [], "before": [], "after": []}
    big_times: dict[str, list[float]] = {"before": [], "after": []}
    ref = None
    for _ in range(a.rounds):
        for name, chunk, prompt in (
            ("alone", SHARED_CHUNK, None),
            ("before", None, a.prompt),
            ("after", SHARED_CHUNK, a.prompt),
        ):
            batch.shared_chunk = chunk
            tv, tb, toks = timed_victim(eng, prompt)
            ref = ref or toks
            assert toks == ref, "the victim's tokens changed"
            times[name].append(tv)
            if tb is not None:
                big_times[name].append(tb)
    med = {k: statistics.median(v) for k, v in times.items()}
    big_med = {k: statistics.median(v) for k, v in big_times.items()}
    res = {
        "prompt_tokens": a.prompt,
        "rounds": a.rounds,
        "victim_s": {k: round(v, 3) for k, v in med.items()},
        "victim_stall_before": round(med["before"] / med["alone"], 2),
        "victim_stall_after": round(med["after"] / med["alone"], 2),
        "big_prompt_s": {k: round(v, 3) for k, v in big_med.items()},
        "big_prompt_slowdown": round(big_med["after"] / big_med["before"], 2),
    }
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    eng.shutdown()
    return (
        f"victim's 12 tokens: alone {med['alone']:.2f} s; beside a {a.prompt}-token prompt {med['before']:.2f} s "
        f"before ({res['victim_stall_before']}x alone), {med['after']:.2f} s after ({res['victim_stall_after']}x); "
        f"the prompt itself {big_med['before']:.2f} s before, {big_med['after']:.2f} s after "
        f"({res['big_prompt_slowdown']}x)"
    )


if __name__ == "__main__":
    print(main())

"""Routing simulation for scale-out (docs/scale-out.md): which replica should a program go to?

Computed, not run live: a synthetic trace of 10,000 programs is routed over R replicas (8-64) by
three policies, and each replica is modelled as one FCFS server whose work per program is its
prefill of the prompt tokens it does not hold in KV plus its decode:

- **affinity** (what `symphony serve --ray` does for programs): every program of a user goes to the
  user's home replica, chosen at the user's first program as the replica with the least
  outstanding work;
- **prefix**: the program's system prompt (template) hashes to a replica (rendezvous hashing),
  unless that replica's outstanding work exceeds the least loaded one's by more than a slack,
  then the least loaded takes it (what the front does for OpenAI requests);
- **p2c**: power of two choices — two random replicas, the one with less outstanding work.

The trace: 2,000 users with Zipf(0.8) activity; 40 system-prompt templates (300-1,200 tokens,
Zipf popularity, each user mostly sticks to one); 70% of a user's programs after the first reuse
the user's named KV file (a 500-3,000 token context, growing as it is used, up to 4,096); each program adds
50-200 prompt tokens and decodes 20-200. A replica keeps its 8 most recent templates' KV pages (LRU);
a named file lives on the replica that last wrote it (a program elsewhere recomputes it there).
Arrivals are Poisson at 75% of the cluster's capacity (see `calibrate`; each policy's
own utilisation is reported). A fourth policy, **affinity-bounded** (not built: a candidate), moves a
user's home to the least loaded replica when the home's backlog exceeds it by a margin, paying one
recomputation of the file. Costs: prefill 1 unit per 1,000 tokens, decode 20 units per 1,000 tokens.

    python -m bench.routing_sim [--quick] [--out docs/img/routing_sim.png] [--seed 0]
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .common import publish

HERE = Path(__file__).resolve().parent
PREFILL, DECODE = 1.0 / 1000, 20.0 / 1000  # work units per token
TEMPLATE_CACHE = 8  # templates whose KV pages a replica keeps
POLICIES = ("affinity", "prefix", "p2c", "affinity-bounded")
USER_ZIPF = 0.8  # user activity ~ 1 / rank**0.8: the busiest of 2,000 users sends ~4.5% of the programs
CONTEXT_CAP = 4096  # a named context file stops growing here (the model's window, less room)


@dataclass
class Program:
    t: float
    user: int
    template: int
    template_len: int
    reuse: bool  # uses the user's named KV file
    context_len: int  # tokens in that file when the program starts
    new_prompt: int
    decode: int


def make_trace(n: int, rng: np.random.Generator, users: int = 2000, templates: int = 40) -> list[Program]:
    uw = 1.0 / np.arange(1, users + 1) ** USER_ZIPF
    tw = 1.0 / np.arange(1, templates + 1) ** 1.0
    tlen = rng.integers(300, 1201, templates)
    favorite = rng.choice(templates, size=users, p=tw / tw.sum())
    ctx = rng.integers(500, 3001, users)
    seen = np.zeros(users, bool)
    out = []
    for u in rng.choice(users, size=n, p=uw / uw.sum()):
        tpl = favorite[u] if rng.random() < 0.8 else rng.choice(templates, p=tw / tw.sum())
        reuse = bool(seen[u] and rng.random() < 0.7)
        new, dec = int(rng.integers(50, 201)), int(rng.integers(20, 201))
        out.append(Program(0.0, int(u), int(tpl), int(tlen[tpl]), reuse, int(ctx[u]) if reuse else 0, new, dec))
        if reuse:
            ctx[u] = min(ctx[u] + new + dec, CONTEXT_CAP)
        seen[u] = True
    return out


def _work(p: Program, tpl_hit: bool, ctx_hit: bool) -> float:
    prefill = (0 if tpl_hit else p.template_len) + (0 if ctx_hit else p.context_len) + p.new_prompt
    return prefill * PREFILL + p.decode * DECODE


def calibrate(trace: list[Program], replicas: int, rho: float, rng: np.random.Generator) -> None:
    """Poisson arrival times at `rho` of the cluster's capacity, taking a program's work as the mean
    of its work with no KV reuse and with all of it (the policies' own utilisation is reported)."""
    mean = float(np.mean([(_work(p, False, False) + _work(p, True, True)) / 2 for p in trace]))
    gaps = rng.exponential(mean / (rho * replicas), len(trace))
    for p, t in zip(trace, np.cumsum(gaps)):
        p.t = float(t)


def _rank(key: int, r: int) -> bytes:
    return hashlib.blake2b(f"{key}:{r}".encode(), digest_size=8).digest()


def simulate(trace: list[Program], replicas: int, policy: str, seed: int) -> dict:
    rng = np.random.default_rng(seed + 1)
    free_at = np.zeros(replicas)
    busy = np.zeros(replicas)
    caches = [OrderedDict() for _ in range(replicas)]
    home: dict[int, int] = {}
    homed = np.zeros(replicas, int)
    file_at: dict[int, int] = {}
    slack = 2 * float(np.mean([_work(p, True, True) for p in trace[:500]]))
    tpl_owner = {t: max(range(replicas), key=lambda r: _rank(t, r)) for t in {p.template for p in trace}}
    hit_tok = all_tok = reuse_n = reuse_hit = tpl_hits = 0
    lat = np.empty(len(trace))
    for i, p in enumerate(trace):
        load = np.maximum(free_at - p.t, 0.0)
        if policy.startswith("affinity"):
            if p.user not in home:
                home[p.user] = int(np.lexsort((homed, load))[0])
                homed[home[p.user]] += 1
            r = home[p.user]
            if policy == "affinity-bounded" and load[r] - load.min() > 4 * slack:  # rehome: the file is recomputed
                homed[r] -= 1
                r = home[p.user] = int(np.argmin(load))
                homed[r] += 1
        elif policy == "prefix":
            r = tpl_owner[p.template]
            least = int(np.argmin(load))
            if load[r] - load[least] > slack:
                r = least
        else:
            a, b = rng.choice(replicas, 2, replace=False)
            r = int(a if load[a] <= load[b] else b)
        tpl_hit = p.template in caches[r]
        if tpl_hit:
            caches[r].move_to_end(p.template)
        else:
            caches[r][p.template] = True
            if len(caches[r]) > TEMPLATE_CACHE:
                caches[r].popitem(last=False)
        ctx_hit = p.reuse and file_at.get(p.user) == r
        file_at[p.user] = r
        w = _work(p, tpl_hit, ctx_hit)
        start = max(p.t, free_at[r])
        free_at[r] = start + w
        busy[r] += w
        lat[i] = free_at[r] - p.t
        hit_tok += (p.template_len if tpl_hit else 0) + (p.context_len if ctx_hit else 0)
        all_tok += p.template_len + p.context_len
        tpl_hits += tpl_hit
        reuse_n += p.reuse
        reuse_hit += ctx_hit
    base = float(np.mean([_work(p, False, False) for p in trace]))
    span = max(float(free_at.max()), trace[-1].t) - trace[0].t
    return {
        "replicas": replicas,
        "policy": policy,
        "utilisation": float(busy.sum() / (replicas * span)),
        "kv_hit_rate": hit_tok / all_tok,
        "named_file_hit_rate": reuse_hit / max(reuse_n, 1),
        "template_hit_rate": tpl_hits / len(trace),
        "load_max_over_mean": float(busy.max() / busy.mean()),
        "load_cv": float(busy.std() / busy.mean()),
        "latency_p50": float(np.percentile(lat, 50) / base),
        "latency_p99": float(np.percentile(lat, 99) / base),
    }


def plot(rows: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"affinity": "#2b6cb0", "prefix": "#c05621", "p2c": "#718096", "affinity-bounded": "#38a169"}
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    panels = (
        ("kv_hit_rate", "KV hit rate (prompt tokens found)", False),
        ("load_max_over_mean", "load balance: busiest / mean replica work", False),
        ("latency_p99", "p99 latency / mean uncached service time", True),
    )
    for ax, (key, title, log) in zip(axes, panels):
        for pol in POLICIES:
            rs = [r for r in rows if r["policy"] == pol]
            ax.plot(
                [r["replicas"] for r in rs],
                [r[key] for r in rs],
                "o-" if pol in POLICIES[:3] else "^--",
                color=colors[pol],
                label=pol if pol in POLICIES[:3] else f"{pol} (not built)",
            )
        ax.set_xscale("log", base=2)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("replicas")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"Routing {rows[0]['programs']:,} programs (synthetic trace, 75% utilisation)", fontsize=11)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1,000 programs, 8 and 16 replicas (for tests)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--out", default=str(HERE.parent / "docs" / "img" / "routing_sim.png"), help="the plot ('' for none)"
    )
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    a = ap.parse_args(argv)
    n, sizes = (1000, (8, 16)) if a.quick else (10_000, (8, 16, 32, 64))
    rows = []
    for R in sizes:
        rng = np.random.default_rng(a.seed)
        trace = make_trace(n, rng)
        calibrate(trace, R, 0.75, rng)
        for pol in POLICIES:
            rows.append({**simulate(trace, R, pol, a.seed), "programs": n})
    publish(__name__, {"rows": rows})
    md = [
        "| replicas | policy | KV hit rate | named-file hits | template hits | load max/mean | load CV | "
        "p50 latency | p99 latency | utilisation |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append(
            f"| {r['replicas']} | {r['policy']} | {r['kv_hit_rate']:.1%} | {r['named_file_hit_rate']:.1%} | "
            f"{r['template_hit_rate']:.1%} | {r['load_max_over_mean']:.2f} | {r['load_cv']:.2f} | "
            f"{r['latency_p50']:.1f} | {r['latency_p99']:.1f} | {r['utilisation']:.0%} |"
        )
    if a.out:
        md.append(f"\nplot: {plot(rows, Path(a.out))}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return "\n".join(md)


if __name__ == "__main__":
    print(main())

"""`/metrics` in the Prometheus text format, read from the batch log and the KV file system."""

from __future__ import annotations

from collections import Counter

from ..events import now

BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
RATE_WINDOW_S = 10.0


def _line(out: list[str], name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
    out.append(f"# HELP {name} {help_}")
    out.append(f"# TYPE {name} {kind}")
    for labels, v in samples:
        out.append(f"{name}{labels} {v:g}" if isinstance(v, float) else f"{name}{labels} {v}")


def render_metrics(state) -> str:
    eng = state.engine
    rt = eng.runtime
    blog = rt.batch.log
    ms = state.metrics_state
    # A cumulative batch-size histogram: fold in the records since the last scrape.
    hist = ms.setdefault("hist", [0] * (len(BATCH_SIZE_BUCKETS) + 1))
    last = ms.get("last_bid", 0)
    total_size = ms.get("size_sum", 0)
    records = list(blog.records)
    for r in records:
        if r.bid <= last:
            continue
        i = next((k for k, b in enumerate(BATCH_SIZE_BUCKETS) if r.size <= b), len(BATCH_SIZE_BUCKETS))
        hist[i] += 1
        total_size += r.size
        last = r.bid
    ms["last_bid"], ms["size_sum"] = last, total_size
    t = now()
    recent = [r for r in records if r.t_end >= t - RATE_WINDOW_S]
    tok_s = sum(r.tokens for r in recent) / RATE_WINDOW_S
    kv = eng.kvfs.stats()
    status = Counter(p.status for p in list(rt.processes.values()))
    out: list[str] = []
    _line(out, "symphony_batches_total", "counter", "Forward passes fired by the batch scheduler.", [("", blog.total_batches)])
    _line(out, "symphony_batch_tokens_total", "counter", "Tokens run through the model.", [("", blog.total_tokens)])
    _line(out, "symphony_batch_members_total", "counter", "pred calls served, summed over batches.", [("", blog.total_members)])
    cum, samples = 0, []
    for b, c in zip(BATCH_SIZE_BUCKETS, hist):
        cum += c
        samples.append((f'{{le="{b}"}}', cum))
    cum += hist[-1]
    samples.append(('{le="+Inf"}', cum))
    out.append("# HELP symphony_batch_size pred calls fused into one forward pass.")
    out.append("# TYPE symphony_batch_size histogram")
    out += [f"symphony_batch_size_bucket{labels} {v}" for labels, v in samples]
    out += [f"symphony_batch_size_sum {total_size}", f"symphony_batch_size_count {cum}"]
    _line(out, "symphony_queue_depth", "gauge", "pred calls waiting for a batch.", [("", len(rt.batch.queued()))])
    _line(out, "symphony_tokens_per_second", "gauge", f"Tokens per second over the last {RATE_WINDOW_S:g} s.",
          [("", round(tok_s, 3))])
    _line(out, "symphony_kv_pages_used", "gauge", "KV pages in use.", [("", kv["pages_used"])])
    _line(out, "symphony_kv_pages_total", "gauge", "KV pages in the pool.", [("", kv["pages_total"])])
    _line(out, "symphony_kv_files", "gauge", "Live KV files.", [("", kv["files"])])
    _line(out, "symphony_kv_named_files", "gauge", "Named KV files.", [("", kv["named_files"])])
    _line(out, "symphony_processes", "gauge", "LIP processes by status.",
          [(f'{{status="{s}"}}', c) for s, c in sorted(status.items())] or [('{status="running"}', 0)])
    if state.sandbox is not None:
        _line(out, "symphony_sandbox_workers", "gauge", "Sandboxed worker processes alive.",
              [("", state.sandbox.live_workers())])
        _line(out, "symphony_sandbox_workers_started_total", "counter", "Sandboxed workers started.",
              [("", state.sandbox.started_total)])
    return "\n".join(out) + "\n"

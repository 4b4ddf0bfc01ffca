"""`/metrics` in the Prometheus text format, through `prometheus_client`.

Histograms are observed when the event happens, never at scrape time, so any number of
scrapers at any interval read the same cumulative counts (nothing is reset on read, nothing
lost when the batch log rolls over): the batch size from every batch record as the scheduler
adds it (`BatchLog.observers`); queue time, time to first token and inter-token latency from
the OpenAI endpoints' built-in LIP (`RequestTimer`). Counters and gauges are read at scrape
time from the state they describe (the batch log's running totals, the KV file system, the
process table, the sandbox).

Beside Symphony's own, the OpenAI requests are counted under vLLM's names and meanings (what
vLLM dashboards read), labelled `model_name`: `vllm:e2e_request_latency_seconds`,
`vllm:time_to_first_token_seconds`, `vllm:inter_token_latency_seconds`,
`vllm:request_queue_time_seconds`, `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`,
`vllm:request_success_total{finished_reason}`, and the gauges `vllm:num_requests_running` (its LIP
has started and not ended) and `vllm:num_requests_waiting` (arrived, its LIP not started yet);
plus the `process_*` metrics of the server process, and Python's garbage collections' pauses
(gc_pauses.py).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector, generate_latest
from prometheus_client import Counter as PromCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..events import now
from .gc_pauses import GCPauses

BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
RATE_WINDOW_S = 10.0


class RequestTimer:
    """One OpenAI request's timings: `started` when its LIP runs, `token` per generated token."""

    def __init__(self, metrics: ServerMetrics, endpoint: str, arrived: float) -> None:
        self.m, self.endpoint, self.arrived = metrics, endpoint, arrived
        self.last: dict[int, float] = {}  # choice -> when its last token came
        self.lock = threading.Lock()
        self.is_started = self.is_finished = False
        self.proc = None  # the request's LIP process, once launched (a cancelled one never starts)

    @property
    def live(self) -> bool:
        return not self.is_finished and not (self.proc is not None and self.proc.done)

    def started(self) -> None:
        self.is_started = True
        q = time.monotonic() - self.arrived
        self.m.queue_time.labels(self.endpoint).observe(q)
        self.m.vllm_queue.labels(self.m.model).observe(q)

    def finished(self, reasons: list[str], prompt_tokens: int, completion_tokens: int) -> None:
        """The request ended well: its choices' finish reasons and its token counts."""
        self.is_finished = True
        m = self.m
        m.vllm_e2e.labels(m.model).observe(time.monotonic() - self.arrived)
        m.vllm_prompt.labels(m.model).inc(prompt_tokens)
        m.vllm_generation.labels(m.model).inc(completion_tokens)
        for r in reasons:
            m.vllm_success.labels(m.model, r).inc()

    def token(self, choice: int) -> None:
        t = time.monotonic()
        with self.lock:
            first = not self.last
            prev = self.last.get(choice)
            self.last[choice] = t
        if first:
            self.m.ttft.labels(self.endpoint).observe(t - self.arrived)
            self.m.vllm_ttft.labels(self.m.model).observe(t - self.arrived)
        elif prev is not None:
            self.m.itl.labels(self.endpoint).observe(t - prev)
            self.m.vllm_itl.labels(self.m.model).observe(t - prev)


class _Requests(Collector):
    """vLLM's running / waiting request gauges, from the live OpenAI requests' timers."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self.m = metrics

    def collect(self):
        with self.m.lock:
            self.m.timers = [t for t in self.m.timers if t.live]
            live = list(self.m.timers)
        running = sum(1 for t in live if t.is_started)
        for name, value, help_ in (
            ("vllm:num_requests_running", running, "OpenAI requests whose generation is running."),
            ("vllm:num_requests_waiting", len(live) - running, "OpenAI requests waiting to start."),
        ):
            g = GaugeMetricFamily(name, help_, labels=["model_name"])
            g.add_metric([self.m.model], value)
            yield g


class _Live(Collector):
    """Counters and gauges read from the engine (and sandbox) when scraped."""

    def __init__(self, engine, sandbox) -> None:
        self.engine, self.sandbox = engine, sandbox

    def collect(self):
        eng = self.engine
        rt = eng.runtime
        blog = rt.batch.log
        yield CounterMetricFamily(
            "symphony_batches", "Forward passes fired by the batch scheduler.", value=blog.total_batches
        )
        yield CounterMetricFamily("symphony_batch_tokens", "Tokens run through the model.", value=blog.total_tokens)
        yield CounterMetricFamily(
            "symphony_batch_members", "pred calls served, summed over batches.", value=blog.total_members
        )
        yield GaugeMetricFamily("symphony_queue_depth", "pred calls waiting for a batch.", value=len(rt.batch.queued()))
        t = now()
        recent = sum(r.tokens for r in list(blog.records) if r.t_end >= t - RATE_WINDOW_S)
        yield GaugeMetricFamily(
            "symphony_tokens_per_second",
            f"Tokens per second over the last {RATE_WINDOW_S:g} s.",
            value=round(recent / RATE_WINDOW_S, 3),
        )
        kv = eng.kvfs.stats()
        for key, help_ in (
            ("pages_used", "KV pages in use."),
            ("pages_total", "KV pages in the pool."),
            ("pages_cached", "Free KV pages that hold cached prompts' K/V (the prefix cache)."),
            ("files", "Live KV files."),
            ("named_files", "Named KV files."),
        ):
            yield GaugeMetricFamily(f"symphony_kv_{key}", help_, value=kv[key])
        yield CounterMetricFamily(
            "symphony_prefix_cache_reused_tokens",
            "Prompt tokens whose K/V came from the prefix cache instead of the model.",
            value=kv["prefix_reused_tokens"],
        )
        procs = GaugeMetricFamily("symphony_processes", "LIP processes by status.", labels=["status"])
        status = Counter(p.status for p in list(rt.processes.values()))
        for s, c in sorted(status.items()) or [("running", 0)]:
            procs.add_metric([s], c)
        yield procs
        if self.sandbox is not None:
            yield GaugeMetricFamily(
                "symphony_sandbox_workers", "Sandboxed worker processes alive.", value=self.sandbox.live_workers()
            )
            yield CounterMetricFamily(
                "symphony_sandbox_workers_started", "Sandboxed workers started.", value=self.sandbox.started_total
            )


class ServerMetrics:
    """The server's metrics registry (one per server, not the process-global default)."""

    def __init__(self, engine, sandbox=None, model_name: str | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.model = model_name or engine.model_name
        self.lock = threading.Lock()
        self.timers: list[RequestTimer] = []
        self._vllm_metrics(r)
        self.batch_size = Histogram(
            "symphony_batch_size", "pred calls fused into one forward pass.", buckets=BATCH_SIZE_BUCKETS, registry=r
        )
        self.queue_time = Histogram(
            "symphony_request_queue_time_seconds",
            "OpenAI request arrival to its LIP running.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "symphony_time_to_first_token_seconds",
            "OpenAI request arrival to its first token.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "symphony_inter_token_latency_seconds",
            "Time between a choice's successive tokens.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.requests = PromCounter(
            "symphony_openai_requests", "OpenAI-compatible requests started.", ["endpoint"], registry=r
        )
        r.register(_Live(engine, sandbox))
        r.register(_Requests(self))
        ProcessCollector(registry=r)
        self.gc = GCPauses()
        r.register(self.gc)
        blog = engine.runtime.batch.log
        for rec in list(blog.records):  # batches fired before the server started
            self.batch_size.observe(rec.size)
        blog.observers.append(self._on_batch)

    def _on_batch(self, rec) -> None:
        self.batch_size.observe(rec.size)

    def _vllm_metrics(self, r: CollectorRegistry) -> None:
        lbl = ["model_name"]
        self.vllm_e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "OpenAI request arrival to its end.",
            lbl,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.vllm_ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Arrival to the first token.", lbl, buckets=LATENCY_BUCKETS, registry=r
        )
        self.vllm_itl = Histogram(
            "vllm:inter_token_latency_seconds", "Between successive tokens.", lbl, buckets=LATENCY_BUCKETS, registry=r
        )
        self.vllm_queue = Histogram(
            "vllm:request_queue_time_seconds", "Arrival to running.", lbl, buckets=LATENCY_BUCKETS, registry=r
        )
        self.vllm_prompt = PromCounter("vllm:prompt_tokens", "Prompt tokens of finished requests.", lbl, registry=r)
        self.vllm_generation = PromCounter(
            "vllm:generation_tokens", "Generated tokens of finished requests.", lbl, registry=r
        )
        self.vllm_success = PromCounter(
            "vllm:request_success",
            "Finished requests' choices by finish reason.",
            [*lbl, "finished_reason"],
            registry=r,
        )

    def request_timer(self, endpoint: str, arrived: float) -> RequestTimer:
        self.requests.labels(endpoint).inc()
        t = RequestTimer(self, endpoint, arrived)
        with self.lock:
            self.timers.append(t)
        return t


def render_metrics(state) -> str:
    return generate_latest(state.metrics.registry).decode()

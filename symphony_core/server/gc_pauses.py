"""Python's garbage collector in the server: the heap it starts on frozen, every collection's pause counted.

A collection of the oldest generation walks every object the collector tracks, holding the GIL all the
while: no program, batch or request moves. With torch, transformers and the server loaded that is
~190,000 objects, and serving brings one on every minute or so: eight streamed q4 chats at a time for 120 s
on a 2-core Zen 4 EPYC ran two, ~71 ms each; with the heap frozen, one of 10 ms. So `symphony serve`
freezes the heap once it has started (`gc.freeze()`, as vLLM does after its start-up): collections skip
those objects from then on, and reference counting frees them as ever; only cycles among them stay,
which is what a process that lives as long as its one engine can afford. `SYMPHONY_FREEZE_HEAP=0` keeps Python's default.

Only the server does this. A library that froze the heap of a process it does not own would keep the
cycles of every engine shut down beside another (their weights with them) until something thawed it;
and a greenlet runner's thread that ended while its hub was frozen left a greenlet that the next full
collection read freed (a crash), which the server cannot meet: its programs run on OS threads.

`/metrics` has every collection's pause by generation (`symphony_gc_pause_seconds`) and the frozen
objects (`symphony_gc_frozen_objects`).
"""

from __future__ import annotations

import bisect
import gc
import itertools
import os
import time
import weakref

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

PAUSE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


def freeze_startup_heap() -> int:
    """Collect what is garbage now and freeze the rest; the number of objects frozen (0: turned off)."""
    if os.environ.get("SYMPHONY_FREEZE_HEAP", "1") == "0":
        return 0
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class GCPauses(Collector):
    """Counts each collection's pause into per-generation buckets from a `gc.callbacks` hook (plain
    integers: the hook runs inside the collector, where taking a metric's lock could deadlock against
    the thread whose allocation started the collection), read as histograms when scraped."""

    def __init__(self) -> None:
        self._started = 0.0
        self._counts = [[0] * (len(PAUSE_BUCKETS) + 1) for _ in range(3)]  # the last: above every bucket
        self._sums = [0.0, 0.0, 0.0]
        # The hook holds its collector weakly: a server's app dropped without its lifespan's end (a test's)
        # leaves a hook that does nothing, pruned here by the next one.
        gc.callbacks[:] = [cb for cb in gc.callbacks if getattr(cb, "pauses_of", lambda: True)() is not None]
        ref = weakref.ref(self)

        def hook(phase: str, info: dict) -> None:
            me = ref()
            if me is not None:
                me._observe(phase, info)

        hook.pauses_of = ref  # type: ignore[attr-defined]
        self._hook = hook
        gc.callbacks.append(hook)

    def close(self) -> None:
        if self._hook in gc.callbacks:
            gc.callbacks.remove(self._hook)

    def _observe(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause, g = time.perf_counter() - self._started, info["generation"]
        self._counts[g][bisect.bisect_left(PAUSE_BUCKETS, pause)] += 1
        self._sums[g] += pause

    def collect(self):
        h = HistogramMetricFamily(
            "symphony_gc_pause_seconds",
            "Python garbage collections' pauses (the GIL held throughout), by generation (2: a full one).",
            labels=["generation"],
        )
        les = (*map(str, PAUSE_BUCKETS), "+Inf")
        for g in range(3):
            h.add_metric([str(g)], list(zip(les, itertools.accumulate(self._counts[g]))), self._sums[g])
        yield h
        yield GaugeMetricFamily(
            "symphony_gc_frozen_objects",
            "Objects frozen out of the collector's walks at start-up (gc.freeze).",
            value=gc.get_freeze_count(),
        )

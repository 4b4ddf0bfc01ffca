"""Python's garbage collector in the server (symphony_core/server/gc_pauses.py): the start-up heap frozen
out of full collections, and every collection's pause in /metrics."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import textwrap

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from symphony_core.server.gc_pauses import PAUSE_BUCKETS, GCPauses

FREEZE = textwrap.dedent(
    """
    import gc, time
    import symphony_core
    import torch, transformers
    from symphony_core.server import app  # the server's own modules
    from symphony_core.server.gc_pauses import freeze_startup_heap

    def full_ms():
        t = time.perf_counter()
        gc.collect()
        return 1e3 * (time.perf_counter() - t)

    before = min(full_ms() for _ in range(2))
    frozen = freeze_startup_heap()
    after = min(full_ms() for _ in range(2))
    print(f"frozen {frozen} count {gc.get_freeze_count()} before {before:.2f} after {after:.2f}")
    """
)


def _freeze(env_extra: dict[str, str]) -> tuple[int, int, float, float]:
    env = {k: v for k, v in os.environ.items() if k != "SYMPHONY_FREEZE_HEAP"} | env_extra
    proc = subprocess.run([sys.executable, "-c", FREEZE], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.search(r"frozen (\d+) count (\d+) before ([\d.]+) after ([\d.]+)", proc.stdout)
    assert m, proc.stdout
    return int(m[1]), int(m[2]), float(m[3]), float(m[4])


def test_the_frozen_start_up_heap_leaves_full_collections_little_to_walk():
    frozen, count, before, after = _freeze({})
    assert frozen == count > 50_000  # torch, transformers and the server's modules
    assert after < before / 5, (before, after)


def test_freezing_can_be_turned_off():
    frozen, count, before, after = _freeze({"SYMPHONY_FREEZE_HEAP": "0"})
    assert frozen == count == 0


def _histogram(reg: CollectorRegistry) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        if fam.name == "symphony_gc_pause_seconds":
            for s in fam.samples:
                g = out.setdefault(s.labels["generation"], {"buckets": []})
                if s.name.endswith("_bucket"):
                    g["buckets"].append((float(s.labels["le"]), s.value))
                else:
                    g[s.name.rsplit("_", 1)[1]] = s.value
    return out


def test_every_collection_is_counted_by_generation_into_cumulative_buckets():
    pauses = GCPauses()
    reg = CollectorRegistry()
    reg.register(pauses)
    try:
        start = _histogram(reg)
        gc.collect(0)
        gc.collect()
        gc.collect()
        h = _histogram(reg)
        assert h["2"]["count"] - start["2"]["count"] == 2
        assert h["0"]["count"] - start["0"]["count"] >= 1
        for g in h.values():
            les = [le for le, _ in g["buckets"]]
            counts = [n for _, n in g["buckets"]]
            assert les == [*PAUSE_BUCKETS, float("inf")]
            assert counts == sorted(counts) and counts[-1] == g["count"]  # cumulative, +Inf holds all
        assert h["2"]["sum"] > start["2"]["sum"]
    finally:
        pauses.close()
    n = _histogram(reg)["2"]["count"]
    gc.collect()
    assert _histogram(reg)["2"]["count"] == n  # closed: its hook is gone


def test_a_dropped_collector_leaves_no_working_hook():
    before = len(gc.callbacks)
    GCPauses()  # dropped at once (an app that never ran its lifespan's end)
    gc.collect()
    keep = GCPauses()  # prunes the dead one's hook
    try:
        assert len(gc.callbacks) == before + 1
    finally:
        keep.close()
    assert len(gc.callbacks) == before

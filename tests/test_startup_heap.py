"""A runtime freezes the heap it starts on, so full collections skip it (symphony_core/startup_heap.py).

Each case runs in an interpreter of its own: the freeze is process-wide, and other tests' engines
would hold it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import gc, time, weakref
    import symphony_core
    from symphony_core import Engine

    class Marker:  # a tracked object made before any runtime starts
        pass

    marker = Marker()
    seen = lambda obj: any(o is obj for o in gc.get_objects())
    a = Engine(num_pages=64)
    t = time.perf_counter()
    gc.collect()
    full_before = time.perf_counter() - t
    assert seen(marker)
    a.runtime  # starts the runtime
    frozen = gc.get_freeze_count()
    print("frozen", frozen, "visible", seen(marker))
    t = time.perf_counter()
    gc.collect()
    full_after = time.perf_counter() - t
    print(f"full collection ms before {full_before * 1e3:.1f} after {full_after * 1e3:.1f}")
    # Programs still run, and what they make is collected as usual.
    def lip(sym):
        kv = sym.kv_create()
        return sym.pred(kv, sym.tokenize("Hello")).argmax()
    assert isinstance(a.run(lip).result(timeout=60), int)

    # A second engine up; the first shut down and dropped: it is reclaimed at the next start or
    # shutdown, although the heap it was part of had been frozen.
    b = Engine(num_pages=64)
    b.runtime
    gone = weakref.ref(a.runtime)
    a.shutdown()
    del a
    b.shutdown()
    print("first runtime reclaimed", gone() is None)
    print("frozen after the last shutdown", gc.get_freeze_count())
    """
)


def _run(env_extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "SYMPHONY_FREEZE_HEAP"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env={**env, **env_extra}
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def test_a_runtime_freezes_the_startup_heap_and_the_last_shutdown_thaws_it():
    out = _run({})
    frozen = int(out.split("frozen ")[1].split()[0])
    assert frozen > 50_000, out  # torch, transformers and the engine: out of the collector's sight
    assert "visible False" in out, out
    before, after = map(float, re.search(r"before ([\d.]+) after ([\d.]+)", out).groups())
    assert after < before / 5, out  # a full collection walks only what was made since
    assert "first runtime reclaimed True" in out, out
    assert "frozen after the last shutdown 0" in out, out


def test_freezing_can_be_turned_off():
    out = _run({"SYMPHONY_FREEZE_HEAP": "0"})
    assert "frozen 0 visible True" in out, out
    assert "frozen after the last shutdown 0" in out, out


GREENLETS = textwrap.dedent(
    """
    import gc
    import symphony_core
    from symphony_core import Engine

    def lip(sym, n):
        kv = sym.kv_create()
        for _ in range(n):
            sym.pred(kv, [1])
        sym.kv_close(kv)

    for round in range(2):
        eng = Engine(num_pages=256, lip_runner="greenlets")
        unsubscribe = eng.bus.subscribe(lambda ev: None)
        for p in [eng.run(lip, 8) for _ in range(16)]:
            p.result(timeout=120)
        unsubscribe()
        eng.shutdown()  # the scheduler's thread, and the greenlets' main one, are gone
        gc.collect()  # walks the hub: it must hold nothing of that thread
    print("ok")
    """
)


def test_a_full_collection_after_a_greenlet_runtime_ends_does_not_crash():
    proc = subprocess.run([sys.executable, "-c", GREENLETS], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, (proc.returncode, proc.stderr[-3000:])

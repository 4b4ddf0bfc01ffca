"""Python's full garbage collections, kept off the serving path: a runtime freezes the heap it starts on.

A collection of the oldest generation walks every object the collector tracks, holding the GIL all the
while. Once torch and transformers are imported that is ~170,000 objects, 88-90 ms on a 2-core Zen 4,
during which no program, batch or request moves; the allocations of serving bring one on every few
hundred batches (W5's stub run: one every ~500 batches of 64, +0.9 ms on each of those batches' host
time). `gc.freeze()` moves every object alive into a permanent generation that collections skip
(reference counting still frees them as ever), so a full collection walks only what was made since:
a fraction of a millisecond. Serving engines do the same after start-up (vLLM, SGLang).

The catch is cyclic garbage among frozen objects: it stays until they are unfrozen. So every start and
shutdown of a runtime unfreezes, collects and freezes again while a runtime is up: an engine shut down
and dropped is reclaimed at the next start or shutdown, and the last shutdown leaves nothing frozen.
`SYMPHONY_FREEZE_HEAP=0` turns this off (the collector then walks the whole heap as Python's default).
"""

from __future__ import annotations

import gc
import os
import threading

_lock = threading.Lock()
_holders = 0  # runtimes up that froze the heap


def enabled() -> bool:
    return os.environ.get("SYMPHONY_FREEZE_HEAP", "1") != "0"


def hold() -> bool:
    """A runtime starts: collect what is garbage now and freeze the rest. True if this froze (then
    `release` when the runtime shuts down)."""
    global _holders
    if not enabled():
        return False
    with _lock:
        _holders += 1
        _refreeze()
    return True


def release() -> None:
    """A runtime that `hold` froze for shuts down: its cycles become collectable again."""
    global _holders
    with _lock:
        _holders = max(0, _holders - 1)
        _refreeze()


def _refreeze() -> None:
    gc.unfreeze()
    gc.collect()
    if _holders:
        gc.freeze()

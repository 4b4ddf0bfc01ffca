"""Profile programs on an engine: `profile_run(engine, fn, ...)` runs one and returns
(result, Profile); `profile_engine(engine)` is a context manager around any code."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .collect import ProfileCollector
from .profile import Profile


@contextmanager
def profile_engine(engine: Any, pids: set[int] | None = None, interval: float = 0.005) -> Iterator[ProfileCollector]:
    """Profile every program (or those of `pids`) the engine runs inside the block; read
    `collector.profile()` in or after it."""
    col = ProfileCollector(pids, interval=interval).attach(engine.bus)
    try:
        yield col
    finally:
        col.detach()


def profile_run(
    engine: Any, fn: Callable, *args: Any, timeout: float | None = 600, interval: float = 0.005, **kwargs: Any
) -> tuple[Any, Profile]:
    """Run `fn` as a LIP on `engine` under the profiler; returns its result and its profile."""
    with profile_engine(engine, interval=interval) as col:
        proc = engine.run(fn, *args, **kwargs)
        col.pids = {proc.pid}
        result = proc.result(timeout=timeout)
        col.wait_ended(proc.pid)
    return result, col.profile()

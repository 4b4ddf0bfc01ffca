"""Views as data: the KV fork tree, the scheduler timeline and the Chrome trace of the run, as
JSON-serialisable snapshots and as live "view" event streams (`watch`).

One part of `Debugger`, composed through an explicit interface rather than mixed in: it is
given the engine's runtime and tokenizer, the files the debugger has seen (`known_files`, so a
fork's ancestry reads through closed files), the trace the debugger keeps, where to emit
events and how to tell that the debugger is still attached. The core tells it what changed
(`changed`); the Debugger's `kv_tree` / `timeline` / `trace` / `watch` / `unwatch` commands hand on
to it. The JSON shapes are built in viewdata.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from symphony_core.events import now

from . import viewdata as ins
from .errors import DebuggerError
from .trace import chrome_trace

log = logging.getLogger(__name__)


class Views:
    def __init__(
        self,
        runtime,
        tokenizer,
        known_files: dict[int, dict],
        trace_events: deque,
        emit: Callable[[str, dict], None],
        attached: Callable[[], bool],
    ) -> None:
        self.runtime = runtime
        self.tokenizer = tokenizer
        self.known_files = known_files
        self.trace_events = trace_events
        self.emit = emit
        self.attached = attached
        self._lock = threading.Lock()
        self._watch: dict[str, float] = {}
        self._dirty: set[str] = set()  # views changed since they were last sent
        self._thread: threading.Thread | None = None

    def keep(self, ev) -> None:
        """Keep a bus event in the trace; note the KV files it created (for `known_files`)."""
        kind = ev.kind
        # Syscall events are kept as flat tuples of atoms (args as their repr): holding the Event
        # objects themselves costs ~10 us each in garbage-collector work at this volume.
        if kind == "syscall_enter":
            self.trace_events.append((kind, ev.ts, ev.pid, ev.tid, ev.call, ev.seq, ev.file, ev.line, repr(ev.args)))
        elif kind == "syscall_exit":
            self.trace_events.append((kind, ev.ts, ev.pid, ev.tid, ev.call, ev.seq, repr(ev.result), ev.error))
            if ev.call in ("kv_create", "kv_fork", "kv_open") and isinstance(ev.result, dict) and "file" in ev.result:
                self.known_files[ev.result["file"]] = {
                    "parent": ev.args.get("file") if ev.call == "kv_fork" else None,
                    "path": ev.args.get("path"),
                }
        else:
            self.trace_events.append(ev)

    @property
    def watching(self) -> bool:
        return bool(self._watch)

    def changed(self, *views: str) -> None:
        """The engine moved in a way these views show (called by the debugger's bus subscriber)."""
        self._dirty.update(views)

    def kv_tree(self, with_text: bool = True) -> dict:
        """The KV fork tree: every live file (pages, sharing, holders) and the fork edges."""
        return ins.kv_tree(self.runtime, self.tokenizer, self.known_files, with_text)

    def timeline(self, since: int = 0, limit: int = 500) -> dict:
        """The batch scheduler's log from batch `since` on: each forward pass, its members and times."""
        return ins.timeline(self.runtime, since, limit)

    def trace(self, path: str | None = None) -> dict:
        """The run since attach as a Chrome trace (dict); also written to `path` if given."""
        names = {pid: p.name for pid, p in list(self.runtime.processes.items())}
        tr = chrome_trace(list(self.trace_events), names, now())
        if path is not None:
            import json

            with open(path, "w") as f:
                json.dump(tr, f)
        return tr

    def watch(self, view: str, interval: float = 0.25) -> dict:
        """Stream a view ("kv_tree" or "timeline") as "view" events, at most every `interval` s."""
        if view not in ("kv_tree", "timeline"):
            raise DebuggerError(f"unknown view {view!r} (kv_tree, timeline)")
        with self._lock:
            self._watch[view] = max(0.02, float(interval))
            self._dirty.add(view)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="symphony-lab-views", daemon=True)
                self._thread.start()
        return {"watching": sorted(self._watch)}

    def unwatch(self, view: str | None = None) -> dict:
        """Stop streaming `view` (None: every view)."""
        with self._lock:
            if view is None:
                self._watch.clear()
            else:
                self._watch.pop(view, None)
        return {"watching": sorted(self._watch)}

    def _loop(self) -> None:
        last: dict[str, float] = {}
        failing: set[str] = set()  # views whose last build failed (logged once a spell)
        while self.attached() and self._watch:
            t = time.monotonic()
            for view, every in list(self._watch.items()):
                if view in self._dirty and t - last.get(view, 0.0) >= every:
                    self._dirty.discard(view)
                    last[view] = t
                    try:
                        data = self.kv_tree() if view == "kv_tree" else self.timeline(limit=100)
                        self.emit("view", {"view": view, "data": data})
                        failing.discard(view)
                    except Exception:  # the engine moved under it: marked again, it is sent next round
                        if view not in failing:
                            log.warning("the %s view could not be built; retrying", view, exc_info=True)
                        failing.add(view)
                        self._dirty.add(view)
            time.sleep(0.02)


__all__ = ["Views"]

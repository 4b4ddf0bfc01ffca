"""Views as data: the KV fork tree, the scheduler timeline and the Chrome trace of the run, as
JSON-serialisable snapshots and as live "view" event streams (`watch`).

The `Views` part of `Debugger` reads the engine through `inspect.py`; the trace is built from
the events the debugger's bus subscriber keeps (`_trace`).
"""

from __future__ import annotations

import threading
import time

from symphony_core.events import now

from . import inspect as ins
from .errors import DebuggerError
from .trace import chrome_trace


class Views:
    """The view commands of `Debugger` (state set up in `_init_views`)."""

    def _init_views(self) -> None:
        self._watch: dict[str, float] = {}
        self._dirty: set[str] = set()  # views changed since they were last sent
        self._view_thread: threading.Thread | None = None

    def kv_tree(self, with_text: bool = True) -> dict:
        return ins.kv_tree(self.runtime, self.tokenizer, self._known_files, with_text)

    def timeline(self, since: int = 0, limit: int = 500) -> dict:
        return ins.timeline(self.runtime, since, limit)

    def trace(self, path: str | None = None) -> dict:
        """The run since attach as a Chrome trace (dict); also written to `path` if given."""
        names = {pid: p.name for pid, p in list(self.runtime.processes.items())}
        tr = chrome_trace(list(self._trace), names, now())
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
            if self._view_thread is None or not self._view_thread.is_alive():
                self._view_thread = threading.Thread(target=self._view_loop, name="symphony-lab-views", daemon=True)
                self._view_thread.start()
        return {"watching": sorted(self._watch)}

    def unwatch(self, view: str | None = None) -> dict:
        with self._lock:
            if view is None:
                self._watch.clear()
            else:
                self._watch.pop(view, None)
        return {"watching": sorted(self._watch)}

    def _view_loop(self) -> None:
        last: dict[str, float] = {}
        while self._attached and self._watch:
            t = time.monotonic()
            for view, every in list(self._watch.items()):
                if view in self._dirty and t - last.get(view, 0.0) >= every:
                    self._dirty.discard(view)
                    last[view] = t
                    try:
                        data = self.kv_tree() if view == "kv_tree" else self.timeline(limit=100)
                        self._emit("view", {"view": view, "data": data})
                    except Exception:
                        pass
            time.sleep(0.02)


__all__ = ["Views"]

"""The notebook's view pump: pushes fresh views to the widgets and the sidebar while something
changes (a background thread, so views move while a cell runs or a LIP is stopped).

Events mark what changed (`mark_dirty`: one run's process, or everything); every `VIEW_INTERVAL`
the pump rebuilds the marked views (notebook/views.py) and sets them on the widgets, and
broadcasts the whole-engine view to sidebar clients. A view that fails to build (the engine
moved under it) stays marked and is built again next round — a stopped process sends no further
event, so a dropped update would never be redone — and the widget says so meanwhile: its view
keeps the last good one with `view_error` set (cleared by the next good one).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import TYPE_CHECKING

from symphony_core.events import now

if TYPE_CHECKING:
    from .lab import Lab

VIEW_INTERVAL = 0.2  # seconds between view refreshes while something changes
log = logging.getLogger(__name__)

GLOBAL_WIDGETS: weakref.WeakSet = weakref.WeakSet()  # the whole-engine widgets (`lab.views()`)


def with_error(view: dict, what: str, e: BaseException) -> dict:
    """The last good `view`, saying why it is not refreshed."""
    return {**view, "view_error": f"{what} could not be refreshed: {type(e).__name__}: {e}"}


class ViewPump:
    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self._lock = threading.Lock()
        self._dirty_pids: set[int] = set()
        self._global_dirty = True
        self._failing: dict[int | None, str] = {}  # view (pid; None: the lab view) -> its error, while it fails

    def start(self) -> None:
        threading.Thread(target=self._loop, name="symphony-lab-views", daemon=True).start()

    def mark_dirty(self, pid: int | None) -> None:
        """Process `pid`'s run view changed (None: every view)."""
        with self._lock:
            self._global_dirty = True
            if pid is None:
                self._dirty_pids.update(self.lab._runs)
            else:
                self._dirty_pids.add(pid)

    def _failed(self, key: int | None, what: str, e: BaseException) -> None:
        first = key not in self._failing
        self._failing[key] = str(e)
        if first:  # once per spell of failures: the pump retries every round
            log.warning("%s failed to build; retrying", what, exc_info=True)

    def push_run(self, pid: int) -> bool:
        """Set process `pid`'s run view on its widget; False if it failed to build."""
        run = self.lab._runs.get(pid)
        if run is None or run._widget is None or run.pid != pid:
            return True
        try:
            run._widget.view = self.lab.run_views.run_view(run)
        except Exception as e:  # whatever broke, the widget shows it and the next round retries
            self._failed(pid, f"the view of process {pid}", e)
            run._widget.view = with_error(run._widget.view, f"the view of process {pid}", e)
            return False
        self._failing.pop(pid, None)
        return True

    def push_lab(self) -> bool:
        """Set the whole-engine view on its widgets and send it to sidebar clients; False if it failed."""
        lab = self.lab
        try:
            view = lab.run_views.lab_view()
        except Exception as e:  # as in push_run
            self._failed(None, "the lab view", e)
            for w in list(GLOBAL_WIDGETS):
                w.view = with_error(w.view, "the lab view", e)
            return False
        self._failing.pop(None, None)
        for w in list(GLOBAL_WIDGETS):
            w.view = view
        if lab.bridge is not None and lab.bridge.n_clients:
            lab.bridge.broadcast({"type": "event", "event": "lab_view", "seq": 0, "ts": now(), "body": view})
        return True

    def _loop(self) -> None:
        while not self.lab._closed:
            time.sleep(VIEW_INTERVAL)
            with self._lock:
                pids, self._dirty_pids = self._dirty_pids, set()
                glob, self._global_dirty = self._global_dirty, False
            failed = {pid for pid in pids if not self.push_run(pid)}
            lab_failed = glob and not self.push_lab()
            if failed or lab_failed:
                with self._lock:
                    self._dirty_pids.update(failed)
                    self._global_dirty = self._global_dirty or lab_failed


__all__ = ["GLOBAL_WIDGETS", "VIEW_INTERVAL", "ViewPump", "with_error"]

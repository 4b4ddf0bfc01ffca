"""Follow-up commands an event calls for (passing over a line breakpoint's stop, going on with a
step), and the notices the TUI shows when one fails.

In-process, an event arrives on the LIP's own thread before the LIP goes on, so the follow-up
runs right there; over a connection, the event arrives on the connection's reader, which must
not wait for a response, so the follow-up runs on a thread of its own. Either way a follow-up
that fails is logged and kept as a notice: the session hands the notices to the app with its
next state (`take`), and the app shows them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Notices:
    """What failed out of the user's sight (on a background thread), for the app to show."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[str] = []

    def add(self, text: str) -> None:
        with self._lock:
            self._items.append(text)

    def take(self) -> list[str]:
        """The notices since the last call (each is shown once)."""
        with self._lock:
            items, self._items = self._items, []
        return items


class Reactor:
    """Runs follow-ups inline (`sync`) or on one background thread, in the order they came."""

    def __init__(self, sync: bool, notices: Notices) -> None:
        self.sync = sync
        self.notices = notices
        self._todo: list[tuple[str, Callable[[], None]]] = []
        self._cv = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not self.sync and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="symphony-lab-tui-react", daemon=True)
            self._thread.start()

    def submit(self, what: str, fn: Callable[[], None]) -> None:
        """Run `fn` (described as `what` if it fails)."""
        if self.sync:
            self._run(what, fn)
            return
        with self._cv:
            self._todo.append((what, fn))
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def _run(self, what: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as e:  # any failure of a follow-up is the user's to see, not the event source's to die of
            log.warning("TUI follow-up failed: %s", what, exc_info=True)
            self.notices.add(f"{what} failed: {type(e).__name__}: {e}")

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._todo and not self._closed:
                    self._cv.wait(0.2)
                if self._closed:
                    return
                todo, self._todo = self._todo, []
            for what, fn in todo:
                self._run(what, fn)


__all__ = ["Notices", "Reactor"]

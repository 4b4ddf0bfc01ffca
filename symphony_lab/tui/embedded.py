"""The embedded session: an engine in this process, a `Debugger` attached, the LIP launched.

Loading the model takes seconds, so it happens in `start()` (the TUI runs it on a worker and
shows "loading" meanwhile). Everything after goes through the debugger's protocol; the two
helpers handed to `DebuggerSession` — token text and a failed LIP's traceback — use the
debugger's public in-process API (`Debugger.tokenizer`, `Debugger.process`) because the
protocol does not carry them yet.
"""

from __future__ import annotations

import logging
from typing import Any

from ..debugger.errors import DebuggerError
from .debug_session import DebuggerSession, load_file, resolve_target

log = logging.getLogger(__name__)


def _traceback_of(dbg):
    def tb(pid: int) -> str | None:
        err = dbg.process(pid).error
        return getattr(err, "traceback_text", None) or (str(err) if err is not None else None)

    return tb


class EmbeddedSession(DebuggerSession):
    """`symphony-lab tui FILE:FUNC [args]`: own an engine, debug one program in it.

    Pass `engine=` to reuse one (tests, notebooks); otherwise one is built from
    `engine_options` (model, device, num_pages …) when the session starts.
    """

    def __init__(
        self,
        target: str,
        args: tuple = (),
        kwargs: dict | None = None,
        *,
        engine=None,
        engine_options: dict | None = None,
        stop_on_entry: bool = True,
        debugger_options: dict | None = None,
        title: str | None = None,
    ) -> None:
        fn_ref, path = resolve_target(target)
        super().__init__(
            None, fn_ref, args, kwargs, title=title or target, program_file=path, stop_on_entry=stop_on_entry
        )
        self.engine = engine
        self._own_engine = engine is None
        self.engine_options = dict(engine_options or {})
        self.debugger_options = dict(debugger_options or {})
        self.status = "loading the model…" if engine is None else ""

    def start(self) -> None:
        from symphony_lab.debugger import Debugger

        if self.engine is None:
            from symphony_core import Engine

            self.engine = Engine(**self.engine_options)
        self.dbg = Debugger(self.engine, **self.debugger_options)
        self._remote = False
        self._sync = True
        self._token_text = self.dbg.tokenizer.token_text
        self._traceback_of = _traceback_of(self.dbg)
        self.status = ""
        super().start()

    def relaunch(self, pid: int | None = None) -> dict:
        """Run the program again — re-reading its file first, so an edit made meanwhile runs
        (the old process, if it still runs, is cancelled)."""
        if self.program_file is None or self.dbg is None:
            return super().relaunch(pid)
        load_file(self.program_file, reload=True)
        old = pid if pid is not None else self.pid
        r = self.request(
            "launch",
            fn=self.target,
            args=list(self.args),
            kwargs=self.kwargs,
            stop_on_entry=self.stop_on_entry,
            record=True,
        )
        if old is not None:
            try:
                self.dbg.process(old).cancel("relaunched")  # no protocol verb for this yet
            except DebuggerError:  # the old process is gone already: nothing to cancel
                log.debug("relaunch: process %s was gone already", old)
        self._adopt(r["pid"])
        return {**r, "focus": [r["pid"], 1]}

    def state(self) -> dict[str, Any]:
        if self.dbg is None:
            return {"processes": [], "stops": [], "program_file": self.program_file, "loading": self.status}
        return super().state()

    def close(self) -> None:
        super().close()
        if self.dbg is not None:
            try:
                self.dbg.detach()
            except Exception:  # closing goes on: the engine and the processes below must still be let go
                log.warning("detaching the TUI's debugger failed", exc_info=True)
            if not self._own_engine:  # a shared engine goes on: end what this session launched
                for pid in list(self.pids):
                    try:
                        self.dbg.process(pid).cancel("the TUI session closed")
                    except DebuggerError:  # it ended, and the runtime let it go
                        log.debug("close: process %s was gone already", pid)
        if self._own_engine and self.engine is not None:
            self.engine.shutdown()

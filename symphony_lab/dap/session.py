"""One DAP session: an editor's requests in, the debugger's commands out, its events back as DAP events.

Requests and the debugger's events go through one queue and are handled one at a time on the
session's thread, so a request's response always goes out before the events it causes (DAP
asks for a `next`'s response before its `stopped` event) and no LIP thread ever waits on the
editor. The mapping (docs/ide.md):

- threads are the program's threads (DAP thread id = the LIP's tid); the program is one process,
  which a step back replaces by its replay (the session follows it);
- a step is the debugger's: `stepIn` = `step` (one pred, into spawned threads), `next` =
  `step_over`, `stepOut` = `step_out`; `stepBack` / `reverseContinue` replay the recording into a
  new process stopped after an earlier pred (or on entry);
- stops on breakpoints that a condition, hit count or line rules out are resumed here at once.

The requests about one stop (stack, scopes, variables, setVariable, evaluate) are in
stop_requests.py; the debugger's events become DAP events in stop_events.py, which shares the
session's state through its public attributes (the stops shown, the step in flight, …).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from .backend import Backend, BackendError, make_backend
from .breakpoints import Breakpoints
from .capabilities import CAPABILITIES
from .config import ConfigError, DebugConfig, parse_config
from .console import ConsoleError
from .framing import Channel, FramingError
from .inspect_views import Handles
from .postmortem import PostMortem
from .stop_events import StopEvents
from .stop_requests import StopRequests

log = logging.getLogger(__name__)


class RequestError(Exception):
    """A request the session cannot carry out; its message becomes the error response's."""


class DapSession:
    """Serve one editor on `channel` until it disconnects. `engine`: run launches in this Engine
    (tests, an editor extension hosting one) instead of building one from the `engine` options."""

    def __init__(self, channel: Channel, *, engine=None, backend_factory: Callable[..., Backend] = make_backend):
        self.channel = channel
        self._engine = engine
        self._make_backend = backend_factory
        self.backend: Backend | None = None
        self.cfg: DebugConfig | None = None
        self.pid: int | None = None
        self.stops: dict[int, dict] = {}  # tid -> the debugger's stop the editor was shown
        self.last_dist: dict[int, tuple[dict, int]] = {}  # tid -> (its last pred's top-k view, preds)
        self.handles = Handles()
        self.bps = Breakpoints(self.request)
        self.postmortem: PostMortem | None = None
        self._inbox: queue.Queue = queue.Queue()
        self._unsub: Callable[[], None] | None = None
        self.entry_pending = False
        self.backing_from: set[int] = set()  # processes a step back replaced (their exit is not the end)
        self.replay_pid: int | None = None
        self.requested: set[int] = set()  # tids the editor resumed itself (no `continued` event for them)
        self.stepping: tuple[int, dict] | None = None  # the step in flight: (tid, its answer: after, step)
        self.step_asked = 0  # step requests sent and not yet answered
        self.ended = False
        self.status: str | None = None  # the program's, once it ended
        self._done = False
        self.stop_requests = StopRequests(self)
        self.events = StopEvents(self)

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        reader = threading.Thread(target=self._read_loop, name="symphony-dap-reader", daemon=True)
        reader.start()
        while not self._done:
            kind, msg = self._inbox.get()
            if kind == "eof":
                break
            try:
                if kind == "request":
                    self._dispatch(msg)
                else:
                    self.events.on_event(msg)
            except Exception as e:  # a bug here must not take the editor's session down
                self.output(f"symphony-lab dap: internal error: {type(e).__name__}: {e}\n", "stderr")
        self._shutdown()

    def _read_loop(self) -> None:
        try:
            while True:
                msg = self.channel.read()
                if msg is None:
                    break
                self._inbox.put(("request", msg))
        except (FramingError, OSError, ValueError) as e:
            self.output(f"symphony-lab dap: {e}\n", "stderr")
        self._inbox.put(("eof", None))

    def _shutdown(self) -> None:
        if self._unsub is not None:
            self._unsub()
            self._unsub = None
        if self.backend is not None:
            try:
                self.backend.close()
            except Exception:  # the session ends either way: what the backend failed to let go is logged
                log.warning("closing the DAP session's backend failed", exc_info=True)
            self.backend = None

    def request(self, command: str, **arguments: Any) -> Any:
        if self.backend is None:
            raise RequestError("no program yet: send launch or attach first")
        return self.backend.request(command, **arguments)

    def output(self, text: str, category: str = "console") -> None:
        self.channel.event("output", {"category": category, "output": text})

    def _dispatch(self, msg: dict) -> None:
        if msg.get("type") != "request" or not isinstance(msg.get("command"), str):
            self.channel.response(msg, error=f"expected a request with a command, got {str(msg)[:120]}")
            return
        command = msg["command"]
        handler = getattr(self, "on_" + command, None) or getattr(self.stop_requests, "on_" + command, None)
        if handler is None:
            self.channel.response(msg, error=f"symphony-lab dap does not support the {command!r} request")
            return
        args = msg.get("arguments") or {}
        try:
            if not isinstance(args, dict):
                raise RequestError("arguments must be a JSON object")
            body = handler(args)
        except (RequestError, ConfigError, BackendError, ConsoleError, ValueError, TimeoutError) as e:
            self.channel.response(msg, error=str(e) or type(e).__name__)
            return
        self.channel.response(msg, body)
        after = getattr(self, "after_" + command, None)
        if after is not None:
            after(args)

    # ------------------------------------------------------------------ set-up
    def on_initialize(self, args: dict) -> dict:
        return CAPABILITIES

    def _start(self, request: str, args: dict) -> None:
        if self.backend is not None:
            raise RequestError(f"{request}: this session already debugs a program")
        self.cfg = parse_config(request, args)
        self.backend = self._make_backend(self.cfg, self._engine)
        self._unsub = self.backend.subscribe(lambda m: self._inbox.put(("event", m)))

    def on_launch(self, args: dict) -> None:
        self._start("launch", args)

    def on_attach(self, args: dict) -> None:
        self._start("attach", args)
        assert self.cfg is not None and self.cfg.pid is not None
        procs = {p["pid"]: p for p in self.request("threads")["processes"]}
        if self.cfg.pid not in procs:
            raise RequestError(f"no running process {self.cfg.pid} that this token may debug")
        self.pid = self.cfg.pid
        self.bps.bind(self.pid)

    def after_launch(self, args: dict) -> None:
        self.channel.event("initialized")

    after_attach = after_launch

    def on_configurationDone(self, args: dict) -> None:
        if self.cfg is None or self.backend is None:
            raise RequestError("configurationDone before launch or attach")
        if self.cfg.request == "launch" and self.pid is None:
            self.entry_pending = True
            self.pid = self.backend.launch()
            self.bps.bind(self.pid)

    def after_configurationDone(self, args: dict) -> None:
        if self.cfg is not None and self.pid is not None:
            name = self.cfg.program or f"process {self.pid}"
            self.channel.event("process", {"name": name, "startMethod": self.cfg.request, "isLocalProcess": False})

    def on_setBreakpoints(self, args: dict) -> dict:
        path = (args.get("source") or {}).get("path")
        if not isinstance(path, str):
            raise RequestError("setBreakpoints needs source.path")
        specs = args.get("breakpoints")
        if specs is None:
            specs = [{"line": ln} for ln in args.get("lines") or []]
        return {"breakpoints": [b.to_dap() for b in self.bps.set_source(path, list(specs))]}

    def on_setFunctionBreakpoints(self, args: dict) -> dict:
        return {"breakpoints": [b.to_dap() for b in self.bps.set_functions(list(args.get("breakpoints") or []))]}

    def on_setExceptionBreakpoints(self, args: dict) -> dict:
        filters = set(args.get("filters") or [])
        unknown = filters - {"error", "limit"}
        if unknown:
            raise RequestError(f"unknown exception filter(s) {sorted(unknown)}; there are 'error' and 'limit'")
        self.bps.exception_filters = filters
        return {"breakpoints": [{"verified": True} for _ in filters]}

    # ------------------------------------------------------------------ execution
    def on_threads(self, args: dict) -> dict:
        if self.postmortem is not None:
            return {"threads": [{"id": self.postmortem.tid, "name": f"{self.postmortem.tid} (ended)"}]}
        if self.backend is None or self.pid is None:
            return {"threads": []}
        procs = self.request("threads")["processes"]
        proc = next((p for p in procs if p["pid"] == self.pid), None)
        if proc is None:
            return {"threads": []}
        return {
            "threads": [{"id": t["tid"], "name": f"{t['tid']} {t.get('name') or ''}".strip()} for t in proc["threads"]]
        }

    def _resumed(self, tids: list[int]) -> None:
        self.requested.update(tids)
        for t in tids:
            self.stops.pop(t, None)
        self.handles.reset()
        self.stop_requests.forget()

    def _stopped_tid(self, args: dict) -> int:
        tid = args.get("threadId")
        if not isinstance(tid, int) or tid not in self.stops:
            raise RequestError(f"thread {tid} is not stopped")
        return tid

    def on_continue(self, args: dict) -> dict:
        if self.postmortem is not None:
            self.postmortem = None
            return {"allThreadsContinued": True}
        r = self.request("continue", pid=self.pid)
        self._resumed([t for _, t in r["resumed"]])
        return {"allThreadsContinued": True}

    def after_continue(self, args: dict) -> None:
        if self.postmortem is None and self.ended:
            self.events.finish()

    def _step(self, args: dict, command: str) -> None:
        tid = self._stopped_tid(args)
        self.step_asked += 1  # its landing may come before the answer (a held thread it lands on at once)
        try:
            self.stepping = (tid, self.request(command, pid=self.pid, tid=tid))
        finally:
            self.step_asked -= 1
        self._resumed([tid])

    def on_next(self, args: dict) -> None:
        self._step(args, "step_over")

    def on_stepIn(self, args: dict) -> None:
        self._step(args, "step")

    def on_stepOut(self, args: dict) -> None:
        self._step(args, "step_out")

    def on_pause(self, args: dict) -> None:
        self.request("pause", pid=self.pid)

    def _back(self, tid: int, steps: int) -> None:
        assert self.pid is not None
        old = self.pid
        self.backing_from.add(old)
        try:
            r = self.request("step_back", pid=old, tid=tid, steps=steps)
        except Exception:
            self.backing_from.discard(old)
            raise
        self.replay_pid = r["pid"]
        self._resumed(list(self.stops))

    def on_stepBack(self, args: dict) -> None:
        tid = self._stopped_tid(args)
        self._back(tid, 1)

    def on_reverseContinue(self, args: dict) -> None:
        tid = self._stopped_tid(args)
        s = self.stops[tid]
        steps = int(s.get("preds") or 0) + (0 if (s.get("where"), s.get("call")) == ("after", "pred") else 1)
        if s.get("where") == "entry" or steps < 1:
            raise RequestError("already at the start of the recording")
        self._back(tid, steps)

    def on_terminate(self, args: dict) -> None:
        if self.backend is not None and self.pid is not None and not self.ended:
            self.backend.cancel(self.pid)

    def on_disconnect(self, args: dict) -> None:
        """A launched program ends with the session (unless `terminateDebuggee` is false); an
        attached one runs on, its breakpoints removed and its stopped threads resumed."""
        self._done = True
        if self.backend is None or self.pid is None or self.ended:
            return
        assert self.cfg is not None
        self.bps.unbind()
        if args.get("terminateDebuggee", self.cfg.request == "launch"):
            try:
                self.backend.cancel(self.pid)
            except BackendError as e:
                raise RequestError(f"disconnected, but the program still runs: {e}") from None
        else:
            self.quietly("continue", pid=self.pid)

    def on_exceptionInfo(self, args: dict) -> dict:
        if self.postmortem is None:
            raise RequestError("no exception: the program has not failed")
        return self.postmortem.info()

    # ------------------------------------------------------------------ the debugger's events
    def quietly(self, command: str, **arguments: Any) -> None:
        try:
            self.request(command, **arguments)
        except (BackendError, TimeoutError) as e:  # the thread was resumed or ended meanwhile
            log.debug("%s %s: %s", command, arguments, e)


__all__ = ["CAPABILITIES", "DapSession", "RequestError"]

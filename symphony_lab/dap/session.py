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

The requests about one stop (stack, scopes, variables, setVariable, evaluate) are in stop_requests.py.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from ..debugger.stepping import lands_on
from .backend import Backend, BackendError, make_backend
from .breakpoints import Breakpoints
from .capabilities import CAPABILITIES
from .config import ConfigError, DebugConfig, parse_config
from .console import ConsoleError
from .framing import Channel, FramingError
from .inspect_views import Handles, sent_text
from .postmortem import PostMortem, failure_of
from .stop_requests import StopRequests

log = logging.getLogger(__name__)
STOP_REASON = {"entry": "entry", "step": "step", "follow": "step", "pause": "pause", "diverged": "exception"}


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
        self._hits: dict[int, list[int]] = {}  # tid -> the breakpoints its stop hit
        self.last_dist: dict[int, tuple[dict, int]] = {}  # tid -> (its last pred's top-k view, preds)
        self.handles = Handles()
        self.bps = Breakpoints(self.request)
        self.postmortem: PostMortem | None = None
        self._inbox: queue.Queue = queue.Queue()
        self._unsub: Callable[[], None] | None = None
        self._entry_pending = False
        self._backing_from: set[int] = set()  # processes a step back replaced (their exit is not the end)
        self._replay_pid: int | None = None
        self._requested: set[int] = set()  # tids the editor resumed itself (no `continued` event for them)
        self._stepping: tuple[int, dict] | None = None  # the step in flight: (tid, its answer: after, step)
        self._landed_steps: set[int] = set()  # steps whose landing was shown
        self._step_asked = 0  # step requests sent and not yet answered
        self._ended = False
        self._status: str | None = None  # the program's, once it ended
        self._done = False
        self.stop_requests = StopRequests(self)

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
                    self._on_debugger_event(msg)
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
            self._entry_pending = True
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
        self._requested.update(tids)
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
        if self.postmortem is None and self._ended:
            self._finish()

    def _step(self, args: dict, command: str) -> None:
        tid = self._stopped_tid(args)
        self._step_asked += 1  # its landing may come before the answer (a held thread it lands on at once)
        try:
            self._stepping = (tid, self.request(command, pid=self.pid, tid=tid))
        finally:
            self._step_asked -= 1
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
        self._backing_from.add(old)
        try:
            r = self.request("step_back", pid=old, tid=tid, steps=steps)
        except Exception:
            self._backing_from.discard(old)
            raise
        self._replay_pid = r["pid"]
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
        if self.backend is not None and self.pid is not None and not self._ended:
            self.backend.cancel(self.pid)

    def on_disconnect(self, args: dict) -> None:
        """A launched program ends with the session (unless `terminateDebuggee` is false); an
        attached one runs on, its breakpoints removed and its stopped threads resumed."""
        self._done = True
        if self.backend is None or self.pid is None or self._ended:
            return
        assert self.cfg is not None
        self.bps.unbind()
        if args.get("terminateDebuggee", self.cfg.request == "launch"):
            try:
                self.backend.cancel(self.pid)
            except BackendError as e:
                raise RequestError(f"disconnected, but the program still runs: {e}") from None
        else:
            self._quietly("continue", pid=self.pid)

    def on_exceptionInfo(self, args: dict) -> dict:
        if self.postmortem is None:
            raise RequestError("no exception: the program has not failed")
        return self.postmortem.info()

    # ------------------------------------------------------------------ the debugger's events
    def _quietly(self, command: str, **arguments: Any) -> None:
        try:
            self.request(command, **arguments)
        except (BackendError, TimeoutError) as e:  # the thread was resumed or ended meanwhile
            log.debug("%s %s: %s", command, arguments, e)

    def _on_debugger_event(self, msg: dict) -> None:
        name, b = msg.get("event"), msg.get("body") or {}
        pid, tid = b.get("pid"), b.get("tid")
        if name == "stopped" and pid is not None and pid == self._replay_pid:
            self._replay_arrived(b)
            self._on_stop(b, back=True)
            return
        if name == "replay_diverged" and pid in (self.pid, self._replay_pid):
            self.output(
                f"the replay of thread {tid} diverged from the recording ({b.get('why')}): it runs live from here\n"
            )
        if pid != self.pid or self.pid is None or pid in self._backing_from:
            return  # another process, or the one a step back replaces (its threads' ends are not news)
        if name == "stopped":
            self._on_stop(b)
        elif name == "continued":
            if tid in self._requested:
                self._requested.discard(tid)
            elif self.stops.pop(tid, None) is not None:
                self.handles.reset()
                self.channel.event("continued", {"threadId": tid, "allThreadsContinued": False})
        elif name in ("thread_start", "thread_exit") and isinstance(tid, int):
            self.channel.event("thread", {"reason": "started" if name == "thread_start" else "exited", "threadId": tid})
        elif name == "syscall_enter" and b.get("call") == "send":
            self.output(sent_text((b.get("args") or {}).get("value")) + "\n", "stdout")
        elif name == "process_exit":
            self._on_exit(b)

    def _replay_arrived(self, b: dict) -> None:
        """The step back's replay stopped where it was sent: it is the program from now on."""
        self.pid, self._replay_pid = b["pid"], None
        self.stops.clear()
        self.bps.bind(self.pid)

    def _on_stop(self, b: dict, back: bool = False) -> None:
        """Show the editor stop `b`, or resume it here (a breakpoint ruled out, an entry not asked
        for). `back`: the stop a step back was heading for (the replay's temporary breakpoint)."""
        tid = b["tid"]
        reasons = ["step"] if back else b.get("reasons") or [b.get("reason")]
        known = (self.stops.get(tid) or {}).get("stop_id") == b.get("stop_id")  # re-announced: a join landed on it
        if known and self._stepping is None:
            self.stops[tid] = b  # shown already, and no step in flight to land on it: the focus is there
            return
        if "entry" in reasons and self._entry_pending:
            self._entry_pending = False
            if self.cfg is not None and not self.cfg.stop_on_entry:
                self._quietly("continue", pid=self.pid, tid=tid)
                return
        hit: list[int] = self._hits.get(tid, []) if known else []
        if "breakpoint" in reasons and not known:
            path = self.backend.local_path(b.get("file")) if self.backend else None
            hit, errors = self.bps.decide(b, path, lambda: self.stop_requests.condition_namespace(b))
            for e in errors:
                self.output(e + "\n", "stderr")
            if not hit and reasons == ["breakpoint"]:  # ruled out: as if it had not stopped (a step goes on)
                self._quietly("continue", pid=self.pid, tid=tid, keep_step=True)
                return
        self.stops[tid], self._hits[tid] = b, hit
        res = b.get("result")
        if isinstance(res, dict) and res.get("kind") == "dist":  # a join's result is the thread's value
            self.last_dist[tid] = (res, int(b.get("preds") or 0))
        # Another thread's stop resumes nothing: the handles given out for the threads already stopped stay
        # valid (DAP's references live while execution is suspended); only this thread's stack is new.
        self.stop_requests.forget(tid)
        functions = {bp.id for bp in self.bps.functions}
        if hit:
            reason = "function breakpoint" if set(hit) <= functions else "breakpoint"
        else:
            reason = next((STOP_REASON[r] for r in reasons if r in STOP_REASON), "pause")
        body: dict[str, Any] = {
            "reason": reason,
            "threadId": tid,
            "allThreadsStopped": False,
            "description": "on entry" if b.get("where") == "entry" else f"{b.get('where')} {b.get('call')}",
        }
        if hit:
            body["hitBreakpointIds"] = hit
        step, own = self._stepping, b.get("step")
        if step is not None and not lands_on(b, step[1], step[0]):
            body["preserveFocusHint"] = True  # another thread held meanwhile, not where the step landed
        elif step is not None:
            self._stepping = None
            if own is not None:
                self._landed_steps.add(own)
        elif own is not None and own in self._landed_steps and not self._step_asked:
            # A step into spawned threads stops each at its first pred: the first to stop was the
            # landing; its siblings stop later under the same step and must not take the focus.
            body["preserveFocusHint"] = True
        if "diverged" in reasons:
            body["text"] = "the replay diverged from the recording: the thread runs live from here"
        self.channel.event("stopped", body)

    def _on_exit(self, b: dict) -> None:
        assert self.backend is not None and self.pid is not None
        self._ended = True
        self.stops.clear()
        try:
            res = self.request("wait_process", pid=self.pid, timeout=10)
        except (BackendError, TimeoutError) as e:  # said from the exit event alone
            log.warning("no result for process %s: %s", self.pid, e)
            res = {"status": b.get("status"), "result": None, "error": b.get("error")}
        if res.get("status") == "finished":
            self.output(f"{self.cfg.program if self.cfg else 'program'} returned {json.dumps(res.get('result'))}\n")
        elif res.get("error"):
            self.output(f"{res['error']}\n", "stderr")
        self._status = res.get("status")
        failure = failure_of(res, self.request, self.pid)
        if failure is not None and failure.filter in self.bps.exception_filters:
            self.postmortem = failure
            self.channel.event(
                "stopped",
                {"reason": "exception", "threadId": failure.tid, "allThreadsStopped": True, "text": failure.message},
            )
            return
        self._finish()

    def _finish(self) -> None:
        self.channel.event("exited", {"exitCode": 0 if self._status == "finished" else 1})
        self.channel.event("terminated")


__all__ = ["CAPABILITIES", "DapSession", "RequestError"]

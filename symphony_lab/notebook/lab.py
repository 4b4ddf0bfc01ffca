"""`Lab`: the notebook's engine, debugger, sidebar bridge and widgets (one per kernel).

Start-up (`start`) loads the engine on a background thread; nothing starts on import. Every
request from a widget, the sidebar or code goes through `handle` (the debugger's protocol plus
the lab's own commands, jupyter/messages.py). The debugger's events are folded into the shared
client-side model (`self.state`, symphony_lab/session_state.py), which the run views read
(views.py), and pushed to widgets and sidebar clients from a background thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..session_state import SessionState, message_value
from .kernel import in_kernel, kernel_id
from .run import LabRun, with_source_texts
from .token_tap import TokenTap
from .view_pump import GLOBAL_WIDGETS, VIEW_INTERVAL, ViewPump
from .views import RunViews

log = logging.getLogger(__name__)
RESERVED_KWARGS = ("stop_on_entry", "record", "profile", "user", "name", "priority", "limits")


class Lab:
    """The notebook's engine, debugger, sidebar bridge and widgets (one per kernel: `lab`)."""

    def __init__(self, model: str | None = None, start: bool = True, engine: Any = None, **engine_kwargs: Any) -> None:
        """`engine`: use this already loaded `Engine` (not shut down by `shutdown()`) instead of loading one."""
        self.model = model or os.environ.get("SYMPHONY_LAB_MODEL") or None
        self.engine_kwargs = engine_kwargs
        self._given_engine = engine
        self.engine = None
        self.debugger = None
        self.bridge = None
        self.error: BaseException | None = None
        self.kernel_id = kernel_id() if in_kernel() else None
        self.tap = TokenTap()
        self.state = SessionState()  # the client-side model the run views read (shared with the TUI)
        self.run_views = RunViews(self)
        self._runs: dict[int, LabRun] = {}
        self._ready = threading.Event()
        self.pump = ViewPump(self)  # pushes fresh views to the widgets and the sidebar
        self._override_pending: set[tuple[int, int]] = set()
        # held while a step back launches its replay and moves the run to the new pid; a new
        # process waits on it before its first line (see _on_process_start)
        self._rebind_lock = threading.Lock()
        self._started = False
        self._closed = False
        self.started_at = time.time()
        if start:
            self.start()

    # --- start-up -------------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        threading.Thread(target=self._start, name="symphony-lab-start", daemon=True).start()

    def _start(self) -> None:
        try:
            from symphony_core import Engine

            from ..debugger import Debugger

            if self.kernel_id:  # open the sidebar's bridge first: it answers "loading" until the engine is up
                from ..jupyter.bridge import KernelBridge

                self.bridge = KernelBridge(self.handle, self.kernel_id).start(
                    {"model": self.model, "started": self.started_at}
                )
            if self._given_engine is not None:
                eng = self._given_engine
            else:
                eng = Engine(self.model, **self.engine_kwargs) if self.model else Engine(**self.engine_kwargs)
            rt = eng.runtime
            if rt.kernel.hook is None:
                rt.kernel.hook = self.tap  # the debugger chains to it
            rt.on_process_start.insert(0, self._on_process_start)
            dbg = Debugger(eng)
            dbg.subscribe(self._on_event)
            self.engine, self.debugger = eng, dbg
            self.pump.start()
        except BaseException as e:  # shown by every widget and raised by wait()
            self.error = e
        finally:
            self._ready.set()

    @property
    def loaded(self) -> bool:
        """Start-up is over (the engine loaded, or failed to)."""
        return self._ready.is_set()

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self.error is None

    def wait(self, timeout: float | None = 300) -> Any:
        """Wait for the engine to load; return it (raises what start-up raised)."""
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the Symphony engine did not load within {timeout}s")
        if self.error is not None:
            raise RuntimeError(f"the Symphony engine failed to start: {self.error}") from self.error
        return self.engine

    # --- launching ----------------------------------------------------------------------------
    def run(
        self,
        fn: Callable,
        *args: Any,
        stop_on_entry: bool = False,
        record: bool = False,
        breakpoints: list | tuple = (),
        name: str | None = None,
        display: bool = True,
        profile: bool = False,
        **kwargs: Any,
    ) -> LabRun:
        """Launch the LIP `fn(sym, *args, **kwargs)` under the debugger and show its live widget.

        Returns at once (the launch waits for the engine on a background thread if it is
        still loading). `breakpoints`: syscall names or `set_breakpoint` dicts, bound to this
        process. `profile=True`: profile it (`run.profile()`); `record=True`: record it (`run.what_if()`).
        Returns a `LabRun` (`.result()`, `.step()`, `.override()`, `.relaunch()`...)."""
        if not callable(fn):
            raise TypeError(f"lab.run expects a LIP function, got {type(fn).__name__}")
        clash = [k for k in kwargs if k in RESERVED_KWARGS]
        if clash:
            raise TypeError(f"lab.run: keyword(s) {clash} are launch options; pass them positionally to the LIP")
        run = LabRun(
            self,
            fn,
            tuple(args),
            dict(kwargs),
            stop_on_entry=stop_on_entry,
            record=record,
            breakpoints=list(breakpoints),
            name=name,
        )
        run.profiling = profile
        if display and in_kernel():
            from IPython.display import display as _display

            _display(run.widget)

        def go() -> None:
            try:
                self.wait(None)
                run._launch()
            except BaseException as e:
                run.launch_error = f"{type(e).__name__}: {e}"
                run._launched.set()
                self.mark_dirty(None)

        if self.ready:
            go()
        else:
            threading.Thread(target=go, name="symphony-lab-launch", daemon=True).start()
        return run

    # --- the protocol -------------------------------------------------------------------------
    def handle(self, req: dict) -> dict:
        """Answer one request from a widget, the sidebar or code (debugger commands and lab commands)."""
        from ..debugger.protocol import handle_command
        from ..jupyter.messages import LAB_COMMANDS, MalformedMessage, check_request, error_response

        try:
            req = check_request(req)
        except MalformedMessage as e:
            return error_response(req, e)
        if not self.ready:
            return {
                "type": "response",
                "request_seq": req["seq"],
                "command": req["command"],
                "success": False,
                "message": "the engine is still loading" if self.error is None else f"engine failed: {self.error}",
                "error": "NotReady",
            }
        cmd, args = req["command"], req["arguments"]
        if cmd in LAB_COMMANDS:
            resp = {"type": "response", "request_seq": req["seq"], "command": cmd}
            try:
                resp.update(success=True, body=self._lab_command(cmd, args))
            except Exception as e:
                resp.update(success=False, message=str(e) or type(e).__name__, error=type(e).__name__)
        elif cmd == "step_back":
            resp = self._step_back(req)
        else:
            resp = handle_command(self.debugger, req, allow_launch=False, allow_files=False)
            run = self._runs.get(args.get("pid")) if isinstance(args.get("pid"), int) else None
            run = run if run is not None and run.pid == args["pid"] else None
            if cmd == "record" and resp.get("success") and run is not None:
                run.record = args.get("enabled", True) is not False  # a relaunch records too
            elif cmd in ("profile", "profile_stop") and resp.get("success"):
                with_source_texts(resp["body"])
            elif cmd == "what_if" and resp.get("success") and run is not None:
                run.what_if_view = resp["body"]  # the run widget's What-if tab shows it
        if cmd not in ("lab_view", "threads", "stops", "kv_tree", "timeline", "trace", "breakpoints"):
            self.mark_dirty(args.get("pid") if isinstance(args.get("pid"), int) else None)
        return resp

    def _on_process_start(self, proc) -> None:
        """Runs in a new process's main thread before its first line: a process launched by a
        step back waits here until its run follows it (so none of its tokens are missed)."""
        with self._rebind_lock:
            pass

    def _step_back(self, req: dict) -> dict:
        """The debugger's `step_back` (replay the recorded run to an earlier pred in a new process);
        the notebook run of `pid`, and its widget, move to the new process."""
        from ..debugger.protocol import handle_command

        pid = req["arguments"].get("pid")
        run = self._runs.get(pid) if isinstance(pid, int) else None
        move = run._move_lock if run is not None and run.pid == pid else threading.Lock()
        with move, self._rebind_lock:
            resp = handle_command(self.debugger, req, allow_launch=False, allow_files=False)
            body = resp.get("body") or {}
            if not resp.get("success") or run is None or run.pid != pid or not isinstance(body.get("pid"), int):
                return resp
            new, tid, target = body["pid"], body.get("tid", 1), body.get("target_pred", 0)
            # overridden preds that the replay hands back as recorded: keep showing them as overrides
            seen: dict[int, int] = {}
            keep = set(run._replay_overrides)
            for t in run.tokens:
                k = seen[t["tid"]] = seen.get(t["tid"], 0) + 1
                if t["overridden"] and (t["tid"] != tid or k <= target):
                    keep.add((t["tid"], k))
            run._replay_overrides = {(t, k) for t, k in keep if t != tid or k <= target}
            run.tokens, run.messages = [], []  # the replay runs from the start: they come again
            self.tap.watch.discard(pid)
            self.tap.watch.add(new)
            run.pid = new
            run.pids.append(new)
            self._runs[new] = run
        self.mark_dirty(new)
        return resp

    def _lab_command(self, cmd: str, args: dict) -> dict:
        if cmd == "lab_view":
            pid = args.get("pid")
            if pid is not None:
                run = self._runs.get(pid)
                if run is None:
                    raise ValueError(f"no notebook run with pid {pid}")
                return self.run_views.run_view(run)
            return self.run_views.lab_view(since=int(args.get("since") or 0))
        pid = args.get("pid")
        run = self._runs.get(pid) if pid is not None else None
        if run is None:
            raise ValueError(f"{cmd}: no notebook run with pid {pid!r}")
        if cmd == "relaunch":
            return {"pid": run.relaunch(stop_on_entry=args.get("stop_on_entry")), "relaunched": pid}
        if cmd == "set_view":
            scope = args.get("scope", run.scope)
            if scope not in ("process", "engine"):
                raise ValueError(f"set_view: scope must be 'process' or 'engine', got {scope!r}")
            idx = args.get("kv_index", run.kv_index)
            if idx is not None and (not isinstance(idx, int) or isinstance(idx, bool) or idx < 0):
                raise ValueError(f"set_view: kv_index must be a kept tree's index (>= 0) or null, got {idx!r}")
            run.scope, run.kv_index = scope, idx
            return {"scope": run.scope, "kv_index": run.kv_index, "kept": len(self.state.kv_trees)}
        if cmd == "cancel":
            p = run.process
            if p is not None and not p.done:
                p.cancel("cancelled from Symphony Lab")
            return {"cancelled": pid}
        raise ValueError(f"unknown lab command {cmd}")

    # --- events -----------------------------------------------------------------------------------
    def register_run(self, run: LabRun, pid: int) -> None:
        self._runs[pid] = run

    def mark_dirty(self, pid: int | None) -> None:
        """Process `pid`'s run view changed (None: every view): the pump pushes it next round."""
        self.pump.mark_dirty(pid)

    def _on_event(self, msg: dict) -> None:
        """Debugger event stream: fold it into the session model and the runs' token streams, mark
        views dirty, forward."""
        self.state.apply(msg)
        ev, body = msg.get("event"), msg.get("body") or {}
        pid = body.get("pid")
        run = self._runs.get(pid) if isinstance(pid, int) else None
        if run is not None and run.pid != pid:
            run = None  # a process the run has left (relaunched, stepped back)
        if ev == "syscall_exit" and body.get("call") == "pred":
            key = (pid, body.get("tid"), body.get("seq"))
            got = self.tap.pending.pop(key, None)
            if run is not None and got is not None:
                probs, ids, ps = got
                self.state.note_topk(pid, body.get("tid"), body.get("seq"), [[t, float(p)] for t, p in zip(ids, ps)])
                res = body.get("result") or {}
                tok = res.get("token") if isinstance(res, dict) else None
                if not isinstance(tok, int):
                    tok = res.get("argmax") if isinstance(res, dict) else None
                if isinstance(tok, int):
                    tz = self.engine.tokenizer
                    tid = body.get("tid")
                    over = (pid, tid) in self._override_pending
                    self._override_pending.discard((pid, tid))
                    if run._replay_overrides:
                        k = 1 + sum(1 for t in run.tokens if t["tid"] == tid)
                        over = over or (tid, k) in run._replay_overrides
                    run.tokens.append(
                        {
                            "id": tok,
                            "text": tz.token_text(tok),
                            "p": float(probs[tok]),
                            "tid": body.get("tid"),
                            "file": (body.get("args") or {}).get("file"),
                            "overridden": over,
                            "step": len(run.tokens),
                            "topk": [{"token": t, "text": tz.token_text(t), "p": float(p)} for t, p in zip(ids, ps)],
                        }
                    )
        elif ev == "syscall_enter" and body.get("call") == "send" and run is not None:
            run.messages.append(message_value((body.get("args") or {}).get("value")))
        elif ev == "syscall_enter" and body.get("call") == "kv_close" and run is not None:
            try:  # keep the tree as it is before the run's files close: the widget shows it after the end
                self.state.note_kv_tree(self.debugger.kv_tree(), body.get("ts"))
            except Exception:  # in the LIP's thread (an event): the run goes on, its kept tree is older
                log.warning("could not keep the KV tree before process %s closed a file", pid, exc_info=True)
        elif ev == "overridden" and isinstance(pid, int):
            self._override_pending.add((pid, body.get("tid")))
        elif ev == "process_exit" and isinstance(pid, int):
            self.tap.watch.discard(pid)
            for k in [k for k in self.tap.pending if k[0] == pid]:
                self.tap.pending.pop(k, None)
        if (
            ev in ("syscall_enter", "syscall_exit")
            and run is None
            and body.get("call") not in ("pred", "kv_fork", "kv_close", "kv_create")
        ):
            return
        self.mark_dirty(pid if isinstance(pid, int) else None)
        if self.bridge is not None and ev in (
            "stopped",
            "continued",
            "overridden",
            "process_start",
            "process_exit",
            "thread_start",
            "thread_exit",
            "replay_diverged",
        ):
            self.bridge.broadcast(msg)

    # --- whole-engine widgets -------------------------------------------------------------------
    def views(self):
        """A live widget with the KV fork tree and the scheduler timeline of every process."""
        from ..widgets import LabViewWidget

        w = LabViewWidget(self)
        GLOBAL_WIDGETS.add(w)
        self.mark_dirty(None)
        return w

    def trace(self, path: str | None = None) -> dict:
        """The run so far as a Chrome/Perfetto trace (also written to `path`)."""
        self.wait()
        return self.debugger.trace(path)

    def shutdown(self) -> None:
        self._closed = True
        if self.bridge is not None:
            self.bridge.stop()
        if self.debugger is not None:
            self.debugger.detach()
        eng = self.engine
        if eng is not None:
            rt = eng.runtime
            if rt.kernel.hook is self.tap:
                rt.kernel.hook = None
            try:
                rt.on_process_start.remove(self._on_process_start)
            except ValueError:
                pass
            if self._given_engine is None:
                eng.shutdown()


__all__ = ["GLOBAL_WIDGETS", "Lab", "RESERVED_KWARGS", "VIEW_INTERVAL"]

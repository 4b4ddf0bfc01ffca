"""Symphony in a notebook: `from symphony_lab import lab`, then `lab.run(fn, ...)`.

Importing this module starts an embedded engine on a background thread (the model loads
while you write your first cell), attaches a `Debugger` to it, and — inside a Jupyter kernel —
opens the bridge the JupyterLab sidebar talks to (see `symphony_lab.jupyter`).

    from symphony_lab import lab

    def complete(sym, prompt, max_tokens=16): ...

    run = lab.run(complete, "The capital of France is", stop_on_entry=True)   # shows a live widget
    run.step(); run.step(); run.override(text=" Lyon"); run.continue_()
    run.result()

Edit `complete` in its cell, run the cell again, and press *Relaunch* in the widget (or call
`run.relaunch()`): the new definition runs, the kernel keeps its engine and model.

Record and replay: launch with `record=True` (or press *Record* in the widget while the LIP is
stopped on entry); then *Step back* (`run.step_back()`) replays the recorded run into a new
process that stops right after the previous `pred`, with the recorded distribution. The run
(and its widget) follows the new process.

Everything the widgets and the sidebar show is computed here on background threads and sent
from there, so views keep updating while a cell is busy or a LIP is stopped.
"""

from __future__ import annotations

import ast
import linecache
import os
import threading
import time
from typing import Any, Callable

from symphony_core.events import now

DEFAULT_TOPK = 5
VIEW_INTERVAL = 0.2  # seconds between view refreshes while something changes
RESERVED_KWARGS = ("stop_on_entry", "record", "user", "name", "priority", "limits")


def _kernel_id() -> str | None:
    """The id of the Jupyter kernel we run in (from its connection file), or None outside one."""
    try:
        from ipykernel.connect import get_connection_file

        base = os.path.basename(get_connection_file())
    except Exception:
        return None
    if base.startswith("kernel-") and base.endswith(".json"):
        return base[len("kernel-"):-len(".json")]
    return None


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython

        ip = get_ipython()
        return ip is not None and getattr(ip, "kernel", None) is not None
    except Exception:
        return False


def _message_value(v: Any) -> Any:
    """A `send` event carries `repr(obj)`; give back the object when it is a plain literal."""
    if isinstance(v, str):
        try:
            return ast.literal_eval(v)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return v
    return v


class _TokenTap:
    """A kernel hook chained under the debugger: the top-k of each `pred` of a watched process.

    It runs in the LIP's thread right after the engine answers (before any override), keeps
    the probabilities until the call's exit event says which token the LIP got, then drops them.
    """

    def __init__(self, k: int = DEFAULT_TOPK) -> None:
        self.k = k
        self.watch: set[int] = set()
        self.pending: dict[tuple, tuple] = {}

    def before(self, th, ev) -> None:  # noqa: D401 - DebugHook protocol
        return None

    def after(self, th, ev, result: Any) -> Any:
        if ev.call == "pred" and th.proc.pid in self.watch:
            try:
                import torch

                logits = getattr(result, "logits", None)
                if logits is not None:
                    row = logits if logits.dim() == 1 else logits[-1]
                    probs = torch.softmax(row.float(), -1)
                    top = probs.topk(min(self.k, probs.numel()))
                    self.pending[(th.proc.pid, th.tid, ev.seq)] = (probs, top.indices.tolist(), top.values.tolist())
            except Exception:
                pass
        return result


class LabRun:
    """One LIP launched from a notebook: its process, its live widget, and debugger shortcuts."""

    def __init__(self, lab: "Lab", fn: Callable, args: tuple, kwargs: dict, *, stop_on_entry: bool, record: bool,
                 breakpoints: list, name: str | None) -> None:
        self.lab = lab
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.stop_on_entry = stop_on_entry
        self.record = record
        self.breakpoints = list(breakpoints)
        self.name = name or getattr(fn, "__name__", "lip")
        self.pid: int | None = None
        self.pids: list[int] = []
        self.tokens: list[dict] = []
        self.messages: list[Any] = []
        self.launch_error: str | None = None
        self._replay_overrides: set[tuple[int, int]] = set()  # (tid, k): the k-th pred of tid was overridden
        # held from cancelling the run's process to binding its successor (relaunch, step back),
        # so a cell waiting on `result()` sees the move and follows it
        self._move_lock = threading.Lock()
        self._launched = threading.Event()
        self._widget = None

    # --- the widget ---------------------------------------------------------------------------
    @property
    def widget(self):
        if self._widget is None:
            from .widgets import LIPWidget

            self._widget = LIPWidget(self)
        return self._widget

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    def __repr__(self) -> str:
        return f"LabRun({self.name!r}, pid={self.pid}, status={self.status!r})"

    # --- launching ------------------------------------------------------------------------------
    def _launch(self, fn: Callable | None = None, stop_on_entry: bool | None = None) -> int:
        dbg = self.lab.debugger
        if fn is not None:
            self.fn = fn
        entry = self.stop_on_entry if stop_on_entry is None else stop_on_entry
        bps = self.breakpoints
        self.tokens, self.messages, self.launch_error = [], [], None
        self._replay_overrides = set()
        r = dbg.launch(self.fn, *self.args, stop_on_entry=entry or bool(bps), record=self.record, name=self.name,
                       **self.kwargs)
        pid = r["pid"]
        self.lab._tap.watch.add(pid)
        self.pid = pid
        self.pids.append(pid)
        self.lab._runs[pid] = self
        if bps:
            for bp in bps:
                spec = {"call": bp} if isinstance(bp, str) else dict(bp)
                dbg.set_breakpoint(**{**spec, "pid": pid})
            if not entry:  # we stopped only to bind the breakpoints before the LIP's first call
                dbg.wait_stopped(pid, 1, timeout=30)
                dbg.continue_(pid)
        self._launched.set()
        self.lab._dirty(pid)
        return pid

    def relaunch(self, fn: Callable | None = None, stop_on_entry: bool | None = None) -> int:
        """Cancel this run's process and launch it again — with the current definition of its function.

        Without `fn`, a function defined in the notebook is looked up again by name in the
        kernel's namespace, so an edited and re-run cell takes effect."""
        if fn is None:
            fn = self.lab._current_definition(self.fn)
        with self._move_lock:
            proc = self.process
            if proc is not None and not proc.done:
                proc.cancel("relaunched from Symphony Lab")
                proc.wait(10)
            return self._launch(fn, stop_on_entry)

    # --- state --------------------------------------------------------------------------------
    @property
    def process(self):
        if self.pid is None:
            return None
        return self.lab.engine.runtime.processes.get(self.pid)

    @property
    def status(self) -> str:
        if self.launch_error:
            return "failed"
        p = self.process
        if p is None:
            return "starting" if not self.lab.ready else "queued"
        if any(s["pid"] == p.pid for s in self.lab.debugger.stops()["stops"]):
            return "stopped"
        return p.status

    def wait_launched(self, timeout: float | None = 120) -> int:
        if not self._launched.wait(timeout):
            raise TimeoutError(f"{self.name}: not launched after {timeout}s (is the engine still loading?)")
        if self.pid is None:
            raise RuntimeError(f"{self.name}: launch failed: {self.launch_error}")
        return self.pid

    def result(self, timeout: float | None = None) -> Any:
        """The LIP's return value (waits for it). If the run moves to a new process meanwhile (a
        relaunch or a step back from the widget), waits for that one instead."""
        return self._follow(lambda proc, t: proc.result(t), timeout)

    def wait(self, timeout: float | None = None) -> bool:
        return self._follow(lambda proc, t: proc.wait(t), timeout)

    def _follow(self, fn: Callable, timeout: float | None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        self.wait_launched(timeout)
        while True:
            proc = self.process
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                out = fn(proc, left)
            except Exception:
                with self._move_lock:  # a move under way finishes first
                    pass
                if self.process is not proc:
                    continue
                raise
            with self._move_lock:
                pass
            if self.process is not proc and not (deadline is not None and time.monotonic() >= deadline):
                continue  # `wait` returned because the process was replaced
            return out

    # --- debugger shortcuts (all go through the one protocol) ----------------------------------
    def _cmd(self, command: str, **arguments: Any) -> dict:
        self.wait_launched()
        resp = self.lab.handle({"type": "request", "seq": 0, "command": command,
                                "arguments": {"pid": self.pid, **arguments}})
        if not resp.get("success"):
            from symphony_lab.debugger import DebuggerError

            raise DebuggerError(resp.get("message", f"{command} failed"))
        return resp["body"]

    def wait_stopped(self, timeout: float = 60.0, tid: int | None = None) -> dict:
        return self._cmd("wait_stopped", timeout=timeout, **({"tid": tid} if tid else {}))

    def step(self, tid: int | None = None, wait: bool = True, timeout: float = 60.0) -> dict:
        """Run the stopped thread until its next `pred` returns; with `wait`, return that stop."""
        self._cmd("step", **({"tid": tid} if tid else {}))
        return self.wait_stopped(timeout, tid) if wait else {}

    def continue_(self, tid: int | None = None) -> dict:
        return self._cmd("continue", **({"tid": tid} if tid else {}))

    def pause(self) -> dict:
        return self._cmd("pause")

    def override(self, token: int | None = None, text: str | None = None, tid: int | None = None) -> dict:
        args: dict = {"token": token} if token is not None else {"text": text}
        return self._cmd("override", **args, **({"tid": tid} if tid else {}))

    def start_recording(self) -> dict:
        """Record this run's syscall results from now on (from its start when it is stopped on
        entry: only such a recording can be replayed)."""
        return self._cmd("record", enabled=True)

    def step_back(self, steps: int = 1, tid: int | None = None, wait: bool = True, timeout: float = 60.0) -> dict:
        """Replay the recorded run into a new process stopped right after the pred `steps` before
        this stop; this run (and its widget) then follows the new process. With `wait`, return that stop."""
        body = self._cmd("step_back", steps=steps, **({"tid": tid} if tid else {}))
        return self.wait_stopped(timeout, body.get("tid")) if wait else body

    def stops(self) -> list[dict]:
        return [s for s in self.lab.debugger.stops()["stops"] if s["pid"] == self.pid]

    def view(self) -> dict:
        return self.lab._run_view(self)


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
        self.kernel_id = _kernel_id() if _in_kernel() else None
        self._tap = _TokenTap()
        self._runs: dict[int, LabRun] = {}
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._dirty_pids: set[int] = set()
        self._global_dirty = True
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
            from symphony_lab.debugger import Debugger

            if self.kernel_id:  # open the sidebar's bridge first: it answers "loading" until the engine is up
                from .jupyter.bridge import KernelBridge

                self.bridge = KernelBridge(self.handle, self.kernel_id).start(
                    {"model": self.model, "started": self.started_at})
            if self._given_engine is not None:
                eng = self._given_engine
            else:
                eng = Engine(self.model, **self.engine_kwargs) if self.model else Engine(**self.engine_kwargs)
            rt = eng.runtime
            if rt.kernel.hook is None:
                rt.kernel.hook = self._tap  # the debugger chains to it
            rt.on_process_start.insert(0, self._on_process_start)
            dbg = Debugger(eng)
            dbg.subscribe(self._on_event)
            self.engine, self.debugger = eng, dbg
            threading.Thread(target=self._pump, name="symphony-lab-views", daemon=True).start()
        except BaseException as e:  # shown by every widget and raised by wait()
            self.error = e
        finally:
            self._ready.set()

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self.error is None

    def wait(self, timeout: float | None = 300) -> "Any":
        """Wait for the engine to load; return it (raises what start-up raised)."""
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the Symphony engine did not load within {timeout}s")
        if self.error is not None:
            raise RuntimeError(f"the Symphony engine failed to start: {self.error}") from self.error
        return self.engine

    # --- launching ----------------------------------------------------------------------------
    def run(self, fn: Callable, *args: Any, stop_on_entry: bool = False, record: bool = False,
            breakpoints: list | tuple = (), name: str | None = None, display: bool = True, **kwargs: Any) -> LabRun:
        """Launch the LIP `fn(sym, *args, **kwargs)` under the debugger and show its live widget.

        Returns at once (the launch waits for the engine on a background thread if it is
        still loading). `breakpoints`: syscall names or `set_breakpoint` dicts, bound to this
        process. Returns a `LabRun` (`.result()`, `.step()`, `.override()`, `.relaunch()`...)."""
        if not callable(fn):
            raise TypeError(f"lab.run expects a LIP function, got {type(fn).__name__}")
        clash = [k for k in kwargs if k in RESERVED_KWARGS]
        if clash:
            raise TypeError(f"lab.run: keyword(s) {clash} are launch options; pass them positionally to the LIP")
        run = LabRun(self, fn, tuple(args), dict(kwargs), stop_on_entry=stop_on_entry, record=record,
                     breakpoints=list(breakpoints), name=name)
        if display and _in_kernel():
            from IPython.display import display as _display

            _display(run.widget)

        def go() -> None:
            try:
                self.wait(None)
                run._launch()
            except BaseException as e:
                run.launch_error = f"{type(e).__name__}: {e}"
                run._launched.set()
                self._dirty(None)

        if self.ready:
            go()
        else:
            threading.Thread(target=go, name="symphony-lab-launch", daemon=True).start()
        return run

    def _current_definition(self, fn: Callable) -> Callable:
        """The function now bound to `fn`'s name in the notebook (an edited cell's new version)."""
        name = getattr(fn, "__name__", None)
        try:
            from IPython import get_ipython

            ip = get_ipython()
            ns = ip.user_ns if ip is not None else {}
        except Exception:
            ns = {}
        new = ns.get(name) if name else None
        if callable(new) and getattr(new, "__module__", None) == getattr(fn, "__module__", None):
            return new
        return fn

    # --- the protocol -------------------------------------------------------------------------
    def handle(self, req: dict) -> dict:
        """Answer one request from a widget, the sidebar or code (debugger commands and lab commands)."""
        from symphony_lab.debugger.protocol import handle_command

        from .jupyter.messages import LAB_COMMANDS, MalformedMessage, check_request, error_response

        try:
            req = check_request(req)
        except MalformedMessage as e:
            return error_response(req, e)
        if not self.ready:
            return {"type": "response", "request_seq": req["seq"], "command": req["command"], "success": False,
                    "message": "the engine is still loading" if self.error is None else f"engine failed: {self.error}",
                    "error": "NotReady"}
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
            if cmd == "record" and resp.get("success") and isinstance(args.get("pid"), int):
                run = self._runs.get(args["pid"])
                if run is not None and run.pid == args["pid"]:
                    run.record = args.get("enabled", True) is not False  # a relaunch records too
        if cmd not in ("lab_view", "threads", "stops", "kv_tree", "timeline", "trace", "breakpoints"):
            self._dirty(args.get("pid") if isinstance(args.get("pid"), int) else None)
        return resp

    def _on_process_start(self, proc) -> None:
        """Runs in a new process's main thread before its first line: a process launched by a
        step back waits here until its run follows it (so none of its tokens are missed)."""
        with self._rebind_lock:
            pass

    def _step_back(self, req: dict) -> dict:
        """The debugger's `step_back` (replay the recorded run to an earlier pred in a new process);
        the notebook run of `pid`, and its widget, move to the new process."""
        from symphony_lab.debugger.protocol import handle_command

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
            self._tap.watch.discard(pid)
            self._tap.watch.add(new)
            run.pid = new
            run.pids.append(new)
            self._runs[new] = run
        self._dirty(new)
        return resp

    def _lab_command(self, cmd: str, args: dict) -> dict:
        if cmd == "lab_view":
            pid = args.get("pid")
            if pid is not None:
                run = self._runs.get(pid)
                if run is None:
                    raise ValueError(f"no notebook run with pid {pid}")
                return self._run_view(run)
            return self.view(since=int(args.get("since") or 0))
        pid = args.get("pid")
        run = self._runs.get(pid) if pid is not None else None
        if run is None:
            raise ValueError(f"{cmd}: no notebook run with pid {pid!r}")
        if cmd == "relaunch":
            return {"pid": run.relaunch(stop_on_entry=args.get("stop_on_entry")), "relaunched": pid}
        if cmd == "cancel":
            p = run.process
            if p is not None and not p.done:
                p.cancel("cancelled from Symphony Lab")
            return {"cancelled": pid}
        raise ValueError(f"unknown lab command {cmd}")

    # --- views ----------------------------------------------------------------------------------
    def view(self, since: int = 0) -> dict:
        """Everything the sidebar shows: processes, stops, breakpoints, KV tree, scheduler timeline."""
        dbg = self.debugger
        return {
            "engine": self._engine_view(),
            "processes": dbg.threads(include_done=True)["processes"][-50:],
            "stops": dbg.stops()["stops"],
            "breakpoints": dbg.breakpoints()["breakpoints"],
            "kv_tree": dbg.kv_tree(),
            "timeline": dbg.timeline(since=since, limit=200),
            "ts": now(),
        }

    def _engine_view(self) -> dict:
        eng = self.engine
        return {"ready": self.ready, "loading": not self._ready.is_set(),
                "error": None if self.error is None else str(self.error),
                "model": getattr(eng, "model_name", self.model), "device": str(getattr(eng, "device", "")),
                "kernel_id": self.kernel_id, "bridge": self.bridge is not None}

    def _run_view(self, run: LabRun) -> dict:
        base = {"name": run.name, "pid": run.pid, "pids": list(run.pids), "engine": self._engine_view(),
                "kernel_id": self.kernel_id or "", "launch_error": run.launch_error}
        if not self.ready or run.pid is None:
            return {**base, "status": "failed" if (run.launch_error or self.error) else "starting", "threads": [],
                    "stops": [], "tokens": [], "messages": [], "result": None, "error": None}
        dbg = self.debugger
        proc = run.process
        stops = [s for s in dbg.stops()["stops"] if s["pid"] == run.pid]
        for s in stops:
            s["source"] = _source_lines(s.get("file"), s.get("line"))
        from symphony_lab.debugger.inspect import jsonable, process_view

        pv = process_view(proc, {}) if proc is not None else {"threads": [], "status": "queued"}
        result, error = None, None
        if proc is not None and proc.done:
            try:
                result = jsonable(proc.result(timeout=0))
            except Exception as e:
                error = str(e)
        mine = {run.pid}
        tl = dbg.timeline(limit=120)
        record = self._record_view(run, proc, stops)
        return {
            **base,
            "status": "stopped" if stops else (pv.get("status") or "queued"),
            "threads": pv.get("threads", []),
            "stops": stops,
            "tokens": run.tokens[-400:],
            "messages": [m if isinstance(m, str) else repr(m) for m in run.messages[-400:]],
            "result": result,
            "error": error,
            "kv_tree": dbg.kv_tree(),
            "timeline": tl,
            "record": record,
            "mine": sorted(mine),
            "ts": now(),
        }

    def _record_view(self, run: LabRun, proc, stops: list[dict]) -> dict:
        """Whether the run's process is recorded (and can be stepped back), or is a replay."""
        from symphony_lab.debugger import DebuggerError

        dbg = self.debugger
        out: dict = {"recorded": False, "recording": False, "complete": False, "preds": 0, "replay_of": None,
                     "diverged": 0, "can_step_back": False}
        try:
            rec = dbg.recording(run.pid)
            out.update(recorded=True, complete=bool(rec["complete"]), preds=rec["preds"],
                       recording=proc is not None and not proc.done)
        except DebuggerError:
            pass
        try:
            rs = dbg.replay_status(run.pid)
            out.update(replay_of=rs.get("source_pid"), diverged=len(rs.get("diverged") or []))
        except DebuggerError:
            pass
        if stops and out["recorded"] and out["complete"]:
            first = sorted(stops, key=lambda s: (s["tid"], s["stop_id"]))[0]
            out["can_step_back"] = (first.get("preds") or 0) >= 1
        return out

    # --- events -----------------------------------------------------------------------------------
    def _dirty(self, pid: int | None) -> None:
        with self._lock:
            self._global_dirty = True
            if pid is None:
                self._dirty_pids.update(self._runs)
            else:
                self._dirty_pids.add(pid)

    def _on_event(self, msg: dict) -> None:
        """Debugger event stream: fold pred results into token streams, mark views dirty, forward."""
        ev, body = msg.get("event"), msg.get("body") or {}
        pid = body.get("pid")
        run = self._runs.get(pid) if isinstance(pid, int) else None
        if run is not None and run.pid != pid:
            run = None  # a process the run has left (relaunched, stepped back)
        if ev == "syscall_exit" and body.get("call") == "pred":
            key = (pid, body.get("tid"), body.get("seq"))
            got = self._tap.pending.pop(key, None)
            if run is not None and got is not None:
                probs, ids, ps = got
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
                    run.tokens.append({
                        "id": tok, "text": tz.token_text(tok), "p": float(probs[tok]), "tid": body.get("tid"),
                        "file": (body.get("args") or {}).get("file"), "overridden": over, "step": len(run.tokens),
                        "topk": [{"token": t, "text": tz.token_text(t), "p": float(p)} for t, p in zip(ids, ps)],
                    })
        elif ev == "syscall_enter" and body.get("call") == "send" and run is not None:
            run.messages.append(_message_value((body.get("args") or {}).get("value")))
        elif ev == "overridden" and isinstance(pid, int):
            self._override_pending.add((pid, body.get("tid")))
        elif ev == "process_exit" and isinstance(pid, int):
            self._tap.watch.discard(pid)
            for k in [k for k in self._tap.pending if k[0] == pid]:
                self._tap.pending.pop(k, None)
        if ev in ("syscall_enter", "syscall_exit") and run is None and body.get("call") not in ("pred", "kv_fork",
                                                                                                 "kv_close", "kv_create"):
            return
        self._dirty(pid if isinstance(pid, int) else None)
        if self.bridge is not None and ev in ("stopped", "continued", "overridden", "process_start", "process_exit",
                                              "replay_diverged"):
            self.bridge.broadcast(msg)

    def _pump(self) -> None:
        """Push fresh views to widgets and sidebar clients while something changes."""
        while not self._closed:
            time.sleep(VIEW_INTERVAL)
            with self._lock:
                pids, self._dirty_pids = self._dirty_pids, set()
                glob, self._global_dirty = self._global_dirty, False
            try:
                for pid in pids:
                    run = self._runs.get(pid)
                    if run is not None and run._widget is not None and run.pid == pid:
                        run._widget.view = self._run_view(run)
                if glob:
                    for w in list(_GLOBAL_WIDGETS):
                        w.view = self.view()
                    if self.bridge is not None and self.bridge.n_clients:
                        self.bridge.broadcast({"type": "event", "event": "lab_view", "seq": 0, "ts": now(),
                                               "body": self.view()})
            except Exception:
                pass

    # --- whole-engine widgets -------------------------------------------------------------------
    def views(self):
        """A live widget with the KV fork tree and the scheduler timeline of every process."""
        from .widgets import LabViewWidget

        w = LabViewWidget(self)
        _GLOBAL_WIDGETS.add(w)
        self._dirty(None)
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
            if rt.kernel.hook is self._tap:
                rt.kernel.hook = None
            try:
                rt.on_process_start.remove(self._on_process_start)
            except ValueError:
                pass
            if self._given_engine is None:
                eng.shutdown()


def _source_lines(file: str | None, line: int | None, context: int = 3) -> dict | None:
    """The LIP's source around `line` (cells' sources come from IPython's linecache entries)."""
    if not file or not line:
        return None
    lines = []
    for n in range(max(1, line - context), line + context + 1):
        text = linecache.getline(file, n)
        if not text and n > line:
            break
        lines.append({"n": n, "text": text.rstrip("\n"), "current": n == line})
    return {"file": file, "line": line, "lines": lines}


import weakref  # noqa: E402

_GLOBAL_WIDGETS: "weakref.WeakSet" = weakref.WeakSet()

_LAB: Lab | None = None
_LAB_LOCK = threading.Lock()


def get_lab() -> Lab:
    """The kernel's one Lab (created, and its engine started, on first use)."""
    global _LAB
    with _LAB_LOCK:
        if _LAB is None:
            _LAB = Lab()
        return _LAB


def run(fn: Callable, *args: Any, **kwargs: Any) -> LabRun:
    return get_lab().run(fn, *args, **kwargs)


run.__doc__ = Lab.run.__doc__


def wait(timeout: float | None = 300):
    """Wait for the embedded engine to load and return it."""
    return get_lab().wait(timeout)


def views():
    return get_lab().views()


def trace(path: str | None = None) -> dict:
    return get_lab().trace(path)


def handle(req: dict) -> dict:
    return get_lab().handle(req)


def __getattr__(name: str) -> Any:
    if name in ("engine", "debugger", "bridge", "kernel_id"):
        lab = get_lab()
        if name in ("engine", "debugger"):
            lab.wait()
        return getattr(lab, name)
    raise AttributeError(name)


if os.environ.get("SYMPHONY_LAB_NO_AUTOSTART") != "1":
    get_lab()  # start loading the model now, in the background

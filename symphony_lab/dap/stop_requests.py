"""The requests about a stopped thread: `stackTrace`, `scopes`, `variables`, `setVariable` (the
Model scope's `taken`: an override) and `evaluate` (the debug console, hovers, watches).

A stack is the LIP's Python frames (file and line, so the editor opens the source there) topped
by a frame for the syscall the thread is stopped at, e.g. `pred(kv=3, 5 tokens)`; each frame has
the scopes Locals (the syscall frame: Call, its arguments), Model and KV.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from .backend import BackendError
from .console import Console, ConsoleError, parse_token
from .inspect_views import (
    DapScope,
    argument_variables,
    kv_variables,
    locals_variables,
    model_variables,
    syscall_label,
    token_repr,
    token_value,
    topk_variables,
)

if TYPE_CHECKING:
    from .session import DapSession

log = logging.getLogger(__name__)


class StopRequests:
    def __init__(self, session: DapSession) -> None:
        self.s = session
        self._stacks: dict[int, list[dict]] = {}  # tid -> the debugger's frames at its stop
        self._original: dict[int, dict] = {}  # stop id -> its pred's distribution before any override
        self.console = Console(session.request, self._override)

    def forget(self, tid: int | None = None) -> None:
        """Drop the cached stack of `tid` (None: of every thread)."""
        if tid is None:
            self._stacks.clear()
        else:
            self._stacks.pop(tid, None)

    def _stop(self, tid: Any) -> dict:
        from .session import RequestError

        stop = self.s.stops.get(tid) if isinstance(tid, int) else None
        if stop is None:
            raise RequestError(f"thread {tid} is not stopped")
        return stop

    def frames(self, tid: int) -> list[dict]:
        if tid not in self._stacks:
            self._stacks[tid] = self.s.request("stack", pid=self.s.pid, tid=tid)["frames"]
        return self._stacks[tid]

    def _source(self, file: str | None) -> dict | None:
        path = self.s.backend.local_path(file) if self.s.backend is not None else None
        if path is not None:
            return {"name": os.path.basename(path), "path": path}
        return {"name": file, "presentationHint": "deemphasize"} if file else None

    def condition_namespace(self, stop: dict) -> dict:
        """What a breakpoint condition may name: the innermost frame's locals, and the stop's facts."""
        try:
            frames = self.s.request("stack", pid=stop.get("pid"), tid=stop.get("tid"))["frames"]
        except (BackendError, TimeoutError) as e:  # resumed meanwhile: the condition sees the stop's facts only
            log.debug("no stack for the condition at stop %s: %s", stop.get("stop_id"), e)
            frames = []
        ns = {k: v.get("value") for k, v in ((frames[0].get("locals") or {}) if frames else {}).items()}
        inp = stop.get("input") or {}
        ns.update(
            tid=stop.get("tid"),
            preds=stop.get("preds"),
            call=stop.get("call"),
            n_tokens=inp.get("n_tokens", 0),
            text=inp.get("text", ""),
        )
        return ns

    def recorded_dist(self, pid: int, tid: int) -> tuple[dict, int] | None:
        """The thread's last pred as its recording keeps it (top 5, the token taken), for a stop
        that is not right after a pred; with how many preds the thread has made."""
        try:
            entries = self.s.request("recording", pid=pid, entries=True)["entries"]
        except BackendError:  # the process is not recorded: no top-k to show
            return None
        preds = [e for e in entries if e.get("tid") == tid and e.get("call") == "pred" and e.get("top5")]
        if not preds:
            return None
        e = preds[-1]
        ids = [int(t) for t, _ in e["top5"]]
        taken = e.get("token") if isinstance(e.get("token"), int) else ids[0]
        texts = self.s.request("token_texts", ids=sorted(set(ids + [taken])))["texts"]
        p = {int(t): float(q) for t, q in e["top5"]}
        top = [{"token": t, "text": texts[str(t)], "p": p[t]} for t in ids]
        view = {
            "topk": top,
            "preferred": top[0],
            "taken": {"token": taken, "text": texts[str(taken)], "p": p.get(taken, 0.0), "by": "recorded"},
        }
        return view, len(preds)

    # ------------------------------------------------------------------ stack and scopes
    def on_stackTrace(self, args: dict) -> dict:
        tid = args.get("threadId")
        pm = self.s.postmortem
        if pm is not None and tid == pm.tid:
            out = [self._frame(1_000_000 + i, fn, file, line) for i, (file, line, fn) in enumerate(pm.frames())]
            return {"stackFrames": out, "totalFrames": len(out)}
        stop = self._stop(tid)
        handles = self.s.handles
        out: list[dict] = []
        if stop.get("call"):
            out.append(self._frame(handles.frame(tid, -1), syscall_label(stop), stop.get("file"), stop.get("line")))
        for i, f in enumerate(self.frames(tid)):
            fr = self._frame(handles.frame(tid, i), f"{f['function']}", f.get("file"), f.get("line"))
            if f.get("library"):
                fr["presentationHint"] = "subtle"
            out.append(fr)
        if not out:  # a stop on entry: the LIP function, about to run its first line
            entry = self.s.backend.entry if self.s.backend is not None else None
            out.append(
                self._frame(handles.frame(tid, -1), f"{entry or 'program'} (entry)", stop.get("file"), stop.get("line"))
            )
        start = args.get("startFrame") or 0
        levels = args.get("levels") or len(out)
        return {"stackFrames": out[start : start + levels], "totalFrames": len(out)}

    def _frame(self, fid: int, name: str, file: str | None, line: int | None) -> dict:
        fr: dict[str, Any] = {"id": fid, "name": name, "line": int(line or 0), "column": 1}
        src = self._source(file)
        if src is not None:
            fr["source"] = src
        return fr

    def _where(self, frame_id: Any) -> tuple[int, int]:
        from .session import RequestError

        found = self.s.handles.frame_of(frame_id) if isinstance(frame_id, int) else None
        if found is None:
            raise RequestError(f"no frame {frame_id} (the program ran since; ask for the stack again)")
        return found

    def on_scopes(self, args: dict) -> dict:
        tid, index = self._where(args.get("frameId"))
        stop = self._stop(tid)
        h = self.s.handles
        scopes: list[DapScope] = []
        if index < 0:
            ref = h.variables(lambda: argument_variables(stop))
            scopes.append(
                {"name": "Call", "presentationHint": "arguments", "variablesReference": ref, "expensive": False}
            )
        else:
            frame = self.frames(tid)[index]
            ref = h.variables(lambda: locals_variables(frame))
            scopes.append(
                {"name": "Locals", "presentationHint": "locals", "variablesReference": ref, "expensive": False}
            )

        def model() -> list:
            now = self.s.stops.get(tid, stop)  # an override since replaced it
            res = now.get("result") if isinstance(now.get("result"), dict) else {}
            if res.get("kind") == "dist":
                orig = self._original.get(now.get("stop_id"))  # type: ignore[arg-type]
                extra = None if orig is None else (orig, h.variables(lambda: topk_variables(orig)))
                return model_variables(res, now.get("preds"), True, extra)
            dist, preds = self.recorded_dist(stop["pid"], tid) or self.s.last_dist.get(tid, (None, None))
            return model_variables(dist, preds, False)

        def kv() -> list:
            return kv_variables(self.s.request("kv_tree"), stop["pid"], stop.get("kv_file"), h)

        scopes.append(
            {
                "name": "Model",
                "presentationHint": "registers",
                "variablesReference": h.variables(model, ("Model", tid)),
                "expensive": False,
            }
        )
        scopes.append(
            {"name": "KV", "presentationHint": "registers", "variablesReference": h.variables(kv), "expensive": True}
        )
        return {"scopes": scopes}

    def on_variables(self, args: dict) -> dict:
        from .session import RequestError

        found = self.s.handles.produce(args.get("variablesReference"))  # type: ignore[arg-type]
        if found is None:
            raise RequestError(f"no variables {args.get('variablesReference')} (the program ran since)")
        start, count = args.get("start") or 0, args.get("count") or len(found)
        return {"variables": found[start : start + count]}

    # ------------------------------------------------------------------ changing the token
    def _override(self, tid: int, token: dict) -> str:
        """Override the stopped pred's token; the new `taken` as the Model scope shows it."""
        r = self.s.request("override", pid=self.s.pid, tid=tid, **token)
        if r.get("applied"):
            before = self.s.stops.get(tid) or {}
            if (
                isinstance(before.get("result"), dict)
                and before["result"].get("kind") == "dist"
                and before.get("stop_id") not in self._original
            ):
                self._original[before["stop_id"]] = before["result"]  # the model's own, kept through overrides
            stop = r["stop"]
            self.s.stops[tid] = stop
            self.s.last_dist[tid] = (stop["result"], int(stop.get("preds") or 0))
            return token_value(stop["result"]["taken"])
        what = token_repr(token["text"]) if "text" in token else f"token {token['token']}"
        return f"{what} (when the pred returns)"

    def on_setVariable(self, args: dict) -> dict:
        from .session import RequestError

        scope = self.s.handles.scope_of(args.get("variablesReference"))  # type: ignore[arg-type]
        if scope is None or scope[0] != "Model" or args.get("name") != "taken":
            raise RequestError(
                "only the Model scope's `taken` can be set: it overrides the token the pred hands the program"
            )
        tid = scope[1]
        stop = self._stop(tid)
        topk = stop["result"].get("topk") if isinstance(stop.get("result"), dict) else None
        value = args.get("value")
        if not isinstance(value, str):
            raise RequestError("setVariable needs a value")
        try:
            return {"value": self._override(tid, parse_token(value, topk))}
        except ConsoleError as e:
            raise RequestError(str(e)) from None

    def on_evaluate(self, args: dict) -> dict:
        expr = args.get("expression")
        if not isinstance(expr, str):
            from .session import RequestError

            raise RequestError("evaluate needs an expression")
        tid, frame = None, None
        if isinstance(args.get("frameId"), int):
            tid, index = self._where(args["frameId"])
            if index >= 0:
                frame = self.frames(tid)[index]
        elif len(self.s.stops) == 1:
            tid = next(iter(self.s.stops))
        result = self.console.evaluate(expr, self.s.pid, tid, frame)
        return {"result": result, "variablesReference": 0}


__all__ = ["StopRequests"]

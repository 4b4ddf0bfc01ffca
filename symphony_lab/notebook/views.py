"""What the notebook's widgets and the sidebar show, as JSON: the engine, the whole-engine view
and one run's view. A run's view reads the shared client-side model (`SessionState`): one token
lane per thread, and the KV tree kept after the run ends (scrubbable through the kept trees);
its KV tree and timeline are scoped to the run's processes unless the run asks for the whole
engine (`scope="engine"`).
"""

from __future__ import annotations

import linecache
from typing import TYPE_CHECKING

from symphony_core.events import now

from ..debugger.snapshot import DebuggerSnapshot, build_snapshot, local_request
from ..debugger.viewdata import jsonable, process_view
from ..session_state import scope_kv_tree, scope_timeline

if TYPE_CHECKING:
    from .lab import Lab
    from .run import LabRun


def source_lines(file: str | None, line: int | None, context: int = 3) -> dict | None:
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


class RunViews:
    """Builds the views from a `Lab`'s debugger, engine and session model."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    def engine_view(self) -> dict:
        lab = self.lab
        eng = lab.engine
        return {
            "ready": lab.ready,
            "loading": not lab.loaded,
            "error": None if lab.error is None else str(lab.error),
            "model": getattr(eng, "model_name", lab.model),
            "device": str(getattr(eng, "device", "")),
            "kernel_id": lab.kernel_id,
            "bridge": lab.bridge is not None,
        }

    def snapshot(self, since: int = 0) -> DebuggerSnapshot:
        """The debugger's state, from the one builder every front-end uses (debugger/snapshot.py)."""
        return build_snapshot(local_request(self.lab.debugger), since=since)

    def lab_view(self, since: int = 0) -> dict:
        """Everything the sidebar shows: the snapshot (processes, stops, breakpoints, KV tree,
        scheduler timeline), the engine and the notebook's runs."""
        return {**self.snapshot(since), "engine": self.engine_view(), "runs": self.runs()}

    def runs(self) -> list[dict]:
        """The notebook's runs (their current processes) the sidebar can profile or explore."""
        seen = {id(r): r for r in list(self.lab._runs.values())}
        return [
            {"pid": r.pid, "name": r.name, "profiled": r._collector is not None, "recorded": bool(r.record)}
            for r in seen.values()
            if r.pid is not None
        ]

    def kv_view(self, run: LabRun, live: dict) -> dict:
        """The run's KV tree: the live one while it shows the run's files; once they are closed
        (the run ended), the kept tree that showed the most of them (its fork tree at its
        fullest, the newest of equals); `run.kv_index` picks any kept tree (scrubbing)."""
        mine = set(run.pids)
        scoped = (lambda t: t) if run.scope == "engine" else (lambda t: scope_kv_tree(t, mine))
        trees = [t for _, t in list(self.lab.state.kv_trees)]
        kept = len(trees)
        if run.kv_index is not None and trees:
            i = max(0, min(run.kv_index, kept - 1))
            return {**scoped(trees[i]), "source": "kept", "index": i, "kept": kept}
        shown = scoped(live)
        if shown.get("files") or not trees:
            return {**shown, "source": "live", "index": kept - 1, "kept": kept}
        best, best_n = kept - 1, -1
        for j, t in enumerate(trees):
            n = len(scoped(t).get("files") or [])
            if n >= best_n and n > 0:
                best, best_n = j, n
        return {**scoped(trees[best]), "source": "kept" if best_n > 0 else "live", "index": best, "kept": kept}

    def run_view(self, run: LabRun) -> dict:
        lab = self.lab
        base = {
            "name": run.name,
            "pid": run.pid,
            "pids": list(run.pids),
            "engine": self.engine_view(),
            "kernel_id": lab.kernel_id or "",
            "launch_error": run.launch_error,
            "scope": run.scope,
        }
        if not lab.ready or run.pid is None:
            return {
                **base,
                "status": "failed" if (run.launch_error or lab.error) else "starting",
                "threads": [],
                "stops": [],
                "tokens": [],
                "lanes": [],
                "messages": [],
                "result": None,
                "error": None,
            }
        snap = self.snapshot()
        proc = run.process
        stops = [
            {**s, "source": source_lines(s.get("file"), s.get("line"))} for s in snap["stops"] if s["pid"] == run.pid
        ]
        pv = process_view(proc, {}) if proc is not None else {"threads": [], "status": "queued"}
        result, error = None, None
        if proc is not None and proc.done:
            try:
                result = jsonable(proc.result(timeout=0))
            except Exception as e:
                error = str(e)
        live_tree = snap["kv_tree"]
        lab.state.note_kv_tree(live_tree, now())
        tl = snap["timeline"]
        if run.scope != "engine":
            tl = scope_timeline(tl, set(run.pids))
        tz = lab.engine.tokenizer
        lanes = [{"tid": tid, **lane} for tid, lane in lab.state.lanes(run.pid, tz.token_text).items()]
        return {
            **base,
            "status": "stopped" if stops else (pv.get("status") or "queued"),
            "threads": pv.get("threads", []),
            "stops": stops,
            "tokens": run.tokens[-400:],
            "lanes": lanes,
            "messages": [m if isinstance(m, str) else repr(m) for m in run.messages[-400:]],
            "result": result,
            "error": error,
            "kv_tree": self.kv_view(run, live_tree),
            "timeline": tl,
            "record": self.record_view(run, proc, stops),
            "profile": run.profile_view(),
            "what_if": run.what_if_view,
            "what_if_threads": run.recorded_threads(),
            "mine": sorted(set(run.pids)),
            "ts": now(),
        }

    def record_view(self, run: LabRun, proc, stops: list[dict]) -> dict:
        """Whether the run's process is recorded (and can be stepped back), or is a replay."""
        from ..debugger import DebuggerError

        dbg = self.lab.debugger
        out: dict = {
            "recorded": False,
            "recording": False,
            "complete": False,
            "preds": 0,
            "replay_of": None,
            "diverged": 0,
            "can_step_back": False,
        }
        try:
            rec = dbg.recording(run.pid)
            out.update(
                recorded=True,
                complete=bool(rec["complete"]),
                preds=rec["preds"],
                recording=proc is not None and not proc.done,
            )
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


__all__ = ["RunViews", "source_lines"]

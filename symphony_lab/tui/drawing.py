"""Drawing the TUI from a state snapshot: the five panes and the status line."""

from __future__ import annotations

import os

from textual.app import App
from textual.content import Content

from .kv import KVPane
from .labels import describe_stop
from .processes import ProcessesPane, failure_line
from .program import ProgramPane, SourceView
from .scheduler import SchedulerPane
from .tokens import TokensPane


def status_line(
    st: dict, stop: dict | None, proc: dict | None, *, busy: str | None, started: bool, queued: list[str], title: str
) -> Content:
    """One line: what the focused thread is doing first (it must survive 80 columns), then the program."""
    parts: list[Content | str] = [Content.styled(" Symphony Lab ", "bold reverse"), " "]
    if proc:
        parts.append(Content.styled(f"pid {proc['pid']}", "bold"))
        if stop:
            parts.append(Content.styled(f" t{stop['tid']} stopped {describe_stop(stop)}", "bold $text-warning"))
        else:
            status = proc.get("status", "")
            parts.append(Content.styled(f" {status}", "bold $text-error" if status == "failed" else ""))
        parts.append(f" · {proc.get('name', '')}")
    if st.get("step_mode"):
        parts.append(Content.styled("  [batch step mode]", "$text-warning"))
    if st.get("loading"):
        parts.append(Content.styled(f"  {st['loading']}", "$text-accent"))
    if busy:
        parts.append(Content.styled(f"  {busy}…", "$text-accent"))
    elif not started:
        parts.append(Content.styled("  starting…", "$text-accent"))
    if queued:
        parts.append(Content.styled("  queued: " + " ".join(queued), "$text-accent"))
    parts += ["  ", Content.styled(title, "dim")]
    return Content.assemble(*parts)


def draw_panes(app: App, st: dict, focus_pt: tuple, stop: dict | None, proc: dict | None) -> None:
    """Redraw the five panes of `app` from the state snapshot `st`, for the thread `focus_pt`
    (`stop`/`proc`: its stop and process, if any)."""
    pid, tid = focus_pt
    # Program: the stopped line, or the thread's last known line.
    prog = app.query_one(ProgramPane)
    loc = stop or (st.get("locations", {}).get(f"{pid}.{tid}") if pid is not None else None) or {}
    failed_at = None
    if proc and proc.get("status") == "failed":
        tbs = st.get("tracebacks", {})
        tb = tbs.get(proc["pid"]) or tbs.get(str(proc["pid"]))
        failed_at = failure_line(tb) if tb else None
        if failed_at:
            loc = {"file": failed_at[0], "line": failed_at[1]}
    file, line = loc.get("file") or st.get("program_file"), loc.get("line")
    where = Content.assemble(
        Content.styled(os.path.basename(file) if file else "no source", "bold"),
        f":{line}" if line else "",
        f"  in {loc.get('function')}" if loc.get("function") else "",
        Content.styled(f"  stopped: {describe_stop(stop)}", "$text-warning") if stop else "",
        Content.styled("  raised here", "bold $text-error") if failed_at else "",
    )
    prog.show_stop(
        file,
        line,
        where,
        (st.get("sources") or {}).get(file) if file else None,
        key=(pid, tid, (stop or {}).get("stop_id")),
    )
    src = app.query_one(SourceView)
    src.set_breaks(
        {
            b["line"]
            for b in st.get("line_breakpoints", [])
            if b.get("line") and (not b.get("source") or not file or b.get("source") == file)
        }
    )

    # Tokens of the focused thread.
    hist = st.get("history", {}).get(f"{pid}.{tid}", {}) if pid is not None else {}
    toks = hist.get("tokens", [])
    title = Content.assemble(
        Content.styled(f"pid {pid} t{tid}" if pid is not None else "no thread", "bold"),
        f"  {len(toks)} tokens generated",
        Content.styled("  green: sure · yellow: toss-up · red: unlikely · underlined: overridden", "$text-muted"),
    )
    tp = app.query_one(TokensPane)
    tp.show_text(title, hist.get("prompt", ""), toks)
    res = (stop or {}).get("result")
    tp.show_topk(res if isinstance(res, dict) and res.get("kind") == "dist" else None, (stop or {}).get("original"))

    app.query_one(KVPane).show(st.get("kv_tree", {}))
    app.query_one(SchedulerPane).show(st.get("timeline", {}), st.get("step_mode", False), st.get("next_batch"))
    app.query_one(ProcessesPane).show(
        st.get("processes", []), focus_pt, st.get("tracebacks", {}), st.get("results", {})
    )


__all__ = ["draw_panes", "status_line"]

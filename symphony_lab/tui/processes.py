"""The processes pane: processes and their threads with state; selecting one focuses it.

State words follow the runtime's: running, in pred (queued or in a batch), waiting for pages,
stopped (and why), finished, failed, cancelled. A failed process keeps its traceback, shown
when it is selected (and in the output pane), and the session goes on.
"""

from __future__ import annotations

import os
import re

from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import Static, Tree

from .labels import ContentTree, Quiet

STATE_STYLE = {
    "running": "$text-success",
    "in_syscall": "$text-primary",
    "waiting_pages": "$text-warning",
    "stopped": "bold $text-warning",
    "finished": "dim",
    "failed": "bold $text-error",
    "cancelled": "$text-error",
    "queued": "dim",
    "parked": "$text-warning",
    "new": "dim",
}


def thread_state(t: dict) -> tuple[str, str]:
    """(word shown, style key) for one thread."""
    st = t.get("stopped")
    if st:
        if st.get("where") == "entry":
            return "stopped on entry", "stopped"
        return (
            f"stopped {st.get('where') or 'at'} {t.get('call') or st.get('call') or 'syscall'} ({st.get('reason')})",
            "stopped",
        )
    state = t.get("state", "?")
    if state == "in_syscall":
        return f"in {t.get('call') or 'syscall'}", "in_syscall"
    if state == "waiting_pages":
        return "waiting for pages", "waiting_pages"
    return state, state


_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+)')


def lip_traceback(tb: str) -> str:
    """The traceback without the runtime's own frames (symphony_core/lip): the LIP's frames only."""
    out, skip = [], False
    for ln in tb.splitlines():
        m = _FRAME.match(ln)
        if m:
            skip = f"{os.sep}symphony_core{os.sep}lip{os.sep}" in m.group("file")
        elif not ln.startswith("    "):
            skip = False
        if not skip:
            out.append(ln)
    return "\n".join(out)


def failure_line(tb: str) -> tuple[str, int] | None:
    """File and line of the innermost frame of a traceback (where the LIP raised)."""
    frames = [m for m in (_FRAME.match(ln) for ln in lip_traceback(tb).splitlines()) if m]
    return (frames[-1].group("file"), int(frames[-1].group("line"))) if frames else None


def proc_label(p: dict, focused: bool) -> Content:
    status = p.get("status", "?")
    if any(t.get("stopped") for t in p.get("threads", [])) and status == "running":
        status = "stopped"
    return Content.assemble(
        Content.styled("● " if focused else "  ", "$text-accent"),
        Content.styled(f"pid {p['pid']} ", "bold"),
        f"{p.get('name', '')} ",
        Content.styled(status, STATE_STYLE.get(status, "")),
        Content.styled(f"  {p.get('tokens', 0)} tok", "dim"),
    )


def thread_label(t: dict, focused: bool) -> Content:
    word, key = thread_state(t)
    return Content.assemble(
        Content.styled("▸ " if focused else "  ", "$text-accent"),
        Content.styled(f"t{t['tid']} ", "bold"),
        f"{t.get('name', '')} ",
        Content.styled(word, STATE_STYLE.get(key, "")),
        Content.styled(f"  {t.get('preds', 0)} preds", "dim"),
    )


class ProcTree(ContentTree):
    class Focus(Message):
        def __init__(self, pid: int, tid: int | None) -> None:
            super().__init__()
            self.pid, self.tid = pid, tid

    def __init__(self, **kw) -> None:
        super().__init__("processes", **kw)
        self.show_root = False
        self._sig = None

    def show(self, procs: list[dict], focus: tuple[int | None, int | None]) -> None:
        sig = (
            focus,
            tuple(
                (
                    p["pid"],
                    p.get("status"),
                    p.get("tokens"),
                    tuple(
                        (
                            t["tid"],
                            t.get("state"),
                            t.get("call"),
                            t.get("preds"),
                            bool(t.get("stopped")),
                            str(t.get("stopped")),
                        )
                        for t in p.get("threads", [])
                    ),
                )
                for p in procs
            ),
        )
        if sig == self._sig:
            return
        self._sig = sig
        cur = self.cursor_node.data if self.cursor_node is not None else None
        self.clear()
        target = None
        for p in procs:
            n = self.root.add(
                proc_label(p, focus[0] == p["pid"] and focus[1] is None),
                data=(p["pid"], None),
                expand=not p.get("done") or focus[0] == p["pid"],
            )
            if cur == (p["pid"], None):
                target = n
            for t in p.get("threads", []):
                leaf = n.add_leaf(thread_label(t, focus == (p["pid"], t["tid"])), data=(p["pid"], t["tid"]))
                if cur == (p["pid"], t["tid"]):
                    target = leaf
        self.root.expand()
        if target is not None:
            self.call_after_refresh(self.move_cursor, target)

    def on_tree_node_selected(self, ev: Tree.NodeSelected) -> None:
        ev.stop()
        if isinstance(ev.node.data, tuple):
            self.post_message(self.Focus(*ev.node.data))


def return_value_text(v) -> str:
    """A program's return value (as the protocol's JSON) on a few lines."""
    import json

    try:
        text = json.dumps(v, ensure_ascii=False, indent=None)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 600 else text[:600] + "…"


class ProcessesPane(Vertical):
    def compose(self):
        yield ProcTree(id="proc-tree")
        with VerticalScroll(id="proc-detail-scroll"):
            yield Quiet("", id="proc-detail")

    def show(
        self,
        procs: list[dict],
        focus: tuple[int | None, int | None],
        tracebacks: dict[int, str],
        results: dict | None = None,
    ) -> None:
        self.query_one(ProcTree).show(procs, focus)
        detail = self.query_one("#proc-detail", Static)
        p = next((p for p in procs if p["pid"] == focus[0]), None)
        if p is None:
            detail.update("")
            return
        tb = tracebacks.get(p["pid"]) or tracebacks.get(str(p["pid"]))
        if p.get("status") in ("failed", "cancelled") and (tb or p.get("error")):
            tb = lip_traceback(tb or "")
            last = (tb.strip().splitlines() or [p.get("error") or ""])[-1]
            detail.update(
                Content.assemble(
                    Content.styled(f"pid {p['pid']} {p.get('status')}: ", "bold $text-error"),
                    Content.styled(last + "\n", "bold"),
                    Content.styled(tb or p.get("error") or "", "$text-error"),
                )
            )
            self.add_class("-failed")
        else:
            self.remove_class("-failed")
            about = Content.styled(
                f"pid {p['pid']} {p.get('name')} · user {p.get('user')} · "
                f"{len(p.get('threads', []))} threads · {p.get('tokens', 0)} tokens fed",
                "dim",
            )
            res = (results or {}).get(p["pid"]) or (results or {}).get(str(p["pid"]))
            if res is not None and p.get("status") == "finished":
                about = Content.assemble(
                    about, Content.styled("\nreturned ", "bold $text-success"), return_value_text(res.get("result"))
                )
            detail.update(about)

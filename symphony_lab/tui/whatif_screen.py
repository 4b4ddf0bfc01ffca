"""The What-if screen (F4): at a token position of the focused thread's recorded run, feed
another token and show both continuations side by side (an embedded session: the what-if runs
as a LIP on the session's engine, in KV forks of the prefix)."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from symphony_core.errors import SymphonyError

from ..whatif import thread_tokens, what_if


def parse_request(text: str) -> tuple[int, str | int, int]:
    """`POSITION TOKEN [MAX_TOKENS]`: TOKEN is an id (`#123`) or the text of one token."""
    parts = text.strip().split(" ", 1)
    if len(parts) != 2 or not parts[0].isdigit():
        raise ValueError("type: POSITION TOKEN [MAX_TOKENS], e.g. `12 Rome 8` or `12 #3575`")
    pos, rest = int(parts[0]), parts[1]
    max_tokens = 12
    head, _, tail = rest.rpartition(" ")
    if head and tail.isdigit():
        rest, max_tokens = head, int(tail)
    token: str | int = int(rest[1:]) if rest.startswith("#") and rest[1:].isdigit() else " " + rest.strip()
    return pos, token, max_tokens


def run_what_if(session: Any, pid: int, tid: int, text: str) -> str:
    engine, dbg = getattr(session, "engine", None), getattr(session, "dbg", None)
    if engine is None or dbg is None:
        return "What-if needs an embedded session (an engine in this process)."
    try:
        pos, token, n = parse_request(text)
        tokens = thread_tokens(dbg.get_recording(pid), tid)
        w = what_if(engine, tokens, pos, token, n)
    except (ValueError, SymphonyError) as e:  # shown to the user, who can correct the request
        return f"{type(e).__name__}: {e}"
    mark = "identical" if w.diverge_at is None else f"diverge at +{w.diverge_at}"
    return (
        f"thread {pid}.{tid}, position {w.position} ({mark}; {len(w.shared_pages)} prefix pages shared)\n\n"
        f"original:    {w.texts['original']!r}\nalternative: {w.texts['alternative']!r}"
    )


class WhatIfScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f4", "dismiss", "close")]

    def __init__(self, session: Any, pid: int | None, tid: int | None) -> None:
        super().__init__()
        self.session, self.pid, self.tid = session, pid, tid

    def compose(self) -> ComposeResult:
        with Vertical(id="whatif-box"):
            yield Static(f"What if — thread {self.pid}.{self.tid}: POSITION TOKEN [MAX_TOKENS]", id="whatif-title")
            yield Input(placeholder="12 Rome 8", id="whatif-input")
            yield Static("", id="whatif-result", markup=False)

    def on_input_submitted(self, ev: Input.Submitted) -> None:
        out = self.query_one("#whatif-result", Static)
        if self.pid is None or self.tid is None:
            out.update("Focus a thread first.")
            return
        out.update("running…")
        text = ev.value

        def work() -> None:
            result = run_what_if(self.session, self.pid, self.tid, text)
            self.app.call_from_thread(out.update, result)

        self.run_worker(work, thread=True, exclusive=True)

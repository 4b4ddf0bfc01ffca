"""The What-if screen (F4): at a token position of the focused thread's recorded run, feed
another token and show both continuations side by side, with where they diverge. It sends the
debugger protocol's `what_if` command, so it works for an embedded session and one against a
server alike: the what-if runs as a LIP on the debugged engine, in KV forks of the prefix."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from .session import SessionError


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


def split_sampler(text: str) -> tuple[str, dict]:
    """Trailing `name=value` words (temperature, top_k, top_p, min_p, seed) are the alternative's
    sampler: `12 Rome 8 temperature=0.8 seed=1`; TOKEN `*` keeps the recorded token."""
    words, sampler = text.split(), {}
    while words and "=" in words[-1]:
        name, _, value = words.pop().partition("=")
        try:
            sampler[name] = int(value) if name in ("top_k", "seed") else float(value)
        except ValueError:
            raise ValueError(f"sampler {name} must be a number, got {value!r}") from None
    return " ".join(words), sampler


def run_what_if(session: Any, pid: int, tid: int, text: str) -> str:
    request = getattr(session, "request", None)
    if request is None or getattr(session, "dbg", None) is None:
        return "What-if needs a live debugger session; this one has none (a recording, or still starting)."
    try:
        text, sampler = split_sampler(text)
        pos, token, n = parse_request(text)
        which: dict = {"sampler": sampler} if sampler else {}
        if token != " *":
            which.update({"token": token} if isinstance(token, int) else {"text": token})
        w = request("what_if", pid=pid, tid=tid, position=pos, max_tokens=n, **which)
    except (ValueError, SessionError, TimeoutError) as e:  # shown to the user, who can correct the request
        return f"Error: {e}"
    return what_if_text(w)


def what_if_text(w: dict) -> str:
    """A `what_if` body as the screen shows it."""
    d = w["diverge_at"]
    mark = "identical" if d is None else f"diverge at +{d}"
    out = [
        f"thread {w['pid']}.{w['tid']}, position {w['position']} ({mark}; "
        f"{len(w['shared_pages'])} prefix pages shared)",
        "",
        f"original:    {w['texts']['original']!r}",
        f"alternative: {w['texts']['alternative']!r}",
    ]
    if d is not None:
        o, a = w["token_texts"]["original"], w["token_texts"]["alternative"]
        first_o = repr(o[d]) if d < len(o) else "(ended)"
        first_a = repr(a[d]) if d < len(a) else "(ended)"
        out += ["", f"first difference, token +{d}: original {first_o}, alternative {first_a}"]
    if w.get("reproduces_recording"):
        out.append("the original continuation reproduces the recorded run")
    return "\n".join(out)


class WhatIfScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f4", "dismiss", "close")]

    def __init__(self, session: Any, pid: int | None, tid: int | None) -> None:
        super().__init__()
        self.session, self.pid, self.tid = session, pid, tid

    def compose(self) -> ComposeResult:
        with Vertical(id="whatif-box"):
            yield Static(
                f"What if — thread {self.pid}.{self.tid}: POSITION TOKEN [MAX_TOKENS] [temperature=T seed=S …]"
                " (TOKEN: a word, #id, or * for the recorded one)",
                id="whatif-title",
                markup=False,
            )
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

"""Symphony Lab in the terminal: single-step generation and watch the engine.

The app talks to one `Session` (session.py) — the debugger of an embedded engine, or a
server — and never to the engine itself. It polls the session for a state snapshot a few
times a second (and after every command) and redraws the five panes from it: program,
tokens, KV, scheduler, processes. Commands run on a worker thread (the screen never freezes).
"""

from __future__ import annotations

import logging
from typing import Any

from textual import on, work
from textual.app import App, ComposeResult, ScreenStackError
from textual.containers import Container
from textual.content import Content
from textual.css.query import NoMatches
from textual.widgets import Footer, Static, Tab, Tabs

from .command_queue import CommandQueue
from .drawing import draw_panes, status_line
from .labels import Quiet, describe_stop, quiet_when_gone  # noqa: F401 (describe_stop is imported from here)
from .layout import FOCUS_IN_PANE, GRID_ORDER, KEY_BINDINGS, PANES
from .processes import ProcTree
from .profile_screen import ProfileScreen
from .program import SourceView
from .screens import HelpScreen, OverrideScreen
from .session import Session
from .tokens import TopK
from .whatif_screen import WhatIfScreen

log = logging.getLogger(__name__)


class SymphonyLab(App):
    """The TUI. `session` is what it drives; `poll` the refresh period in seconds (0: only
    after commands, for deterministic screenshots)."""

    CSS_PATH = "app.tcss"
    TITLE = "Symphony Lab"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = KEY_BINDINGS

    def __init__(self, session: Session, *, poll: float = 0.25, theme: str | None = None) -> None:
        super().__init__()
        self.session = session
        self.poll = poll
        if theme:
            self.theme = theme
        self.state: dict[str, Any] = {}
        self.focus_pt: tuple[int | None, int | None] = (None, None)
        self.active_pane = "program"
        self.last_error: str | None = None
        self.busy: str | None = None
        self.commands = CommandQueue()  # keys pressed while busy wait there (command_queue.py)
        self._refreshing = False
        self._refresh_again = False
        self._want_focus: tuple | None = None

    # --- layout ----------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Quiet("Symphony Lab", id="status")
        yield Tabs(
            *[Tab(f"{i + 1} {label}", id=f"tab-{key}") for i, (key, label, _) in enumerate(PANES)], id="pane-tabs"
        )
        yield Quiet("", id="notice")
        with Container(id="panes"):
            by_key = {k: (label, cls) for k, label, cls in PANES}
            for key in GRID_ORDER:
                label, cls = by_key[key]
                pane = cls(id=f"pane-{key}", classes="pane")
                pane.border_title = f"{[k for k, _, _ in PANES].index(key) + 1} {label}"
                yield pane
        yield Footer(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        self.query_one("#pane-program").add_class("-active")
        self.query_one(SourceView).focus()
        self.start_session()
        if self.poll:
            self.set_interval(self.poll, self.refresh_state)

    @work(thread=True, exclusive=True, group="start")
    def start_session(self) -> None:
        try:
            self.session.start()
        except Exception as e:  # a bad program path or a dead server: say so, keep the UI
            self.call_from_thread(self.notice, f"could not start: {type(e).__name__}: {e}")
        else:
            # Focus the program this session launched, not whatever ran last on a shared engine.
            launched = getattr(self.session, "pid", None)
            if launched is not None:
                self.call_from_thread(self._set_focus, (launched, None))
        self.call_from_thread(self._mark_started)
        self.call_from_thread(self.refresh_state)

    def _mark_started(self) -> None:
        self.commands.started = True

    # --- state -------------------------------------------------------------------------------------
    def refresh_state(self) -> None:
        """Ask the session for a new snapshot (skipped while one is still being taken)."""
        if self._refreshing:
            self._refresh_again = True
            return
        self._refreshing = True
        self._take_state()

    @work(thread=True, group="state")
    def _take_state(self) -> None:
        try:
            st = self.session.state()
        except Exception as e:
            st = None
            self.call_from_thread(self.notice, f"session: {type(e).__name__}: {e}")
        finally:
            self.call_from_thread(self._state_done, st)

    def _state_done(self, st: dict | None) -> None:
        self._refreshing = False
        if st is not None:
            landed = self.commands.check_landed(st)
            self.focus_pt = (landed and self.commands.landed_on) or self.focus_pt  # the step's own landing
            self.apply_state(st)
            if landed:
                self._set_busy(None)
            self._run_queued()
        if self._refresh_again:
            self._refresh_again = False
            self.refresh_state()

    @quiet_when_gone
    def apply_state(self, st: dict) -> None:
        self.state = st
        for text in st.get("notices") or ():  # what failed out of sight since the last state
            self.notice(text)
        self._pick_focus()
        try:
            self._draw()
        except (NoMatches, ScreenStackError):
            raise
        except Exception as e:  # a drawing bug must not take the session down: say it, go on
            self.notice(f"display error: {type(e).__name__}: {e}")

    def _pick_focus(self) -> None:
        """Keep the user's focus while it exists; else follow the newest stop, else the newest process."""
        procs = self.state.get("processes", [])
        pids = {p["pid"]: p for p in procs}
        if self._want_focus is not None:
            if self._want_focus[0] in pids:
                self.focus_pt, self._want_focus = self._want_focus, None
            else:
                return  # a process the user asked for (relaunch, step back) is on its way
        pid, tid = self.focus_pt
        stops = self.state.get("stops", [])
        if pid in pids and (tid is None or any(t["tid"] == tid for t in pids[pid].get("threads", []))):
            # A step on its way keeps the focus (it lands where check_landed says); else follow the newest stop.
            if not self.commands.landing and not any(s["pid"] == pid and s["tid"] == tid for s in stops):
                mine = [s for s in stops if s["pid"] == pid]
                if mine:
                    self.focus_pt = (pid, max(mine, key=lambda s: s["stop_id"])["tid"])
            return
        if stops:
            self.focus_pt = (stops[-1]["pid"], stops[-1]["tid"])
        elif procs:
            p = procs[-1]
            self.focus_pt = (p["pid"], p["threads"][0]["tid"] if p.get("threads") else None)
        else:
            self.focus_pt = (None, None)

    def focused_stop(self) -> dict | None:
        pid, tid = self.focus_pt
        return next((s for s in self.state.get("stops", []) if s["pid"] == pid and s["tid"] == tid), None)

    def focused_proc(self) -> dict | None:
        return next((p for p in self.state.get("processes", []) if p["pid"] == self.focus_pt[0]), None)

    def _draw(self) -> None:
        stop = self.focused_stop()
        proc = self.focused_proc()
        self._draw_status(stop, proc)
        draw_panes(self, self.state, self.focus_pt, stop, proc)

    def _draw_status(self, stop: dict | None, proc: dict | None) -> None:
        line = status_line(
            self.state,
            stop,
            proc,
            busy=self.busy,
            started=self.commands.started,
            queued=self.queued,
            title=self.session.title,
        )
        self.query_one("#status", Static).update(line)

    @quiet_when_gone
    def notice(self, text: str | None) -> None:
        self.last_error = text
        n = self.query_one("#notice", Static)
        n.update(Content.styled(text or "", "$text"))
        n.set_class(bool(text), "-shown")

    # --- commands --------------------------------------------------------------------------------
    @property
    def queued(self) -> list[str]:
        return self.commands.pending

    def _queue(self, action: str) -> bool:
        """True if `action` must wait (it is queued, and the status line says so)."""
        if not self.commands.push(action, self.busy):
            return False
        self._draw_status(self.focused_stop(), self.focused_proc())
        return True

    def _act(self, action: str) -> None:
        if not self._queue(action):
            getattr(self, f"_do_{action}")()

    def action_step(self) -> None:
        self._act("step")

    def action_step_over(self) -> None:
        self._act("step_over")

    def action_step_out(self) -> None:
        self._act("step_out")

    def action_continue(self) -> None:
        self._act("continue")

    def action_pause(self) -> None:
        self._act("pause")

    def action_step_batch(self) -> None:
        self._act("step_batch")

    def action_step_back(self) -> None:
        self._act("step_back")

    def action_relaunch(self) -> None:
        self._act("relaunch")

    def _run_queued(self) -> None:
        action, dropped = self.commands.next_ready(self.state, self.focus_pt, self.busy)
        if dropped:
            self.notice(dropped)
            self._draw_status(self.focused_stop(), self.focused_proc())
        if action is not None:
            getattr(self, f"_do_{action}")()

    @work(thread=True, exclusive=False, group="cmd")
    def run_command(self, label: str, fn, *args, lands: bool = False) -> None:
        """Run a session verb on a worker thread. `lands`: a step: busy until it lands (or the process ends)."""
        self.call_from_thread(self._set_busy, label)
        landing = False
        try:
            r = fn(*args)
            err = r.get("error") if isinstance(r, dict) else None
            self.call_from_thread(self.notice, f"{label}: {err}" if err else None)
            if isinstance(r, dict) and r.get("focus"):
                self.call_from_thread(self._set_focus, tuple(r["focus"]))
            elif lands and isinstance(r, dict):  # a step's answer: where it lands (args: pid, tid, command)
                self.call_from_thread(self.commands.step_answered, args[1], r)
            landing = lands and not err
        except Exception as e:  # the session said no: show it, keep going
            self.call_from_thread(self.notice, f"{label}: {type(e).__name__}: {e}")
        finally:
            if lands and not landing:
                self.call_from_thread(self.commands.step_failed)
            if not landing:
                self.call_from_thread(self._set_busy, None)
            self.call_from_thread(self.refresh_state)

    def _set_focus(self, pt: tuple) -> None:
        self.focus_pt = self._want_focus = (pt[0], pt[1])

    @quiet_when_gone
    def _set_busy(self, label: str | None) -> None:
        self.busy = label
        self._draw_status(self.focused_stop(), self.focused_proc())

    def _need_thread(self, what: str) -> tuple[int, int] | None:
        pid, tid = self.focus_pt
        if pid is None or tid is None:
            self.notify(f"{what}: focus a thread first (processes pane)", severity="warning")
            return None
        return pid, tid

    def _do_step(self, command: str = "step") -> None:
        label = command.replace("_", " ")
        pt = self._need_thread(label)
        if pt:
            self.commands.step_began(pt[0], self.state)
            self.run_command(label, self.session.step, *pt, command, lands=True)

    def _do_step_over(self) -> None:
        self._do_step("step_over")

    def _do_step_out(self) -> None:
        self._do_step("step_out")

    def _do_continue(self) -> None:
        self.run_command("continue", self.session.cont, self.focus_pt[0])

    def _do_pause(self) -> None:
        self.run_command("pause", self.session.pause, self.focus_pt[0])

    def action_toggle_breakpoint(self) -> None:
        src = self.query_one(SourceView)
        line = src.cursor_line if src.raw else None  # no source shown: a `pred` breakpoint everywhere
        self.run_command("breakpoint", self.session.toggle_breakpoint, src.file, line)

    def action_override(self) -> None:
        pt = self._need_thread("override")
        if not pt:
            return
        stop = self.focused_stop()
        if stop is None:
            self.notify("override: the focused thread is not stopped", severity="warning")
            return
        where = f"pid {pt[0]} t{pt[1]}, {stop.get('call')} ({stop['reason']})"

        def done(value: str | None) -> None:
            if value:
                token = int(value[1:]) if value.startswith("#") and value[1:].isdigit() else None
                self.run_command(
                    "override", self.session.override, pt[0], pt[1], token, None if token is not None else value
                )

        self.push_screen(OverrideScreen(where), done)

    @on(TopK.Chosen)
    def topk_chosen(self, ev: TopK.Chosen) -> None:
        pt = self._need_thread("override")
        if pt and self.focused_stop() is not None:
            self.run_command("override", self.session.override, pt[0], pt[1], ev.token, None)

    def _do_step_batch(self) -> None:
        self.run_command("step batch", self.session.step_batch)

    def action_step_mode(self) -> None:
        self.run_command("step mode", self.session.set_step_mode, not self.state.get("step_mode", False))

    def _do_step_back(self) -> None:
        pt = self._need_thread("step back")
        if pt:
            self.run_command("step back", self.session.step_back, *pt)

    def _do_relaunch(self) -> None:
        self.query_one(SourceView).forget()  # the file may have been edited: read it again
        self.run_command("relaunch", self.session.relaunch, self.focus_pt[0])

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "help":  # `?` typed into an input (the override box) is a character there
            from textual.widgets import Input

            return not isinstance(self.focused, Input) and not isinstance(self.screen, HelpScreen)
        return True

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_profile(self) -> None:
        self.push_screen(ProfileScreen(self.session, self.focus_pt[0]))

    def action_what_if(self) -> None:
        self.push_screen(WhatIfScreen(self.session, *self.focus_pt))

    def action_toggle_dark(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"

    def action_show_pane(self, key: str) -> None:
        self.query_one(Tabs).active = f"tab-{key}"
        self._activate(key)

    @on(Tabs.TabActivated)
    def tab_activated(self, ev: Tabs.TabActivated) -> None:
        if ev.tab is not None and ev.tab.id:
            self._activate(ev.tab.id.removeprefix("tab-"))

    def _activate(self, key: str) -> None:
        self.active_pane = key
        for k, _, _ in PANES:
            self.query_one(f"#pane-{k}").set_class(k == key, "-active")
        self.query_one(FOCUS_IN_PANE[key]).focus()

    @on(ProcTree.Focus)
    def focus_thread(self, ev: ProcTree.Focus) -> None:
        tid = ev.tid
        if tid is None:
            p = next((p for p in self.state.get("processes", []) if p["pid"] == ev.pid), None)
            stops = [s for s in self.state.get("stops", []) if s["pid"] == ev.pid]
            tid = stops[-1]["tid"] if stops else (p["threads"][0]["tid"] if p and p.get("threads") else None)
        self.focus_pt = (ev.pid, tid)
        self._draw()

    def on_unmount(self) -> None:
        try:
            self.session.close()
        except Exception:  # the screen is going away: nothing left to show it on
            log.warning("closing the TUI's session failed", exc_info=True)


def run_tui(session: Session, **kw) -> None:
    SymphonyLab(session, **kw).run()

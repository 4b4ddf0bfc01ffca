"""The Profile screen (F3): the LIP profiler's line table and flame view for an embedded session.

Profiling starts the first time the screen opens (a collector on the session's engine bus; it
stays attached for the session, so later openings show everything since), and the screen shows
the profile of the processes seen so far. A session against a server has no engine here to
profile, and says so.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..profiler import ProfileCollector


def session_profile_text(session: Any) -> str:
    """Start profiling the session's engine if needed; the profile so far as text."""
    engine = getattr(session, "engine", None)
    if engine is None:
        return "Profiling needs an embedded session (an engine in this process); this one has none."
    col = getattr(session, "profile_collector", None)
    if col is None:
        col = session.profile_collector = ProfileCollector().attach(engine.bus)
    prof = col.profile()
    if not prof.threads:
        return "Profiling from now on: run or step the program, then open this screen again (F3)."
    return f"{prof.table(25)}\n\nflame (inclusive time per frame)\n{prof.flame(40)}"


def stop_session_profile(session: Any) -> None:
    col = getattr(session, "profile_collector", None)
    if col is not None:
        col.detach()
        session.profile_collector = None


class ProfileScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,f3", "dismiss", "close"), Binding("r", "refresh_profile", "refresh")]

    def __init__(self, session: Any) -> None:
        super().__init__()
        self.session = session

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="profile-box"):
            yield Static(session_profile_text(self.session), id="profile-text", markup=False)

    def action_refresh_profile(self) -> None:
        self.query_one("#profile-text", Static).update(session_profile_text(self.session))

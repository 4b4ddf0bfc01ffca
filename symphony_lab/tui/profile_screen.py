"""The Profile screen (F3): the LIP profiler's line table and flame view of the focused process,
for an embedded session and one against a server alike (session_profile.py: the protocol's
`profile_*` commands). Profiling starts the first time the screen opens for a process, and
the screen shows everything since; `r` reads it again.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from .session_profile import session_profile_text


class ProfileScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,f3", "dismiss", "close"), Binding("r", "refresh_profile", "refresh")]

    def __init__(self, session: Any, pid: int | None = None) -> None:
        super().__init__()
        self.session, self.pid = session, pid

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="profile-box"):
            yield Static("reading the profile…", id="profile-text", markup=False)

    def on_mount(self) -> None:
        self.action_refresh_profile()

    def action_refresh_profile(self) -> None:
        out = self.query_one("#profile-text", Static)

        def work() -> None:  # a remote session answers over the network: off the UI thread
            text = session_profile_text(self.session, self.pid)
            self.app.call_from_thread(out.update, text)

        self.run_worker(work, thread=True, exclusive=True)

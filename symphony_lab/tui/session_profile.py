"""A TUI session's profiles, through the debugger protocol's `profile_*` commands — the same for
an embedded session and one against a server (docs/protocol.md, "Profiling and what-if").

The Profile screen profiles the focused process: the first time it opens for a process it sends
`profile_start`, then each time it reads `profile` and renders the JSON with the profiler's own
`table()` and `flame()`. Closing the session stops every profile it started.
"""

from __future__ import annotations

import logging
from typing import Any

from ..debugger.profiling import profile_from_body
from .session import SessionError

log = logging.getLogger(__name__)


def session_profile_text(session: Any, pid: int | None) -> str:
    """Start profiling process `pid` if the session has not yet; its profile so far as text."""
    request = getattr(session, "request", None)
    if request is None or getattr(session, "dbg", None) is None:
        return "Profiling needs a live debugger session; this one has none (a recording, or still starting)."
    if pid is None:
        return "Focus a process first (processes pane), then open this screen again (F3)."
    profiled: set[int] = session.profiled_pids
    try:
        if pid not in profiled:
            request("profile_start", pid=pid)
            profiled.add(pid)
        body = request("profile", pid=pid, top=25)
    except (SessionError, TimeoutError) as e:  # an ended process never profiled, a lost connection
        return f"Profile of process {pid}: {e}"
    prof = profile_from_body(body)
    if not prof.threads:
        return f"Profiling from now on (process {pid}): run or step the program, then open this screen again (F3)."
    when = "final" if body["done"] else "so far (r refreshes)"
    return f"Profile of process {pid}, {when}\n\n{prof.table(25)}\n\nflame (inclusive time per frame)\n{prof.flame(40)}"


def stop_session_profiles(session: Any) -> None:
    """Stop the profiles the session started (their collectors detach from the engine)."""
    for pid in list(getattr(session, "profiled_pids", ())):
        try:
            session.request("profile_stop", pid=pid)
        except (SessionError, TimeoutError) as e:  # the profile was dropped already, or the connection is gone
            log.info("stopping the profile of process %s: %s", pid, e)
    getattr(session, "profiled_pids", set()).clear()


__all__ = ["session_profile_text", "stop_session_profiles"]

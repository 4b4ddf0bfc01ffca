"""Symphony Lab in the terminal: a Textual app that single-steps LIPs and shows the engine.

    symphony-lab tui examples/lips/prefix_parallel.py:prefix_parallel
    symphony-lab tui --server ws://127.0.0.1:8000/v1/debug

`SymphonyLab(session)` is the app; a `Session` is what it drives — `EmbeddedSession` (an
engine in this process), `DebuggerSession` over any debugger (in-process or `RemoteDebugger`),
or `StaticSession` (a saved snapshot). The app only talks to the debugger's protocol.
"""

from .app import SymphonyLab, run_tui
from .debug_session import DebuggerSession
from .embedded import EmbeddedSession
from .session import Session, SessionError, StaticSession

__all__ = ["DebuggerSession", "EmbeddedSession", "Session", "SessionError", "StaticSession", "SymphonyLab", "run_tui"]

"""Symphony Lab's debugger: stop LIPs at system calls, step `pred`, override tokens, record and
replay, export traces — one JSON protocol for every front-end (docs/protocol.md).

    from symphony_lab.debugger import Debugger
    dbg = Debugger(engine, stop_on_entry=True)
    pid = dbg.launch(complete, "The capital of France is", max_tokens=16)["pid"]
    dbg.wait_stopped(pid); dbg.step(pid, 1); print(dbg.wait_stopped(pid)["result"]["topk"])
"""

from .breakpoints import Breakpoint
from .core import Debugger, DebuggerError, Stop, edit_dist
from .protocol import COMMANDS, EVENTS, handle_command
from .record import Recording
from .trace import chrome_trace, validate_trace
from .transport import DebugServer, RemoteDebugger, RemoteError, connect, starlette_route

__all__ = [
    "COMMANDS",
    "EVENTS",
    "Breakpoint",
    "DebugServer",
    "Debugger",
    "DebuggerError",
    "Recording",
    "RemoteDebugger",
    "RemoteError",
    "Stop",
    "chrome_trace",
    "connect",
    "edit_dist",
    "handle_command",
    "starlette_route",
    "validate_trace",
]

"""Debug LIPs from any editor: a Debug Adapter Protocol server (`symphony-lab dap`, docs/ide.md).

The adapter drives Symphony Lab's debugger (symphony_lab.debugger) through its JSON protocol,
in this process or on a `symphony serve --plugin debugger` server, and speaks DAP to the editor:

    framing.py        Content-Length frames on stdio or a socket
    config.py         a launch / attach configuration, checked
    backend.py        the debugger: in-process (an Engine) or remote (a server)
    session.py        one session: the requests, execution control
    stop_events.py    the debugger's events as DAP events: stops shown or passed over, step landings
    stop_requests.py  stack, scopes, variables, setVariable, evaluate at a stop
    inspect_views.py  the stack frames and the Locals / Model / KV variables
    breakpoints.py    source, function (syscall) breakpoints: conditions and hit counts
    console.py        the debug console's commands (override, topk, what-if)
    postmortem.py     exception breakpoints: a failed program's traceback
    server.py         serving over stdio and TCP
"""

from .config import ConfigError, DebugConfig, parse_config
from .server import serve_stdio, serve_tcp
from .session import CAPABILITIES, DapSession

__all__ = ["CAPABILITIES", "ConfigError", "DapSession", "DebugConfig", "parse_config", "serve_stdio", "serve_tcp"]

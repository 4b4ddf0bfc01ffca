"""The debugger's one protocol: JSON commands in, JSON responses and events out.

The message shapes follow the Debug Adapter Protocol:

    request   {"type": "request", "seq": 7, "command": "step", "arguments": {"pid": 3, "tid": 1}}
    response  {"type": "response", "request_seq": 7, "command": "step", "success": true, "body": {...}}
              {"type": "response", "request_seq": 7, "command": "step", "success": false,
               "message": "no stopped thread in process 3", "error": "DebuggerError"}
    event     {"type": "event", "event": "stopped", "seq": 12, "ts": 3.14, "body": {...}}

`handle_command` is the single entry point every transport calls (in-process queue, the
WebSocket transport in transport.py, a Jupyter comm). docs/protocol.md lists every command,
its arguments and its body, and every event.
"""

from __future__ import annotations

import json
from typing import Any

from .protocol_bodies import (
    ProfileBody,
    ProfileLineBody,
    ProfileStackBody,
    ProfileThreadBody,
    ProfilingBody,
    SamplerSettings,
    WhatIfBody,
)
from .protocol_schema import ProtocolError, check_arguments
from .viewdata import jsonable

PROTOCOL_VERSION = 1

# command name -> Debugger method name
COMMANDS: dict[str, str] = {
    "initialize": "",
    "detach": "detach",
    "launch": "launch",
    "restart": "restart",
    "continue": "continue_",
    "step": "step",
    "step_over": "step_over",
    "step_out": "step_out",
    "pause": "pause",
    "set_stop_on_entry": "set_stop_on_entry",
    "set_breakpoint": "set_breakpoint",
    "remove_breakpoint": "remove_breakpoint",
    "enable_breakpoint": "enable_breakpoint",
    "clear_breakpoints": "clear_breakpoints",
    "breakpoints": "breakpoints",
    "threads": "threads",
    "stops": "stops",
    "stack": "stack",
    "tokens": "tokens",
    "token_texts": "token_texts",
    "kv": "kv",
    "dist": "dist",
    "override": "override",
    "edit_dist": "edit_dist",
    "verify_kv": "verify_kv",
    "kv_tree": "kv_tree",
    "timeline": "timeline",
    "trace": "trace",
    "watch": "watch",
    "unwatch": "unwatch",
    "record": "record",
    "recording": "recording",
    "save_recording": "save_recording",
    "replay": "replay",
    "replay_status": "replay_status",
    "step_back": "step_back",
    "scheduler_step_mode": "scheduler_step_mode",
    "pending_batch": "pending_batch",
    "wait_batch_pending": "wait_batch_pending",
    "step_batch": "step_batch",
    "wait_stopped": "wait_stopped",
    "wait_process": "wait_process",
    # the profiler and the what-if explorer (parts of the Debugger: profiling.py, whatif_command.py)
    "profile_start": "profile_start",
    "profile": "profile",
    "profile_stop": "profile_stop",
    "what_if": "what_if",
}

EVENTS = [
    # from the debugger
    "stopped",
    "continued",
    "overridden",
    "taken",
    "batch_pending",
    "replay_diverged",
    "view",
    # forwarded from the engine's event bus
    "syscall_enter",
    "syscall_exit",
    "process_start",
    "process_exit",
    "thread_start",
    "thread_exit",
    "batch",
]

# Commands a remote client may not use unless the transport allows it: `launch` imports and runs
# any "module:function"; `save_recording` / `replay` with a path touch the server's files.
PRIVILEGED = {"launch": "allow_launch", "save_recording": "allow_files"}


def encode_message(m: dict) -> str:
    """One protocol message as the compact JSON text of a WebSocket frame."""
    return json.dumps(m, separators=(",", ":"), allow_nan=False, default=str)


def _call(dbg, command: str, args: dict) -> Any:
    if command == "set_breakpoint" and "where" in args:
        raise ProtocolError(
            "set_breakpoint: 'where' (a Python predicate) is in-process only; use tokens_contain or text_contains"
        )
    check_arguments(command, args)
    if command == "initialize":
        return {
            "protocol_version": PROTOCOL_VERSION,
            "commands": sorted(COMMANDS),
            "events": EVENTS,
            "capabilities": {
                "non_stop": True,
                "stop_scope": dbg.stop_scope,
                "scheduler_step_mode": True,
                "record_replay": True,
                "step_back": True,
                "overrides": ["token", "ban", "force", "bias"],
                "trace_format": "chrome-trace-event",
                "profile": True,
                "what_if": True,
            },
        }
    method = getattr(dbg, COMMANDS[command])
    if command == "launch":
        a = dict(args)
        fn, pos, kw = a.pop("fn"), a.pop("args", []), a.pop("kwargs", {})
        return method(fn, *pos, **a, **kw)
    return method(**args)


def handle_command(dbg, msg: dict, *, allow_launch: bool = True, allow_files: bool = True) -> dict:
    """Run one request against `dbg` (a `Debugger`) and return the response message."""
    seq = msg.get("seq") if isinstance(msg, dict) else None
    command = msg.get("command") if isinstance(msg, dict) else None
    resp: dict = {"type": "response", "request_seq": seq, "command": command}
    try:
        if not isinstance(msg, dict):
            raise ProtocolError("a request must be a JSON object")
        if msg.get("type", "request") != "request":
            raise ProtocolError(f"expected type 'request', got {msg.get('type')!r}")
        if command not in COMMANDS:
            raise ProtocolError(f"unknown command {command!r}; known: {', '.join(sorted(COMMANDS))}")
        args = msg.get("arguments") or {}
        if not isinstance(args, dict):
            raise ProtocolError("arguments must be a JSON object")
        flag = PRIVILEGED.get(command)
        if flag is not None and not {"allow_launch": allow_launch, "allow_files": allow_files}[flag]:
            raise ProtocolError(f"{command} is not allowed on this connection")
        if command == "replay" and isinstance(args.get("source"), str) and not allow_files:
            raise ProtocolError("replay from a file is not allowed on this connection")
        body = _call(dbg, command, args)
        resp.update(success=True, body=jsonable(body))
    except Exception as e:  # every failure is an answer, never a dropped connection
        resp.update(success=False, message=str(e) or type(e).__name__, error=type(e).__name__)
    return resp


__all__ = [
    "COMMANDS",
    "EVENTS",
    "PROTOCOL_VERSION",
    "ProfileBody",
    "ProfileLineBody",
    "ProfileStackBody",
    "ProfileThreadBody",
    "ProfilingBody",
    "ProtocolError",
    "SamplerSettings",
    "WhatIfBody",
    "encode_message",
    "handle_command",
]

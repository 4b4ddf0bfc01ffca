"""What a front-end (the JupyterLab sidebar, a notebook widget) may send, checked before it runs.

A message is one debugger request in the shape of docs/protocol.md —
`{"type": "request", "seq": 7, "command": "step", "arguments": {"pid": 3}}` — or one of the
few commands the notebook's lab layer answers itself (`LAB_COMMANDS`). Anything else is
refused with a `MalformedMessage` that says exactly what was wrong, and never reaches the
engine. Both the jupyter-server extension and the kernel-side bridge run this check, so a
widget's message that bypasses the server is held to the same rules.
"""

from __future__ import annotations

import json
from typing import Any

# The debugger's commands (symphony_lab.debugger.protocol.COMMANDS / PRIVILEGED), named here so the
# Jupyter server process can check messages without importing the debugger (and torch with it);
# tests/test_jupyter_server.py keeps the two lists equal.
COMMANDS = frozenset(
    {
        "initialize",
        "detach",
        "launch",
        "restart",
        "continue",
        "step",
        "step_over",
        "step_out",
        "pause",
        "set_stop_on_entry",
        "set_breakpoint",
        "remove_breakpoint",
        "enable_breakpoint",
        "clear_breakpoints",
        "breakpoints",
        "threads",
        "stops",
        "stack",
        "tokens",
        "token_texts",
        "kv",
        "dist",
        "override",
        "edit_dist",
        "verify_kv",
        "kv_tree",
        "timeline",
        "trace",
        "watch",
        "unwatch",
        "record",
        "recording",
        "save_recording",
        "replay",
        "replay_status",
        "step_back",
        "scheduler_step_mode",
        "pending_batch",
        "wait_batch_pending",
        "step_batch",
        "wait_stopped",
        "wait_process",
        "profile_start",
        "profile",
        "profile_stop",
        "what_if",
    }
)
PRIVILEGED = frozenset({"launch", "save_recording"})

MAX_MESSAGE_BYTES = 1 << 20

# Commands the lab layer (symphony_lab.lab) answers itself, with their allowed arguments.
LAB_COMMANDS: dict[str, set[str]] = {
    "lab_view": {"pid", "since"},  # the whole picture: processes, stops, breakpoints, KV tree, timeline
    "relaunch": {"pid", "stop_on_entry"},  # run a process again with the cell's *current* definition
    "cancel": {"pid"},  # cancel a running process
    "set_view": {"pid", "scope", "kv_index"},  # a run's widget: its process or the whole engine; a kept KV tree
}

# Debugger commands a browser may not send: they run arbitrary code by import path, touch the
# kernel's files, or block a connection for a long time.
REFUSED: dict[str, str] = {
    "launch": "it imports and runs code by name; launch LIPs from a notebook cell with lab.run",
    "save_recording": "it writes the kernel's files; use lab.debugger.save_recording in a cell",
    "detach": "it would detach the notebook's debugger",
}

_TOP_LEVEL = {"type", "seq", "command", "arguments"}


class MalformedMessage(ValueError):
    """A front-end message that is not a well-formed request; the text says what is wrong."""


def parse_message(raw: str | bytes | dict) -> dict:
    """Parse and check one front-end message; return it as a request dict or raise MalformedMessage."""
    if isinstance(raw, (bytes, bytearray)):
        if len(raw) > MAX_MESSAGE_BYTES:
            raise MalformedMessage(f"malformed message: {len(raw)} bytes is over the {MAX_MESSAGE_BYTES}-byte limit")
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MalformedMessage(f"malformed message: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if isinstance(raw, str):
        if len(raw) > MAX_MESSAGE_BYTES:
            raise MalformedMessage(f"malformed message: {len(raw)} characters is over the {MAX_MESSAGE_BYTES} limit")
        try:
            msg: Any = json.loads(raw)
        except json.JSONDecodeError as e:
            raise MalformedMessage(
                f"malformed message: not JSON ({e.msg} at line {e.lineno} column {e.colno})"
            ) from None
    else:
        msg = raw
    return check_request(msg)


def check_request(msg: Any) -> dict:
    """Check the shape of a parsed request (see `parse_message`)."""
    if not isinstance(msg, dict):
        raise MalformedMessage(f"malformed message: expected a JSON object, got {_kind(msg)}")
    extra = sorted(set(msg) - _TOP_LEVEL)
    if extra:
        raise MalformedMessage(f"malformed message: unknown field(s) {extra}; a request has {sorted(_TOP_LEVEL)}")
    if msg.get("type", "request") != "request":
        raise MalformedMessage(f"malformed message: 'type' must be 'request', got {msg.get('type')!r}")
    seq = msg.get("seq", 0)
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise MalformedMessage(f"malformed message: 'seq' must be a non-negative integer, got {seq!r}")
    if "command" not in msg:
        raise MalformedMessage("malformed message: missing 'command'")
    cmd = msg["command"]
    if not isinstance(cmd, str):
        raise MalformedMessage(f"malformed message: 'command' must be a string, got {_kind(cmd)}")
    if cmd in REFUSED:
        raise MalformedMessage(f"command {cmd!r} not allowed here: {REFUSED[cmd]}")
    if cmd not in COMMANDS and cmd not in LAB_COMMANDS:
        known = sorted((set(COMMANDS) | set(LAB_COMMANDS)) - set(REFUSED))
        raise MalformedMessage(f"malformed message: unknown command {cmd!r}; known: {', '.join(known)}")
    args = msg.get("arguments", {})
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise MalformedMessage(f"malformed message: 'arguments' must be a JSON object, got {_kind(args)}")
    if cmd in LAB_COMMANDS:
        unknown = sorted(set(args) - LAB_COMMANDS[cmd])
        if unknown:
            raise MalformedMessage(
                f"malformed message: {cmd}: unknown argument(s) {unknown}; it takes {sorted(LAB_COMMANDS[cmd])}"
            )
        pid = args.get("pid")
        if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool)):
            raise MalformedMessage(f"malformed message: {cmd}: 'pid' must be an integer, got {pid!r}")
    for name in ("pid", "tid", "token", "fid", "id"):
        v = args.get(name)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise MalformedMessage(f"malformed message: {cmd}: '{name}' must be an integer, got {v!r}")
    return {"type": "request", "seq": seq, "command": cmd, "arguments": args}


def error_response(msg_or_text: Any, error: Exception | str) -> dict:
    """The response a transport sends back for a refused message (same shape as a command failure)."""
    seq = msg_or_text.get("seq") if isinstance(msg_or_text, dict) else None
    cmd = msg_or_text.get("command") if isinstance(msg_or_text, dict) else None
    return {
        "type": "response",
        "request_seq": seq if isinstance(seq, int) else None,
        "command": cmd if isinstance(cmd, str) else None,
        "success": False,
        "message": str(error),
        "error": "MalformedMessage",
    }


def _kind(x: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(x), "a number" if isinstance(x, (int, float)) else type(x).__name__
    )

"""Launching a program: a checked `run` request (uploaded program or source, entry, arguments,
limits) becomes an engine process — in a sandboxed worker, or in-process for a trusted user —
with its record in the registry. The server's own built-in LIPs start here too."""

from __future__ import annotations

import ast
import math
import re

from .. import threadsafe_ast
from ..sandbox.confine import SandboxSpec
from ..sandbox.job import SandboxJob
from ..sandbox.twin import inprocess_lip, sandboxed_lip
from ..sched.process import Limits
from .records import MAX_MESSAGE_BYTES, ProcessRecord
from .state import State
from .users import User
from .validate import BadRequest, check_fields, check_text

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_LIMIT_FIELDS = {
    "wall_time": ((int, float), False),
    "max_tokens": ((int,), False),
    "cpu_seconds": ((int,), False),
    "memory_mb": ((int,), False),
    "max_threads": ((int,), False),
}

RUN_FIELDS = {
    "program": ((str,), False),
    "source": ((str,), False),
    "entry": ((str,), False),
    "args": ((list,), False),
    "kwargs": ((dict,), False),
    "name": ((str,), False),
    "priority": ((int,), False),
    "limits": ((dict,), False),
    "sandbox": ((bool,), False),
}


def _positive(v, what: str):
    if v is not None and not (math.isfinite(v) and v > 0):  # NaN compares false to everything: refuse it here
        raise BadRequest(422, f"limits.{what} must be a finite number > 0, got {v}", param=f"limits.{what}")
    return v


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
        else:  # assignments, and defs under a top-level if/try/with
            for sub in ast.walk(n):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.add(sub.id)
                elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(sub.name)
    return names


def check_program(source: str, entry: str | None, where: str) -> int | None:
    """A program that cannot run is refused at submission (400): a syntax error, or no top-level
    `entry`. Returns the line of `def entry` (for a debugger's stop on entry)."""
    try:
        tree = threadsafe_ast.parse(source, "<program>")
    except SyntaxError as e:
        raise BadRequest(
            400, f"{where}: the program has a syntax error at line {e.lineno}: {e.msg}", param="source"
        ) from None
    except ValueError as e:  # NUL bytes
        raise BadRequest(400, f"{where}: the program cannot be compiled: {e}", param="source") from None
    except (RecursionError, MemoryError):  # the parser's own stack: `-` * 200000 + `1`
        raise BadRequest(
            400, f"{where}: the program cannot be compiled: an expression is nested too deeply", param="source"
        ) from None
    if entry is None:
        return None
    if entry not in _top_level_names(tree):
        raise BadRequest(400, f"{where}: the program defines no top-level function {entry!r}", param="entry")
    return next((n.lineno for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == entry), None)


def launch_program(state: State, user: User, body: dict, where: str) -> ProcessRecord:
    """Launch a program from a checked `run` request; returns its record."""
    if state.draining:
        raise BadRequest(503, "the server is shutting down; it starts no new processes", type="unavailable")
    check_fields(body, RUN_FIELDS, where)
    limits = check_fields(body.get("limits", {}), _LIMIT_FIELDS, f"{where}: limits")
    if "program" in body:
        if "source" in body:
            raise BadRequest(422, f"{where}: give either 'program' (an uploaded program's id) or 'source', not both")
        prog = state.programs.get(user.name, {}).get(body["program"])
        if prog is None:
            raise BadRequest(404, f"no program {body['program']!r} uploaded by user {user.name!r}", type="not_found")
        source, entry = prog.source, body.get("entry") or prog.entry
        name = body.get("name") or prog.name
    elif "source" in body:
        source, entry = body["source"], body.get("entry")
        name = body.get("name") or entry
    else:
        raise BadRequest(
            422, f"{where}: give 'program' (an uploaded program's id) or 'source' with 'entry'", param="source"
        )
    for field, text in (("source", source), ("entry", entry), ("name", name)):
        check_text(text, field, where)
    if len(source.encode()) > state.config.max_source:
        raise BadRequest(
            413,
            f"program source of {len(source.encode())} bytes is over the limit of {state.config.max_source} bytes",
            type="payload_too_large",
        )
    if not entry or not IDENT.match(entry):
        raise BadRequest(
            422, f"{where}: 'entry' must name the program's LIP function (an identifier), got {entry!r}", param="entry"
        )
    def_line = check_program(source, entry, where)
    name = str(name or entry)[:80]
    sandboxed = body.get("sandbox", state.config.sandbox)
    if not sandboxed and not user.trusted and state.config.sandbox:
        raise BadRequest(403, f"user {user.name!r} may not run programs outside the sandbox", type="permission_error")
    if sandboxed and state.sandbox is None:
        raise BadRequest(503, "the sandbox is not running on this server", type="unavailable")
    priority = max(-10, min(10, body.get("priority", 0)))
    wall = _positive(limits.get("wall_time"), "wall_time") or state.config.default_wall_time
    eng_limits = Limits(
        max_threads=min(
            _positive(limits.get("max_threads"), "max_threads") or state.config.max_threads, state.config.max_threads
        ),
        max_wall_time=min(wall, state.config.default_wall_time),
        max_tokens=_positive(limits.get("max_tokens"), "max_tokens"),
        max_pages=user.max_pages,
    )
    args, kwargs = body.get("args", []), body.get("kwargs", {})
    sink: list[ProcessRecord] = []
    pending_output: list[tuple[str, str]] = []

    def on_stdout(stream: str, text: str) -> None:
        if sink:
            sink[0].add_output(stream, text)
        else:
            pending_output.append((stream, text))

    over = {k: limits[k] for k in ("cpu_seconds", "memory_mb") if k in limits}
    for k in ("cpu_seconds", "memory_mb"):
        _positive(over.get(k), k)
        if getattr(user, k) is not None:
            over[k] = min(over.get(k, getattr(user, k)), getattr(user, k))
    if state.sandbox is not None:
        over["max_threads"] = eng_limits.max_threads + 8  # the worker's own threads besides the LIP's
        spec = state.sandbox.spec_for(over)
    else:
        spec = SandboxSpec()
    job = SandboxJob(
        source,
        entry,
        args,
        kwargs,
        name,
        spec,
        before_pred=state.quotas.before_pred,
        on_stdout=on_stdout,
        max_message_bytes=MAX_MESSAGE_BYTES,
        hold_memory=lambda u, n, what: state.registry.budget.hold(u, "logits", n, what),
    )
    with state.launch_lock:
        state.quotas.check_launch(user, state.registry.live(user.name))
        if sandboxed:
            proc = state.engine.launch(
                sandboxed_lip, state.sandbox, job, user=user.name, name=name, priority=priority, limits=eng_limits
            )
        else:
            proc = state.engine.launch(
                inprocess_lip, job, user=user.name, name=name, priority=priority, limits=eng_limits
            )
        proc.entry_location = (f"<lip {name}>", def_line)  # for a debugger's stop on entry
        rec = ProcessRecord(proc, user.name, "program", bool(sandboxed), state.loop, state.registry.usage)
        state.registry.add(rec)
    sink.append(rec)
    for s, t in pending_output:
        rec.add_output(s, t)
    return rec


def launch_builtin(state: State, user: User, fn, kwargs: dict, name: str) -> ProcessRecord:
    """Run one of the server's own LIPs (in-process) as `user`."""
    if state.draining:
        raise BadRequest(503, "the server is shutting down; it starts no new processes", type="unavailable")
    limits = Limits(max_threads=4, max_wall_time=state.config.default_wall_time, max_pages=user.max_pages)
    with state.launch_lock:
        state.quotas.check_launch(user, state.registry.live(user.name))
        quota = state.quotas.before_pred
        kwargs = {**kwargs, "before_pred": lambda n: quota(user.name, n)}
        proc = state.engine.launch(fn, user=user.name, name=name, limits=limits, kwargs=kwargs)
        rec = ProcessRecord(proc, user.name, "builtin", False, state.loop)
        state.registry.add(rec)
    return rec


__all__ = ["IDENT", "RUN_FIELDS", "check_program", "launch_builtin", "launch_program"]

"""What one user's debugger connection may see and do on a shared server.

An engine has one `Debugger`; on a server with several users each connection speaks through a
`UserScope`, which keeps a user to their own processes:

- every command that names a process (`pid`) must name one of theirs, and commands that would
  otherwise act on every process (`continue`, `pause`, `record` without a pid) must name one;
- breakpoints must be bound to one of their processes (a breakpoint on every `pred` would stop
  other users' programs), and only their own breakpoints are listed, changed or removed;
- views are filtered: `threads` and `stops` list their processes only; the KV tree holds the
  files their processes have open or that live in their namespace or /shared; batches in
  the timeline keep every member's token count (the load is no secret) but name only their
  own processes (others appear as `pid: null, user: null`);
- the batch waiting at the scheduler's gate is shown like the timeline, redacted;
- engine-wide controls (scheduler step mode, stepping batches, stop-on-entry for every new
  process, clearing all breakpoints, detaching, the whole-engine trace) and server-side code
  or files (`launch` by module name, saving recordings) are refused, naming the reason;
- events are filtered the same way.

`FULL_ACCESS` is the policy of a connection that may do everything (a loopback server without
tokens, or a trusted user, who can already run code inside the server).
"""

from __future__ import annotations

import copy
from typing import Any

from .protocol import handle_command

# commands that act on the whole engine or on the server's own code and files
ENGINE_WIDE = {
    "scheduler_step_mode",
    "step_batch",
    "set_stop_on_entry",
    "clear_breakpoints",
    "detach",
    "trace",
    "launch",
    "save_recording",
}
# commands whose `pid` argument is required for a scoped user (without it they act on everyone)
NEEDS_PID = {
    "continue",
    "pause",
    "record",
    "step",
    "step_over",
    "step_out",
    "stack",
    "tokens",
    "dist",
    "override",
    "edit_dist",
    "restart",
    "recording",
    "replay_status",
    "step_back",
    "wait_stopped",
    "wait_process",
    "profile_start",
    "profile",
    "profile_stop",
    "what_if",
}


class ScopeError(Exception):
    """A scoped connection asked for something outside its user's processes."""


class FullAccess:
    def __init__(self, *, allow_launch: bool = False, allow_files: bool = False) -> None:
        self.allow_launch, self.allow_files = allow_launch, allow_files

    def handle(self, dbg, msg: Any) -> dict:
        return handle_command(dbg, msg, allow_launch=self.allow_launch, allow_files=self.allow_files)

    def event(self, dbg, msg: dict) -> dict | None:
        return msg


FULL_ACCESS = FullAccess()


def _fail(msg: Any, message: str) -> dict:
    seq = msg.get("seq") if isinstance(msg, dict) else None
    command = msg.get("command") if isinstance(msg, dict) else None
    return {
        "type": "response",
        "request_seq": seq,
        "command": command,
        "success": False,
        "message": message,
        "error": "ScopeError",
    }


class UserScope:
    def __init__(self, user: str) -> None:
        self.user = user

    # --- ownership -------------------------------------------------------------------------
    def owns(self, dbg, pid: Any) -> bool:
        proc = dbg.runtime.processes.get(pid) if isinstance(pid, int) else None
        return proc is not None and proc.user == self.user

    def _own_pids(self, dbg) -> set[int]:
        return {pid for pid, p in list(dbg.runtime.processes.items()) if p.user == self.user}

    def _own_files(self, dbg) -> set[int]:
        fids = set()
        for p in list(dbg.runtime.processes.values()):
            if p.user == self.user:
                fids.update(h.file.fid for h in list(p.handles))
        return fids

    def _file_visible(self, f: dict, own_files: set[int]) -> bool:
        path = f.get("path") or ""
        return (
            f["file"] in own_files
            or path.startswith(f"/users/{self.user}/")
            or path.startswith("/shared/")
            or f.get("owner") == self.user
        )

    # --- commands --------------------------------------------------------------------------
    def check(self, dbg, command: str, args: dict) -> None:
        if command in ENGINE_WIDE:
            raise ScopeError(
                f"{command} acts on the whole engine; it needs an admin connection (a trusted "
                f"user), and {self.user!r} is scoped to their own processes"
            )
        if command in NEEDS_PID and args.get("pid") is None:
            raise ScopeError(f"{command} needs a pid here ({self.user!r} may act only on their own processes)")
        if command == "what_if" and args.get("source") is not None:
            raise ScopeError(
                "what_if: source (a KV file path) needs an admin connection; leave it out and the "
                "prefix is computed from the recording"
            )
        if command == "replay" and not isinstance(args.get("source"), int):
            raise ScopeError("replay needs source: the pid of one of your recorded processes")
        pid = args.get("source") if command == "replay" else args.get("pid")
        if pid is not None and not self.owns(dbg, pid):
            raise ScopeError(f"process {pid} is not one of {self.user!r}'s processes")
        if command == "set_breakpoint" and not self.owns(dbg, args.get("pid")):
            raise ScopeError(
                "set a breakpoint on one of your processes: give pid (launch with stop_on_entry "
                "to bind breakpoints before the first line runs)"
            )
        if command in ("remove_breakpoint", "enable_breakpoint"):
            bp = next((b for b in dbg.breakpoints()["breakpoints"] if b["id"] == args.get("id")), None)
            if bp is not None and not self.owns(dbg, bp.get("pid")):
                raise ScopeError(f"breakpoint {args.get('id')} is not one of {self.user!r}'s")
        if command in ("kv", "verify_kv") and args.get("fid") is not None:
            own = self._own_files(dbg)
            view = dbg.kv(fid=args["fid"]) if command == "verify_kv" else None
            if args["fid"] not in own and not (view and self._file_visible(view, own)):
                raise ScopeError(f"KV file {args['fid']} is not open in any of {self.user!r}'s processes")
        if command in ("watch", "unwatch") and args.get("view") not in (None, "kv_tree", "timeline"):
            raise ScopeError(f"unknown view {args.get('view')!r}")

    def handle(self, dbg, msg: Any) -> dict:
        if isinstance(msg, dict) and msg.get("command") is not None:
            args = msg.get("arguments") or {}
            if isinstance(args, dict):
                try:
                    self.check(dbg, msg["command"], args)
                except ScopeError as e:
                    return _fail(msg, str(e))
        resp = handle_command(dbg, msg, allow_launch=False, allow_files=False)
        if resp.get("success") and resp.get("body") is not None:
            resp["body"] = self.filter_body(dbg, resp["command"], resp["body"])
        if resp.get("success") and resp["command"] == "kv" and "file" in (resp.get("body") or {}):
            if not self._file_visible(resp["body"], self._own_files(dbg)):
                return _fail(msg, f"KV file {resp['body']['file']} is not one of {self.user!r}'s")
        return resp

    # --- views -----------------------------------------------------------------------------
    def filter_body(self, dbg, command: str, body: Any) -> Any:
        if command == "threads":
            return {
                **body,
                "processes": [
                    p for p in body["processes"] if self.owns(dbg, p.get("pid")) or p.get("user") == self.user
                ],
            }
        if command == "stops":
            return {**body, "stops": [s for s in body["stops"] if self.owns(dbg, s.get("pid"))]}
        if command == "breakpoints":
            return {**body, "breakpoints": [b for b in body["breakpoints"] if self.owns(dbg, b.get("pid"))]}
        if command == "kv_tree":
            return self.filter_kv_tree(dbg, body)
        if command == "timeline":
            return self.filter_timeline(dbg, body)
        if command in ("pending_batch", "wait_batch_pending") and isinstance(body.get("pending"), dict):
            pend = body["pending"]
            if isinstance(pend.get("members"), list):
                pids = self._own_pids(dbg)
                pend = {**pend, "members": [self._redact_member(m, pids) for m in pend["members"]]}
            return {**body, "pending": pend}
        return body

    def filter_kv_tree(self, dbg, tree: dict) -> dict:
        own = self._own_files(dbg)
        files = [f for f in tree["files"] if self._file_visible(f, own)]
        keep = {f["file"] for f in files}
        return {
            **tree,
            "files": files,
            "edges": [e for e in tree["edges"] if e[1] in keep],
            "roots": [r for r in tree["roots"] if r in keep],
            "shared_pages": sorted({p["page"] for f in files for p in f.get("pages", []) if p.get("shared_with")}),
        }

    def _redact_member(self, m: dict, pids: set[int]) -> dict:
        if m.get("pid") in pids:
            return m
        return {k: (None if k in ("pid", "tid", "user", "file") else v) for k, v in m.items()}

    def filter_timeline(self, dbg, tl: dict) -> dict:
        pids = self._own_pids(dbg)
        out = copy.deepcopy(tl)
        for b in out.get("batches", []):
            if isinstance(b.get("members"), list):
                b["members"] = [self._redact_member(m, pids) if isinstance(m, dict) else m for m in b["members"]]
        out["queue"] = [self._redact_member(q, pids) for q in out.get("queue", [])]
        return out

    # --- events ----------------------------------------------------------------------------
    def event(self, dbg, msg: dict) -> dict | None:
        name, body = msg.get("event"), msg.get("body") or {}
        if name == "batch":  # the record is the event's args
            pids = self._own_pids(dbg)
            rec = body.get("args") or {}
            members = rec.get("members")
            if isinstance(members, list):
                rec = {**rec, "members": [self._redact_member(m, pids) if isinstance(m, dict) else m for m in members]}
            return {**msg, "body": {**body, "args": rec}}
        if name == "view":
            view = body.get("view")
            data = body.get("data")
            if view == "kv_tree" and isinstance(data, dict):
                return {**msg, "body": {**body, "data": self.filter_kv_tree(dbg, data)}}
            if view == "timeline" and isinstance(data, dict):
                return {**msg, "body": {**body, "data": self.filter_timeline(dbg, data)}}
            return None
        pid = body.get("pid")
        if pid is None:
            stop = body.get("stop") if isinstance(body.get("stop"), dict) else None
            pid = stop.get("pid") if stop else None
        if pid is None:
            return None  # an event about nobody in particular: engine-wide, not for a scoped user
        return msg if self.owns(dbg, pid) else None


__all__ = ["ENGINE_WIDE", "FULL_ACCESS", "FullAccess", "NEEDS_PID", "ScopeError", "UserScope"]

"""DAP breakpoints on top of the debugger's syscall breakpoints.

- A **source line** breakpoint is a debugger breakpoint on the syscall named on that line
  (`sym.pred(...)` → `pred`; a line calling a library, e.g. `generate(sym, ...)`, → any syscall)
  whose stops elsewhere the adapter resumes at once: it stops where that line makes a syscall.
- A **function** breakpoint names a syscall (`pred`, `kv_fork`, `send`, … or `*`).
- Both take a `condition` (a Python expression over the frame's locals as the debugger shows
  them — numbers, strings and lists as values, the rest as their text — and `tid`, `preds`,
  `call`, `n_tokens`, `text`: the input tokens' text) and a `hitCondition` (`5`, `==5`, `>=5`,
  `%5`). As in DAP, the hit count advances only when the condition holds.
- The debugger breakpoints are bound to the program's process; `bind(pid)` moves them (after a
  step back, the program runs on as a new process).
"""

from __future__ import annotations

import ast
import itertools
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .backend import BackendError

log = logging.getLogger(__name__)

_SYSCALL_ON_LINE = re.compile(r"\bsym\.(\w+)\s*\(")
_HIT = re.compile(r"^\s*(==|>=|%)?\s*(\d+)\s*$")
SAFE_BUILTINS = {
    f.__name__: f for f in (len, min, max, abs, any, all, sum, int, str, float, bool, round, sorted, list, set)
}


def parse_hit_condition(text: str | None) -> tuple[str, int] | None:
    """`"5"` / `"==5"` → ("==", 5); `">=5"`, `"%5"`; None for none; ValueError for anything else."""
    if text is None or not str(text).strip():
        return None
    m = _HIT.match(str(text))
    if m is None or int(m.group(2)) < 1:
        raise ValueError(f"hit condition must be N, ==N, >=N or %N with N >= 1, got {text!r}")
    return (m.group(1) or "=="), int(m.group(2))


def _literal(v: Any) -> Any:
    if not isinstance(v, str):
        return v
    try:
        return ast.literal_eval(v)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return v


@dataclass
class DapBreakpoint:
    id: int
    call: str  # the syscall it stops at ("*": any)
    path: str | None = None  # source breakpoints: the file's real path and line
    line: int | None = None
    condition: str | None = None
    hit: tuple[str, int] | None = None
    hits: int = 0
    debugger_id: int | None = None
    message: str | None = None  # why it is not verified

    def at(self, path: str | None, line: int | None) -> bool:
        if self.path is None:
            return True
        return line == self.line and path is not None and os.path.realpath(path) == self.path

    def hit_ok(self) -> bool:
        if self.hit is None:
            return True
        mode, n = self.hit
        return self.hits == n if mode == "==" else self.hits >= n if mode == ">=" else self.hits % n == 0

    def to_dap(self) -> dict:
        d: dict[str, Any] = {"id": self.id, "verified": self.message is None}
        if self.line is not None:
            d["line"] = self.line
            d["source"] = {"path": self.path}
        if self.message:
            d["message"] = self.message
        return d


class Breakpoints:
    """The session's source and function breakpoints and the debugger breakpoints behind them."""

    def __init__(self, request: Callable[..., Any]) -> None:
        self.request = request
        self._ids = itertools.count(1)
        self.by_source: dict[str, list[DapBreakpoint]] = {}
        self.functions: list[DapBreakpoint] = []
        self.pid: int | None = None
        self.exception_filters: set[str] = set()

    def all(self) -> list[DapBreakpoint]:
        return [b for bs in self.by_source.values() for b in bs] + self.functions

    def _new(self, call: str, condition: str | None, hit_condition: str | None, **where: Any) -> DapBreakpoint:
        bp = DapBreakpoint(next(self._ids), call, condition=condition or None, **where)
        try:
            bp.hit = parse_hit_condition(hit_condition)
        except ValueError as e:
            bp.message = str(e)
        if bp.condition:
            try:
                compile(bp.condition, "<condition>", "eval")
            except SyntaxError as e:
                bp.message = f"condition is not a Python expression: {e.msg}"
        return bp

    def set_source(self, path: str, specs: list[dict]) -> list[DapBreakpoint]:
        """Replace the breakpoints of file `path` (DAP `setBreakpoints`)."""
        real = os.path.realpath(path)
        for old in self.by_source.pop(real, []):
            self._unbind(old)
        new = []
        for spec in specs:
            line = spec.get("line")
            if not isinstance(line, int) or line < 1:
                raise ValueError(f"a source breakpoint needs a line >= 1, got {line!r}")
            text = ""
            try:
                with open(real) as f:
                    lines = f.read().splitlines()
                text = lines[line - 1] if line <= len(lines) else ""
            except OSError:
                pass
            m = _SYSCALL_ON_LINE.search(text)
            bp = self._new(
                m.group(1) if m else "*", spec.get("condition"), spec.get("hitCondition"), path=real, line=line
            )
            if not text.strip() and bp.message is None:
                bp.message = f"line {line} of {os.path.basename(real)} is empty or past the end"
            new.append(bp)
        self.by_source[real] = new
        for bp in new:
            self._bind(bp)
        return new

    def set_functions(self, specs: list[dict]) -> list[DapBreakpoint]:
        """Replace the function breakpoints (DAP `setFunctionBreakpoints`): syscall names."""
        for old in self.functions:
            self._unbind(old)
        self.functions = []
        for spec in specs:
            name = spec.get("name")
            if not isinstance(name, str) or not re.fullmatch(r"\*|[a-z_]+", name.strip()):
                raise ValueError(f"a function breakpoint names a syscall (pred, kv_fork, send, …, or *), got {name!r}")
            self.functions.append(self._new(name.strip(), spec.get("condition"), spec.get("hitCondition")))
        for bp in self.functions:
            self._bind(bp)
        return self.functions

    def _bind(self, bp: DapBreakpoint) -> None:
        if self.pid is None or bp.message is not None:
            return
        bp.debugger_id = self.request("set_breakpoint", call=bp.call, pid=self.pid)["id"]

    def _unbind(self, bp: DapBreakpoint) -> None:
        if bp.debugger_id is not None:
            try:
                self.request("remove_breakpoint", id=bp.debugger_id)
            except (BackendError, TimeoutError) as e:  # gone with its process
                log.debug("breakpoint %s was gone already: %s", bp.debugger_id, e)
            bp.debugger_id = None

    def bind(self, pid: int) -> None:
        """Put every breakpoint on process `pid` (the program, or its step-back replay)."""
        for bp in self.all():
            self._unbind(bp)
        self.pid = pid
        for bp in self.all():
            bp.hits = 0
            self._bind(bp)

    def unbind(self) -> None:
        """Take every breakpoint off the program (the editor leaves; its breakpoints stay listed)."""
        for bp in self.all():
            self._unbind(bp)
        self.pid = None

    def decide(self, stop: dict, path: str | None, namespace: Callable[[], dict]) -> tuple[list[int], list[str]]:
        """For a debugger stop on breakpoints: the DAP breakpoints it honours (after conditions and
        hit counts) and any condition errors. No ids: the adapter resumes the thread."""
        ids = set(stop.get("breakpoints") or [])
        hit: list[int] = []
        errors: list[str] = []
        ns: dict | None = None
        for bp in self.all():
            if bp.debugger_id not in ids or not bp.at(path, stop.get("line")):
                continue
            if bp.condition:
                if ns is None:
                    ns = {k: _literal(v) for k, v in namespace().items()}
                try:
                    ok = bool(eval(bp.condition, {"__builtins__": SAFE_BUILTINS}, dict(ns)))  # noqa: S307
                except Exception as e:  # a condition that fails stops, saying why (as other debuggers do)
                    errors.append(f"breakpoint condition {bp.condition!r} failed: {type(e).__name__}: {e}")
                    ok = True
                if not ok:
                    continue
            bp.hits += 1
            if bp.hit_ok():
                hit.append(bp.id)
        return hit, errors


__all__ = ["Breakpoints", "DapBreakpoint", "parse_hit_condition"]

"""The debugger's parts are composed through explicit interfaces: no mixins, no part reading
another's private state, and every protocol command a documented method of `Debugger` (the
parts' commands through `Delegated`), as `RemoteDebugger` and the API reference read them."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from symphony_lab.debugger import COMMANDS, Debugger

DEBUGGER = Path(__file__).resolve().parents[1] / "symphony_lab" / "debugger"


def _own_private_names(tree: ast.Module) -> set[str]:
    """The private names a module defines: `self._x = ...` assignments and class fields `_x: ...`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
    return {n for n in names if n.startswith("_")}


def test_no_part_reads_another_parts_private_state():
    reads = []
    for path in sorted(DEBUGGER.glob("*.py")):
        tree = ast.parse(path.read_text())
        own = _own_private_names(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")) or node.attr.startswith("__"):
                continue
            base = node.value
            if isinstance(base, ast.Name) and (
                base.id in ("self", "cls") or (base.id == "sys" and node.attr == "_getframe")
            ):
                continue
            if node.attr in own:  # a record of this module (e.g. a Stop's cached view in stops.py)
                continue
            reads.append(f"{path.name}:{node.lineno}: .{node.attr}")
    assert not reads, "a debugger part reaches into another's private state:\n" + "\n".join(reads)


def test_debugger_is_composed_not_mixed():
    assert Debugger.__bases__ == (object,), f"Debugger mixes in {Debugger.__bases__}"


def test_every_command_is_a_documented_method():
    for command, name in COMMANDS.items():
        if not name:
            continue
        fn = getattr(Debugger, name)
        assert inspect.isfunction(fn), f"Debugger.{name} (command {command!r}) is not a method: {fn!r}"
        assert next(iter(inspect.signature(fn).parameters)) == "self", f"Debugger.{name}: first parameter not self"
        assert (fn.__doc__ or "").strip(), f"Debugger.{name} (command {command!r}) has no docstring for the reference"

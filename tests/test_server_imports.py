"""The server and the sandbox import downward only: no circles between their modules (not even
through imports inside functions), and the sandbox never imports the HTTP server."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "symphony_core"
PACKAGES = ("server", "sandbox")


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).glob("*.py")):
            mods[f"symphony_core.{pkg}" + ("" if f.stem == "__init__" else f".{f.stem}")] = f
    return mods


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    pkg = name if path.stem == "__init__" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):  # every import, at any depth
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


def test_no_import_circles_and_the_sandbox_stays_below_the_server():
    mods = _modules()
    graph = {m: _imports(m, p, set(mods)) for m, p in mods.items()}
    upward = sorted(
        (a, b)
        for a, deps in graph.items()
        for b in deps
        if a.startswith("symphony_core.sandbox") and b.startswith("symphony_core.server")
    )
    assert not upward, upward
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            assert state.get(d) != 1, f"import circle: {' -> '.join(path[path.index(d) :] + [d]) if d in path else d}"
            if d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [m])
    assert len(graph) >= 20 and graph["symphony_core.server.app"], graph  # the walk saw the real modules

"""Naming a LIP to launch: `FILE.py:FUNC` or `module:FUNC`, and importing a LIP file under a name of its own."""

from __future__ import annotations

import os
import sys

from .session import SessionError


def resolve_target(target: str, *, load: bool = True) -> tuple[str, str | None]:
    """`FILE.py:FUNC` or `package.module:FUNC` → ("module:FUNC", the file or None).

    The protocol's `launch` names a LIP as "module:function" (the same in-process and over
    WebSocket). A file is imported here under a name of its own (`load_file`), so a LIP file
    called `select.py` or `test.py` never shadows a real module; its directory is appended to
    `sys.path` so it can import its neighbours. With `load=False` (a remote server) the file's
    stem is the module name and nothing is imported here.
    """
    if ":" not in target:
        raise SessionError(f"expected FILE:FUNC or module:FUNC, got {target!r}")
    left, func = target.rsplit(":", 1)
    if left.endswith(".py") or os.sep in left or os.path.exists(left):
        path = os.path.abspath(left)
        if not os.path.isfile(path):
            raise SessionError(f"no such file: {left}")
        stem = os.path.basename(path)[:-3] if path.endswith(".py") else ""
        if not stem.isidentifier():
            raise SessionError(f"{left}: the file name must be a Python module name (like my_lip.py)")
        if not load:
            return f"{stem}:{func}", path
        mod = load_file(path)
        if not callable(getattr(mod, func, None)):
            raise SessionError(f"{left} has no function {func!r}")
        return f"{mod.__name__}:{func}", path
    return f"{left}:{func}", None


def load_file(path: str, reload: bool = False):
    """Import the Python file at `path` as module `_symlab_<stem>_<hash of the path>` (again with
    `reload`, to pick up an edit)."""
    import hashlib
    import importlib.util

    stem = os.path.basename(path)[:-3]
    name = f"_symlab_{stem}_{hashlib.sha1(path.encode()).hexdigest()[:8]}"
    if name in sys.modules and not reload:
        return sys.modules[name]
    d = os.path.dirname(path)
    if d not in sys.path:
        sys.path.append(d)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SessionError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:
        raise SessionError(f"importing {path} failed: {type(e).__name__}: {e}") from e
    sys.modules[name] = mod
    return mod


__all__ = ["load_file", "resolve_target"]

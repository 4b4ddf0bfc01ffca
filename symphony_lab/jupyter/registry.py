"""Where a kernel's Symphony Lab tells the Jupyter server how to reach it.

A notebook kernel that imports `symphony_lab.lab` opens a bridge on a loopback port and writes
`<jupyter runtime dir>/symphony-lab/kernel-<kernel id>.json` (mode 0600, like the kernel's own
connection file) with the port and a random secret. The server extension reads it to connect;
nobody else on the machine can, since the secret is needed and the file is private.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def registry_dir(runtime_dir: str | os.PathLike | None = None) -> Path:
    if runtime_dir is None:
        from jupyter_core.paths import jupyter_runtime_dir

        runtime_dir = jupyter_runtime_dir()
    return Path(runtime_dir) / "symphony-lab"


def entry_path(kernel_id: str, runtime_dir: str | os.PathLike | None = None) -> Path:
    return registry_dir(runtime_dir) / f"kernel-{kernel_id}.json"


def write_entry(kernel_id: str, info: dict, runtime_dir: str | os.PathLike | None = None) -> Path:
    d = registry_dir(runtime_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = entry_path(kernel_id, runtime_dir)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"kernel_id": kernel_id, **info}, f)
    os.replace(tmp, path)
    return path


def read_entry(kernel_id: str, runtime_dir: str | os.PathLike | None = None) -> dict | None:
    """The kernel's entry, or None when it has no live Symphony Lab."""
    if not kernel_id or "/" in kernel_id or kernel_id.startswith("."):
        return None
    path = entry_path(kernel_id, runtime_dir)
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    pid = info.get("pid")
    if isinstance(pid, int) and not _alive(pid):
        return None
    return info


def list_entries(runtime_dir: str | os.PathLike | None = None) -> list[dict]:
    out = []
    d = registry_dir(runtime_dir)
    if not d.is_dir():
        return out
    for p in sorted(d.glob("kernel-*.json")):
        info = read_entry(p.stem[len("kernel-") :], runtime_dir)
        if info is not None:
            out.append(info)
    return out


def remove_entry(kernel_id: str, runtime_dir: str | os.PathLike | None = None) -> None:
    try:
        entry_path(kernel_id, runtime_dir).unlink()
    except OSError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

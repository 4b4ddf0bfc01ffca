"""Starts a real `symphony serve` process on a free loopback port for the server tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import httpx

from symphony_core.server.child import free_port, terminate, wait_healthy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIPS = os.path.join(ROOT, "tests", "server_lips.py")


def symphony_cmd() -> list[str]:
    """The installed `symphony` script, unless its interpreter is gone (a venv installed from
    another checkout): then the package's own module."""
    script = os.path.join(os.path.dirname(sys.executable), "symphony")
    if os.path.exists(script):
        with open(script, "rb") as f:
            interp = f.readline()[2:].split(b" ")[0].strip().decode()
        if os.path.exists(interp):
            return [script]
    return [sys.executable, "-m", "symphony_core.cli"]


class Server:
    """`symphony serve --port P` in a subprocess; `.url`, `.users_file`, `.log()`, `.stop()`.
    `extra`: more flags (a `--ray ADDRESS` front among them); `env`: the process's environment.
    A test that fails while servers run gets their log tails in its report (conftest.py)."""

    running: list[Server] = []

    def __init__(
        self,
        users: list[dict],
        extra: list[str] | None = None,
        ready_timeout: float = 180.0,
        *,
        num_pages: int = 2048,
        threads: int = 2,
        env: dict | None = None,
        name: str = "server",
    ) -> None:
        self.dir = tempfile.mkdtemp(prefix="symphony-test-")
        self.users_file = os.path.join(self.dir, "users.json")
        with open(self.users_file, "w") as f:
            json.dump({"users": users}, f)
        os.chmod(self.users_file, 0o600)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(self.dir, f"{name}.log")
        self._log = open(self.log_path, "w")
        cmd = symphony_cmd() + [
            "serve",
            "--port",
            str(self.port),
            "--users-file",
            self.users_file,
            "--num-pages",
            str(num_pages),
            "--threads",
            str(threads),
            *(extra or []),
        ]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        try:
            wait_healthy(self.proc, self.url, ready_timeout, name, self.log)
        except RuntimeError:
            self._log.close()
            raise
        self.health = httpx.get(self.url + "/health").json()
        Server.running.append(self)

    def log(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def stop(self, timeout: float = 30.0) -> int:
        if self in Server.running:
            Server.running.remove(self)
        code = terminate(self.proc, timeout)
        self._log.close()
        return code


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (by walking /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

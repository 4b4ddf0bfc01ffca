"""A `symphony serve` subprocess on a free loopback port, for the benchmarks that talk to a server."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from symphony_core.server.child import free_port, wait_healthy


def start_server(
    users: list[dict],
    workdir: str,
    args: list[str],
    *,
    name: str = "server",
    cwd: str | None = None,
    env: dict | None = None,
    ready_timeout: float = 300.0,
) -> tuple[subprocess.Popen, str]:
    """`symphony serve --port P --users-file F ARGS...` run in the checkout `cwd`; its users file
    and its log (`NAME.log`) go in `workdir`. Returns the process and its URL once /health answers."""
    users_file = os.path.join(workdir, f"{name}-users.json")
    with open(users_file, "w") as f:
        json.dump({"users": users}, f)
    port = free_port()
    log_path = os.path.join(workdir, f"{name}.log")
    cmd = [sys.executable, "-m", "symphony_core.cli", "serve", "--port", str(port), "--users-file", users_file, *args]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env)

    def log_tail() -> str:
        with open(log_path) as f:
            return f.read()[-2000:]

    url = f"http://127.0.0.1:{port}"
    wait_healthy(proc, url, ready_timeout, name, log_tail, poll=0.5)
    return proc, url

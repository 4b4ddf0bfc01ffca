"""Start a real Jupyter server (or JupyterLab) on a free loopback port for the Symphony Lab tests."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class JupyterServer:
    proc: subprocess.Popen
    port: int
    token: str
    root_dir: Path
    runtime_dir: Path
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(
        self, method: str, path: str, body: bytes | None = None, token: bool = True, headers: dict | None = None
    ) -> tuple[int, dict | str, dict]:
        h = dict(headers or {})
        if token:
            h["Authorization"] = f"token {self.token}"
        if body is not None:
            h.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                raw, status, hdrs = r.read(), r.status, dict(r.headers)
        except urllib.error.HTTPError as e:
            raw, status, hdrs = e.read(), e.code, dict(e.headers)
        try:
            return status, json.loads(raw), hdrs
        except ValueError:
            return status, raw.decode(errors="replace"), hdrs

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_server(tmp: Path, app: str = "server", env_extra: dict | None = None, timeout: float = 90) -> JupyterServer:
    """`jupyter server` (or `jupyter lab` with app="lab") with our server extension, a token and a private runtime dir."""
    port = free_port()
    token = "symphony-test-" + os.urandom(8).hex()
    root_dir = tmp / "notebooks"
    runtime_dir = tmp / "runtime"
    root_dir.mkdir(parents=True, exist_ok=True)
    runtime_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(runtime_dir),
        "PYTHONPATH": str(ROOT),
        "JUPYTER_PLATFORM_DIRS": "1",
        **(env_extra or {}),
    }
    env.pop("JUPYTER_TOKEN", None)
    log = tmp / f"jupyter-{app}.log"
    module = "jupyterlab" if app == "lab" else "jupyter_server"
    cmd = [
        sys.executable,
        "-m",
        module,
        f"--port={port}",
        "--ip=127.0.0.1",
        "--no-browser",
        f"--IdentityProvider.token={token}",
        "--allow-root",
        f"--ServerApp.root_dir={root_dir}",
        "--ServerApp.jpserver_extensions={'symphony_lab.jupyter': True}",
        "--ServerApp.port_retries=0",
        "--ServerApp.disable_check_xsrf=False",
    ]
    if app == "lab":
        cmd += [
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--ServerApp.terminals_enabled=False",
        ]
    f = open(log, "wb")
    proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=str(root_dir))
    srv = JupyterServer(proc, port, token, root_dir, runtime_dir, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter {app} exited with {proc.returncode}:\n{srv.log_text()}")
        try:
            status, _, _ = srv.request("GET", "/api/status")
            if status == 200:
                return srv
        except OSError:
            pass
        time.sleep(0.3)
    srv.stop()
    raise RuntimeError(f"jupyter {app} did not start in {timeout}s:\n{srv.log_text()}")


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None

"""`symphony serve` as a child process of something else (a Ray replica, a benchmark, a test
harness): a free port for it, waiting until its /health answers, stopping it."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_healthy(
    proc: subprocess.Popen, url: str, timeout: float, what: str, log_tail: Callable[[], str], poll: float = 0.25
) -> None:
    """Returns once `url`/health answers 200. Raises RuntimeError naming `what` with the log's
    tail when `proc` exits first, or after `timeout` seconds (the process is then killed)."""
    deadline = time.time() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log_tail()}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        if time.time() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"{what} not ready after {timeout}s:\n{log_tail()}")
        time.sleep(poll)


def terminate(proc: subprocess.Popen, timeout: float) -> int:
    """SIGTERM (the server cancels its processes and stops its sandbox), SIGKILL when it is not
    gone after `timeout` seconds; returns the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode

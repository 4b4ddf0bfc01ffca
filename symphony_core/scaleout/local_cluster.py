"""A local Ray cluster of simulated nodes on this machine (tests, `bench/scaleout.py`), started robustly.

A node's raylet waits a fixed 15 s for its dashboard agent to report its ports and aborts when the
agent is slower — which happens on a busy machine. A failed attempt is cleaned up (every process
of its Ray session is killed) and retried; the page cache is warm by then.
"""

from __future__ import annotations

import glob
import os
import signal
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _kill_session(session_dirs: set[str]) -> None:
    names = [os.path.basename(d) for d in session_dirs]
    for pid_dir in glob.glob("/proc/[0-9]*"):
        try:
            with open(os.path.join(pid_dir, "cmdline"), "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        if any(n in cmd for n in names):
            try:
                os.kill(int(os.path.basename(pid_dir)), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _retried(start: Callable[[], T], undo: Callable[[], None], attempts: int, temp_dir: str, what: str) -> T:
    """`start()`, tried `attempts` times; after a failure (the raylet aborted, or the GCS was too
    slow) `undo()` and every process of the failed Ray session is killed before the next try."""
    last: Exception | None = None
    for attempt in range(attempts):
        before = set(glob.glob(os.path.join(temp_dir, "session_2*")))
        try:
            return start()
        except Exception as e:
            last = e
            try:
                undo()
            except Exception:
                pass
            _kill_session(set(glob.glob(os.path.join(temp_dir, "session_2*"))) - before)
            time.sleep(2 + 3 * attempt)
    raise RuntimeError(f"could not start {what} in {attempts} attempts: {last}")


def start_local_cluster(
    nodes: int = 2, num_cpus: float = 1, object_store_mb: int = 100, attempts: int = 3, temp_dir: str = "/tmp/ray"
):
    """`ray.cluster_utils.Cluster` with `nodes` nodes of `num_cpus` CPUs each; call `.shutdown()` when done."""
    from ray.cluster_utils import Cluster

    node_args: dict[str, Any] = {"num_cpus": num_cpus, "object_store_memory": object_store_mb << 20}
    started: list = []  # the attempt's cluster, for `undo`

    def start():
        started[:] = [Cluster(initialize_head=True, head_node_args={**node_args, "include_dashboard": False})]
        for _ in range(nodes - 1):
            started[0].add_node(**node_args)
        started[0].wait_for_nodes()
        return started[0]

    def undo() -> None:
        if started:
            started.pop().shutdown()

    return _retried(start, undo, attempts, temp_dir, "a local Ray cluster")


def init_local_ray(attempts: int = 3, temp_dir: str = "/tmp/ray", **init_kwargs) -> None:
    """`ray.init()` starting a one-node Ray on this machine, retried like `start_local_cluster`."""
    import ray

    _retried(lambda: ray.init(include_dashboard=False, **init_kwargs), ray.shutdown, attempts, temp_dir, "a local Ray")

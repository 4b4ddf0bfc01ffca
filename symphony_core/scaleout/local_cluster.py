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
from typing import Any


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


def start_local_cluster(
    nodes: int = 2, num_cpus: float = 1, object_store_mb: int = 100, attempts: int = 3, temp_dir: str = "/tmp/ray"
):
    """`ray.cluster_utils.Cluster` with `nodes` nodes of `num_cpus` CPUs each; call `.shutdown()` when done."""
    from ray.cluster_utils import Cluster

    node_args: dict[str, Any] = {"num_cpus": num_cpus, "object_store_memory": object_store_mb << 20}
    last: Exception | None = None
    for attempt in range(attempts):
        before = set(glob.glob(os.path.join(temp_dir, "session_2*")))
        cluster = None
        try:
            cluster = Cluster(initialize_head=True, head_node_args={**node_args, "include_dashboard": False})
            for _ in range(nodes - 1):
                cluster.add_node(**node_args)
            cluster.wait_for_nodes()
            return cluster
        except Exception as e:  # the raylet aborted (see above), or the GCS was too slow
            last = e
            if cluster is not None:
                try:
                    cluster.shutdown()
                except Exception:
                    pass
            _kill_session(set(glob.glob(os.path.join(temp_dir, "session_2*"))) - before)
            time.sleep(2 + 3 * attempt)
    raise RuntimeError(f"could not start a local Ray cluster in {attempts} attempts: {last}")


def init_local_ray(attempts: int = 3, temp_dir: str = "/tmp/ray", **init_kwargs) -> None:
    """`ray.init()` starting a one-node Ray on this machine, retried like `start_local_cluster`."""
    import ray

    last: Exception | None = None
    for attempt in range(attempts):
        before = set(glob.glob(os.path.join(temp_dir, "session_2*")))
        try:
            ray.init(include_dashboard=False, **init_kwargs)
            return
        except Exception as e:  # the raylet aborted, or the GCS was too slow
            last = e
            try:
                ray.shutdown()
            except Exception:
                pass
            _kill_session(set(glob.glob(os.path.join(temp_dir, "session_2*"))) - before)
            time.sleep(2 + 3 * attempt)
    raise RuntimeError(f"could not start a local Ray in {attempts} attempts: {last}")

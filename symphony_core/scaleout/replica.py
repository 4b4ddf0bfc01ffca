"""One replica: a Ray actor that runs a complete `symphony serve` (engine, runtime, sandbox) on its node.

The actor is a thin supervisor. It starts `symphony serve` as a child process — the same server a
single machine runs, reached through its HTTP/WebSocket API, so nothing of the server's internals
is shared with the front — with its pids numbered from the replica's own base (pids.py), and
reports where it listens. Fate is shared both ways:

- the child gets SIGKILL when the actor's process dies (PR_SET_PDEATHSIG), and the server's
  sandbox workers die with the server, so a killed replica leaves nothing running;
- when the child exits on its own (a crash, the OOM killer), a watchdog ends the actor's process,
  and Ray restarts the actor (`max_restarts`): the constructor runs again and starts a fresh
  server with the next generation of pids. The front (pool.py) notices the new generation.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from ..server.child import free_port, terminate, wait_healthy
from .pids import GENERATIONS, pid_base, replica_name

_PR_SET_PDEATHSIG = 1


@dataclass
class ReplicaSpec:
    """How every replica runs its server (the same for all of them)."""

    serve_args: list[str] = field(default_factory=list)  # `symphony serve` flags: --model, --num-pages, ...
    users: dict = field(default_factory=lambda: {"users": []})  # the users file's content (written on each node)
    host: str | None = None  # address the replica listens on; None: loopback when no tokens, else the node's IP
    ready_timeout: float = 600.0  # seconds for the server to load the model and answer /health
    env: dict = field(default_factory=dict)  # extra environment of the server process


@dataclass
class NamedFiles:
    """A replica's answer to `named_files`: user -> paths, and the generation of the replica that holds them."""

    generation: int
    files: dict[str, list[str]]


@dataclass
class ReplicaInfo:
    index: int
    name: str
    generation: int
    url: str
    node_id: str
    node_ip: str
    server_pid: int
    started: float


# The server's first step, before it becomes `python -m symphony_core.cli serve …` (exec keeps the
# death signal): die with the actor. Not a preexec_fn: forking a threaded process (Ray's are) must
# not run Python in the child before exec.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    f"ctypes.CDLL(None).prctl({_PR_SET_PDEATHSIG}, signal.SIGKILL, 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]): os._exit(1)  # the actor died before the line above\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n"
)


def _next_generation(index: int) -> int:
    """Counts the replica's incarnations in Ray's GCS key-value store, which outlives the actor."""
    from ray.experimental import internal_kv

    key = f"symphony:replica:{index}:generation".encode()
    old = internal_kv._internal_kv_get(key)
    gen = 0 if old is None else (int(old) + 1) % GENERATIONS
    internal_kv._internal_kv_put(key, str(gen).encode(), overwrite=True)
    return gen


class SymphonyReplica:
    """The actor class (wrapped with `ray.remote` by pool.py, which chooses its resources)."""

    def __init__(self, index: int, spec: ReplicaSpec) -> None:
        import ray

        self.index, self.spec = index, spec
        self.generation = _next_generation(index)
        ctx = ray.get_runtime_context()
        node_ip = ray.util.get_node_ip_address()
        users = spec.users.get("users", [])
        host = spec.host or (node_ip if users else "127.0.0.1")
        self.dir = tempfile.mkdtemp(prefix=f"symphony-{replica_name(index)}-")
        users_file = os.path.join(self.dir, "users.json")
        with open(os.open(users_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            json.dump(spec.users, f)
        self._tokens = {u["name"]: u["token"] for u in users}
        port = free_port(host)
        env = {**os.environ, **spec.env, "SYMPHONY_PID_BASE": str(pid_base(index, self.generation))}
        cmd = [
            sys.executable,
            "-c",
            _DIE_WITH_PARENT,
            str(os.getpid()),
            "-m",
            "symphony_core.cli",
            "serve",
            "--host",
            host,
            "--port",
            str(port),
            "--users-file",
            users_file,
            *spec.serve_args,
        ]
        self._log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
        self.url = f"http://{host}:{port}"
        self.info_ = ReplicaInfo(
            index,
            replica_name(index),
            self.generation,
            self.url,
            ctx.get_node_id(),
            node_ip,
            self.proc.pid,
            time.time(),
        )
        self._wait_ready(spec.ready_timeout)
        os.unlink(users_file)  # read at start; the tokens stay in memory only (for named_files)
        self._stopping = False
        threading.Thread(target=self._watchdog, name="symphony-replica-watchdog", daemon=True).start()

    def _wait_ready(self, timeout: float) -> None:
        wait_healthy(
            self.proc, self.url, timeout, f"replica {replica_name(self.index)}: `symphony serve`", self.log_tail
        )

    def _watchdog(self) -> None:
        code = self.proc.wait()
        if not self._stopping:  # the server died under us: end the actor so that Ray restarts it
            print(
                f"symphony replica {replica_name(self.index)}: server exited with {code}; restarting the replica",
                file=sys.stderr,
                flush=True,
            )
            os._exit(1)

    # --- what the front asks ----------------------------------------------------------------------
    def info(self) -> ReplicaInfo:
        return self.info_

    def named_files(self) -> NamedFiles:
        """Each user's named KV files on this replica (their own and the /shared/ ones they own), with the
        generation that holds them: an actor Ray restarted between two calls of the front answers for its
        new, empty self, which must not stand for the files its predecessor lost."""
        out: dict[str, list[str]] = {}
        for user, token in self._tokens.items() if self._tokens else [("local", None)]:
            req = urllib.request.Request(self.url + "/v1/kv")
            if token:
                req.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    files = json.load(r)["files"]
            except (OSError, ValueError, KeyError):
                continue
            mine = [f["path"] for f in files if f.get("owner") == user]
            if mine:
                out[user] = mine
        return NamedFiles(self.generation, out)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            with open(os.path.join(self.dir, "server.log")) as f:
                return f.read()[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> int | None:
        """Stop the server cleanly (SIGTERM: it cancels its processes and stops its sandbox)."""
        self._stopping = True
        code = terminate(self.proc, timeout)
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return code

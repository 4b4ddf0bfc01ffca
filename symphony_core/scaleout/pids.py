"""Process ids across replicas: a pid tells the replica (and the replica's incarnation) that runs it.

Each replica's engine numbers its processes from its own base (`SYMPHONY_PID_BASE`, read by
`symphony_core.sched.process`), so pids stay plain integers end to end — the single server's
clients, the WebSocket `attach` and the debugger protocol need no change — and the front reads the
replica out of the number:

    pid = replica * 10**12 + generation * 10**9 + n          e.g. 1_002_000_000_042 = r1, generation 2, #42

`generation` counts the replica's restarts (mod 1000): a restarted replica numbers from a fresh
base, so an old pid can never name a new process.
"""

from __future__ import annotations

from dataclasses import dataclass

REPLICA_STRIDE = 10**12
GENERATION_STRIDE = 10**9
GENERATIONS = 1000
MAX_REPLICAS = 9000  # keeps every pid below 2**53 (exact in JSON numbers read by JavaScript)


@dataclass(frozen=True)
class ReplicaPid:
    replica: int  # 1-based replica index
    generation: int  # the replica's incarnation (mod GENERATIONS)
    local: int  # the engine's own count

    @property
    def pid(self) -> int:
        return self.replica * REPLICA_STRIDE + self.generation * GENERATION_STRIDE + self.local


def replica_name(index: int) -> str:
    return f"r{index}"


def pid_base(replica: int, generation: int) -> int:
    """The number a replica's engine counts its pids from (its first pid is base + 1)."""
    if not 1 <= replica <= MAX_REPLICAS:
        raise ValueError(f"replica index must be in [1, {MAX_REPLICAS}], got {replica}")
    return ReplicaPid(replica, generation % GENERATIONS, 0).pid


def decode_pid(pid: int) -> ReplicaPid | None:
    """The replica, generation and local number of `pid`; None when it is no replica's pid."""
    if pid <= 0:
        return None
    replica, rest = divmod(pid, REPLICA_STRIDE)
    generation, local = divmod(rest, GENERATION_STRIDE)
    if not 1 <= replica <= MAX_REPLICAS or local == 0:
        return None
    return ReplicaPid(replica, generation, local)

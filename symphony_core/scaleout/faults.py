"""What a replica's death costs, as the front reports it: its processes and its named KV files.

When a replica dies, everything in its engine is gone. Its processes are answered as failed with a
`ReplicaLost` error naming the replica; its users' named KV files (as last seen by the pool's poll)
are listed as lost — `GET /v1/kv` shows them under `"lost"` — and the user's next program is
refused (409) until each lost file is acknowledged with `DELETE /v1/kv/<path>`, so that no program
finds a fresh, empty file where it expected its saved context.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass

from .pids import replica_name


@dataclass
class ReplicaDeath:
    replica: int
    generation: int  # the incarnation that died
    at: float
    reason: str

    def describe(self) -> str:
        when = time.strftime("at %H:%M:%S UTC", time.gmtime(self.at)) if self.at else "earlier"
        return (
            f"replica {replica_name(self.replica)} (generation {self.generation}) died {when} "
            f"({self.reason}); Ray restarts it with empty KV files"
        )


@dataclass
class LostFile:
    path: str
    replica: str
    generation: int
    lost_at: float
    message: str


def lost_process_error(pid: int, death: ReplicaDeath) -> dict:
    return {"type": "ReplicaLost", "message": f"process {pid} was lost: {death.describe()}", "traceback": ""}


def lost_outcome(pid: int, death: ReplicaDeath) -> dict:
    """What `GET /v1/processes/{pid}/result` answers for a process of a dead replica."""
    return {"pid": pid, "status": "failed", "error": lost_process_error(pid, death)}


class FaultBook:
    def __init__(self) -> None:
        self.deaths: dict[tuple[int, int], ReplicaDeath] = {}  # (replica, generation) -> death
        self.lost: dict[str, dict[str, LostFile]] = {}  # user -> path -> file
        self._lock = threading.Lock()

    def record_death(self, death: ReplicaDeath, files: dict[str, list[str]]) -> None:
        with self._lock:
            self.deaths[(death.replica, death.generation)] = death
            for user, paths in files.items():
                mine = self.lost.setdefault(user, {})
                for p in paths:
                    mine[p] = LostFile(
                        p, replica_name(death.replica), death.generation, death.at, f"{p} was lost: {death.describe()}"
                    )

    def death_of(self, replica: int, generation: int) -> ReplicaDeath | None:
        return self.deaths.get((replica, generation))

    def lost_files(self, user: str) -> list[dict]:
        with self._lock:
            return [asdict(f) for f in self.lost.get(user, {}).values()]

    def acknowledge(self, user: str, path: str) -> bool:
        with self._lock:
            return self.lost.get(user, {}).pop(path, None) is not None

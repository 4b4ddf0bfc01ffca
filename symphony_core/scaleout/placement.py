"""Where a request goes: user namespace affinity for programs, prompt prefix (bounded by load) for
OpenAI requests.

A user's named KV files (`/users/<name>/…`, and the `/shared/…` files they own) live in one
replica's KV file system, so every program of that user goes to that replica, the user's *home*.
A user seen for the first time is homed on the least loaded live replica (fewest running processes,
then fewest homed users). OpenAI requests hold no named files: they go to the replica that the
first characters of the prompt hash to — equal prefixes meet on one replica, where the prefix's
KV pages may still be cached — unless that replica is busier than the least loaded one by more
than `prefix_slack` requests in flight, when the least loaded takes it.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass


@dataclass
class ReplicaLoad:
    running: int = 0  # processes running there (from its /metrics, refreshed by the pool)
    in_flight: int = 0  # requests the front is forwarding to it right now


def prefix_key(text: str, chars: int = 256) -> int:
    return int.from_bytes(hashlib.blake2b(text[:chars].encode(), digest_size=8).digest(), "big")


def rendezvous(key: int, candidates: list[int]) -> int:
    """The candidate with the highest hash of (key, candidate): stable when others come and go."""
    return max(candidates, key=lambda r: hashlib.blake2b(f"{key}:{r}".encode(), digest_size=8).digest())


class Placement:
    def __init__(self, replicas: list[int], prefix_slack: int = 4) -> None:
        self.replicas = list(replicas)
        self.prefix_slack = prefix_slack
        self.homes: dict[str, int] = {}
        self.loads: dict[int, ReplicaLoad] = {r: ReplicaLoad() for r in replicas}
        self._lock = threading.Lock()

    def home_of(self, user: str, live: list[int]) -> int:
        """The user's home replica, placing a new user on the least loaded live one."""
        with self._lock:
            home = self.homes.get(user)
            if home is None:
                if not live:
                    raise LookupError("no replica is running")
                homed = {r: 0 for r in live}
                for r in self.homes.values():
                    if r in homed:
                        homed[r] += 1
                home = min(live, key=lambda r: (self.loads[r].running + self.loads[r].in_flight, homed[r], r))
                self.homes[user] = home
            return home

    def for_prompt(self, prompt: str, live: list[int]) -> int:
        if not live:
            raise LookupError("no replica is running")
        with self._lock:
            load = {r: self.loads[r].running + self.loads[r].in_flight for r in live}
            target = rendezvous(prefix_key(prompt), live)
            least = min(live, key=lambda r: (load[r], r))
            return least if load[target] - load[least] > self.prefix_slack else target

    def begin(self, replica: int) -> None:
        with self._lock:
            self.loads[replica].in_flight += 1

    def end(self, replica: int) -> None:
        with self._lock:
            self.loads[replica].in_flight -= 1

    def set_running(self, replica: int, running: int) -> None:
        with self._lock:
            self.loads[replica].running = running

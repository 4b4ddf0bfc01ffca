"""The replicas as the front sees them: Ray actors (replica.py), their addresses, generations,
loads and named files, kept current by a monitor task in the front's event loop.

A replica is *down* from the moment its server stops answering (connection refused) or Ray reports
its actor dead, until its actor answers again — with a new generation when Ray restarted it. The
death is recorded once per (replica, generation) in the FaultBook, with the named KV files the
last poll saw there.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from .faults import FaultBook, ReplicaDeath
from .pids import replica_name
from .placement import Placement
from .replica import ReplicaInfo, ReplicaSpec, SymphonyReplica

log = logging.getLogger("symphony.scaleout")

_RUNNING = re.compile(r'^symphony_processes\{status="running"\}\s+([0-9.]+)', re.MULTILINE)


@dataclass
class ReplicaState:
    index: int
    actor: Any  # a Ray ActorHandle: its remote methods are looked up dynamically
    info: ReplicaInfo | None = None
    up: bool = False
    files: dict[str, list[str]] = field(default_factory=dict)  # user -> named files, as last polled
    down_reason: str = ""


class ReplicaPool:
    def __init__(
        self,
        n: int,
        spec: ReplicaSpec,
        *,
        num_cpus: float = 1,
        max_restarts: int = -1,
        poll_interval: float = 2.0,
        namespace_prefix: str = "symphony",
    ) -> None:
        if n < 1:
            raise ValueError(f"--replicas must be at least 1, got {n}")
        self.n, self.spec, self.num_cpus, self.max_restarts = n, spec, num_cpus, max_restarts
        self.poll_interval, self.prefix = poll_interval, namespace_prefix
        self.replicas: dict[int, ReplicaState] = {}
        self.placement = Placement(list(range(1, n + 1)))
        self.faults = FaultBook()
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=5.0))

    # --- lifecycle (called from the driver's main thread) -----------------------------------------
    def start(self, timeout: float | None = None) -> list[ReplicaInfo]:
        """Create the actors (spread over the nodes) and wait until every server answers."""
        import ray

        cls = ray.remote(SymphonyReplica)
        for i in range(1, self.n + 1):
            actor = cls.options(
                name=f"{self.prefix}-{replica_name(i)}",
                max_restarts=self.max_restarts,
                max_task_retries=0,
                num_cpus=self.num_cpus,
                scheduling_strategy="SPREAD",
                max_concurrency=1,
            ).remote(i, self.spec)
            self.replicas[i] = ReplicaState(i, actor)
        infos = ray.get([r.actor.info.remote() for r in self.replicas.values()], timeout=timeout)
        for info in infos:
            st = self.replicas[info.index]
            st.info, st.up = info, True
        return infos

    def shutdown(self, timeout: float = 30.0) -> None:
        import ray

        refs = [r.actor.stop.remote() for r in self.replicas.values()]
        try:
            ray.get(refs, timeout=timeout)
        except Exception as e:  # a dead or restarting replica: killing it below is all that is left
            log.warning("stopping replicas: %s", e)
        for r in self.replicas.values():
            ray.kill(r.actor, no_restart=True)

    # --- what the front asks ----------------------------------------------------------------------
    def live(self) -> list[int]:
        return [i for i, r in self.replicas.items() if r.up and r.info is not None]

    def url(self, index: int) -> str | None:
        r = self.replicas.get(index)
        return r.info.url if r is not None and r.up and r.info is not None else None

    def generation(self, index: int) -> int | None:
        r = self.replicas.get(index)
        return None if r is None or r.info is None else r.info.generation

    def mark_down(self, index: int, reason: str) -> ReplicaDeath | None:
        """The replica stopped answering: record the death of its current generation (once)."""
        r = self.replicas.get(index)
        if r is None or r.info is None:
            return None
        death = self.faults.death_of(index, r.info.generation)
        if death is None:
            death = ReplicaDeath(index, r.info.generation, time.time(), reason)
            self.faults.record_death(death, r.files)
            log.warning("%s", death.describe())
        r.up, r.down_reason, r.files = False, reason, {}
        return death

    def _generation_died(self, index: int, generation: int, reason: str) -> ReplicaDeath:
        """A generation older than the current one died (Ray already restarted the replica)."""
        death = self.faults.death_of(index, generation)
        if death is None:
            death = ReplicaDeath(index, generation, time.time(), reason)
            self.faults.record_death(death, {})
            log.warning("%s", death.describe())
        return death

    async def confirm_death(self, index: int, generation: int | None) -> ReplicaDeath | None:
        """After a broken connection to a replica: its death if that generation died, None if it lives.

        Asks, in order: the fault book (the monitor may know already), the current generation (Ray may
        have restarted it), the replica's server on a fresh connection, and Ray itself — so a slow
        server or a monitor that has already seen the restart does not hide a death."""
        import ray

        r = self.replicas.get(index)
        if r is None or r.info is None:
            return None
        gen = r.info.generation if generation is None else generation
        death = self.faults.death_of(index, gen)
        if death is not None:
            return death
        if r.info.generation != gen:
            return self._generation_died(index, gen, "its actor was restarted by Ray")
        try:
            async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=3.0)) as fresh:
                await fresh.get(r.info.url + "/health")
            return None
        except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError) as e:
            return self.mark_down(index, f"its server stopped answering ({type(e).__name__})")
        except httpx.HTTPError:
            pass  # slow: let Ray say whether the actor lives
        try:
            info: ReplicaInfo = await asyncio.wait_for(r.actor.info.remote(), 10.0)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
            return self.mark_down(index, f"Ray reports its actor unavailable: {type(e).__name__}")
        except TimeoutError:
            return None
        if info.generation != gen:
            return self._generation_died(index, gen, "its actor was restarted by Ray")
        return None

    # --- the monitor ------------------------------------------------------------------------------
    async def monitor(self) -> None:
        while True:
            await asyncio.gather(*(self._poll(r) for r in self.replicas.values()), return_exceptions=True)
            await asyncio.sleep(self.poll_interval)

    async def _poll(self, r: ReplicaState) -> None:
        import ray

        try:
            info: ReplicaInfo = await asyncio.wait_for(r.actor.info.remote(), self.poll_interval * 5)
        except TimeoutError:
            return  # busy (or loading after a restart): nothing learnt
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
            if r.up:
                self.mark_down(r.index, f"Ray reports its actor unavailable: {type(e).__name__}")
            return
        if r.info is not None and info.generation != r.info.generation:
            self.mark_down(r.index, "its actor was restarted by Ray")
            log.warning("replica %s is back (generation %d) at %s", replica_name(r.index), info.generation, info.url)
        r.info = info
        try:
            text = (await self.http.get(info.url + "/metrics")).text
            m = _RUNNING.search(text)
            self.placement.set_running(r.index, int(float(m.group(1))) if m else 0)
            named = await asyncio.wait_for(r.actor.named_files.remote(), self.poll_interval * 5)
            if named.generation != info.generation:
                return  # Ray restarted the actor since `info`: the next poll records the death with the old files
            r.files = named.files
            r.up = True
        except httpx.ConnectError:
            self.mark_down(r.index, "its server stopped answering")
        except (TimeoutError, httpx.HTTPError, ray.exceptions.RayError):
            pass

"""When the batch scheduler fires: pluggable policies.

`FireWhenIdle` fires as soon as anything is queued and the model is free: lowest latency,
small batches when LIPs arrive one by one. `AdaptiveWatermark` (after Pie) waits, briefly,
until the queue holds most of the threads that could still join it: when a batch returns, its
members wake up, run a little Python, and call `pred` again; firing on the first arrival would
split them into many small batches.

A policy may also say `fire_threshold(runnable)`: the fewest queued calls on which it would
fire at once. The scheduler then sleeps through the submits below that number instead of
waking for each one; a policy without it is asked again on every submit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Decision:
    fire: bool
    wait: float = 0.0  # seconds to wait before asking again, when not firing


class FireWhenIdle:
    name = "fire-when-idle"

    def decide(self, queued: int, runnable: int, oldest_wait: float, last_forward: float) -> Decision:
        return Decision(queued > 0)

    def fire_threshold(self, runnable: int) -> int:
        """The fewest queued calls on which `decide` fires at once (the scheduler is woken then)."""
        return 1


@dataclass
class AdaptiveWatermark:
    """Fire when `queued >= fraction * runnable`, or once the oldest call has waited long enough.

    `runnable` counts LIP threads that are running code or queued for `pred`; threads
    blocked in `recv`, `join` or a debugger stop are not expected. The longest wait is a
    fraction of the last forward pass, so waiting never costs more than a few percent.
    """

    fraction: float = 0.9
    max_wait_ratio: float = 0.25
    min_wait: float = 0.0005
    max_wait: float = 0.02
    name: str = "adaptive-watermark"

    def decide(self, queued: int, runnable: int, oldest_wait: float, last_forward: float) -> Decision:
        if queued == 0:
            return Decision(False, self.max_wait)
        if queued >= self.fraction * runnable:
            return Decision(True)
        limit = min(self.max_wait, max(self.min_wait, self.max_wait_ratio * last_forward))
        if oldest_wait >= limit:
            return Decision(True)
        return Decision(False, limit - oldest_wait)

    def fire_threshold(self, runnable: int) -> int:
        """The fewest queued calls on which `decide` fires without waiting: while the queue is
        shorter, the scheduler sleeps until the wait limit instead of re-deciding per submit."""
        return max(1, math.ceil(self.fraction * runnable))


POLICIES = {"fire-when-idle": FireWhenIdle, "adaptive-watermark": AdaptiveWatermark}

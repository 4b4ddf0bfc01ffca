"""What one LIP process may use (`Limits`), and the error that ends it past a limit."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import SymphonyError


class LimitExceeded(SymphonyError):
    """A LIP went past one of its limits (threads, wall time, tokens, pages)."""


@dataclass
class Limits:
    """What one process may use; going past a limit ends it with `LimitExceeded`.

    Attributes:
        max_threads: live threads at once, the main thread included (`spawn` past it raises
            `process <pid> (<name>): thread limit of <N> reached`).
        max_wall_time: seconds from start; the process is killed past it (`wall-time limit of
            <s>s exceeded`).
        max_tokens: tokens fed to `pred`, all threads together (`token limit of <N> reached
            (<used> used, pred asks <n> more)`).
        max_pages: KV pages held by the process's open files (`page quota of <N> reached
            (…)`).
    """

    max_threads: int = 64
    max_wall_time: float | None = None  # seconds
    max_tokens: int | None = None  # tokens fed to pred, all threads together
    max_pages: int | None = None  # KV pages held by the process's open files

    def __post_init__(self) -> None:
        # A NaN wall time would compare false to every clock reading: the limit switched off.
        w = self.max_wall_time
        if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 < w < math.inf):
            raise SymphonyError(f"Limits: max_wall_time must be a finite number of seconds > 0, got {w!r}")
        for name in ("max_threads", "max_tokens", "max_pages"):
            v = getattr(self, name)
            if (v is not None or name == "max_threads") and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise SymphonyError(f"Limits: {name} must be an int >= 0, got {v!r}")

"""How long torch's OpenMP workers wait between parallel regions: set before torch loads libgomp.

After a parallel region libgomp's worker threads spin a while (GOMP_SPINCOUNT, ~3 ms by default)
before they sleep, so that the next region finds them awake. But once the process has more OpenMP
threads than CPUs it cuts that spin to ~100 rounds, about a microsecond. An engine is in that state
as soon as a second thread runs forward passes (every thread that runs one has an OpenMP team of its
own): the batch scheduler's thread beside the one that loaded the model and timed its kernels, or a
`pred_batch` caller beside the scheduler. Then each of a decode step's ~150 parallel regions began
by waking a sleeping worker: on a 2-core Zen 4 a one-sequence q4 step went from 4.8 to 7.3 ms once
the runtime had started, and the server's inter-token latency with it. OMP_WAIT_POLICY=ACTIVE raises
the cut spin to 1000 rounds (~10 µs), enough to reach the next region: 4.8 ms either way. Its
GOMP_SPINCOUNT keeps the full spin at libgomp's own default (ACTIVE alone would spin for minutes),
so an idle engine still goes to sleep.

libgomp reads both once, when it loads (with torch), so this sets them where neither is set and torch
is not loaded yet; `symphony_core` does that first thing on import.
"""

from __future__ import annotations

import os
import sys

WAITS = {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000"}

set_here: dict[str, str] = {}  # what this process set (a peer's own process can be started without it)
_noted = False


def _user_chose() -> bool:
    return any(name in os.environ for name in WAITS)


def tune() -> None:
    if "torch" in sys.modules or _user_chose():
        return
    for name, value in WAITS.items():
        os.environ[name] = value
        set_here[name] = value


def note_if_missed() -> None:
    """One line on stderr, once, where torch was loaded before `tune` could run and the user chose no waits."""
    global _noted
    if _noted or set_here or _user_chose():
        return
    _noted = True
    settings = " ".join(f"{k}={v}" for k, v in WAITS.items())
    print(
        "symphony: torch was imported before symphony_core, so OpenMP's workers sleep between parallel regions "
        "once two threads run forward passes (a one-sequence decode step ~1.5x slower); import symphony_core "
        f"first, or start Python with {settings}",
        file=sys.stderr,
    )


def without_ours(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) without what `tune` set: for starting another program as its users would."""
    env = dict(os.environ if env is None else env)
    for name, value in set_here.items():
        if env.get(name) == value:
            del env[name]
    return env

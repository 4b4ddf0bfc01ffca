"""The thread-stepping matrix (docs/architecture.md, "Stepping and threads"): one expectations
table that every front-end's test walks — the Python API, the protocol over WebSocket, the
notebook widget's comm and the TUI.

Each case launches a LIP of tests/step_lips.py stopped on entry, then steps the thread the last
step landed on until the process ends. `landings` is what each stop must be, in order:
`(tid, call, where, reason)`, the entry stop first, then one per step, then `EXITED`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXITED = "exited"
Landing = tuple[int, str | None, str, str] | str

PRED = ("pred", "after", "step")
JOIN = ("join", "after", "step")
ENTRY = (1, None, "entry", "entry")


@dataclass(frozen=True)
class Case:
    name: str  # the rule it shows
    lip: str  # a function of tests/step_lips.py
    landings: list[Landing]
    breakpoints: list[dict] = field(default_factory=list)  # set_breakpoint arguments, bound to the process

    @property
    def fn(self) -> str:
        return f"tests.step_lips:{self.lip}"


CASES = [
    # the stepped thread ends: the step goes on to the main thread's join returning; the main
    # thread blocks in join on a thread held at its first pred: the step lands on that thread
    Case(
        "thread_ends_and_join_blocks",
        "two_workers",
        [ENTRY, (1, *PRED)] + [(2, *PRED)] * 4 + [(1, *JOIN)] + [(3, *PRED)] * 4 + [(1, *JOIN), EXITED],
    ),
    # another thread hits a breakpoint first (the stepped main thread waits in join): that thread,
    # reason "breakpoint"
    Case(
        "other_thread_breakpoint_first",
        "helper_first",
        [ENTRY, (1, *PRED), (2, "kv_create", "before", "breakpoint"), (2, *PRED), (1, *JOIN), EXITED],
        breakpoints=[{"call": "kv_create", "tid": 2}],
    ),
    Case("single_thread", "single", [ENTRY] + [(1, *PRED)] * 3 + [EXITED]),
]


def landing(stop: dict) -> Landing:
    """A stop (the protocol's view) as the table writes it."""
    if stop.get("exited"):
        return EXITED
    return (stop["tid"], stop["call"], stop["where"], stop["reason"])


def walk(case: Case, first: dict, step_from, limit: int = 30) -> list[Landing]:
    """Step from stop `first` until the process ends: `step_from(stop)` steps the stop's thread and
    answers where it landed. The landings seen, in order."""
    seen, stop = [landing(first)], first
    while seen[-1] != EXITED and len(seen) < limit:
        stop = step_from(stop)
        seen.append(landing(stop))
    return seen


__all__ = ["CASES", "EXITED", "Case", "landing", "walk"]

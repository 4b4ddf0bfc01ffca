"""What the server hands the sandbox for one program: its source, entry point, arguments,
confinement and the callbacks the server keeps (the quota check before each pred, where its
`print` output goes, and the per-user memory budget that a pred's logits are charged to)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .confine import SandboxSpec


@dataclass
class SandboxJob:
    """One program to run in a worker."""

    source: str
    entry: str
    args: list
    kwargs: dict
    name: str
    spec: SandboxSpec
    before_pred: Callable[[str, int], None] = lambda user, n: None
    on_stdout: Callable[[str, str], None] = lambda stream, text: None
    max_message_bytes: int | None = None  # one `sym.send`, as JSON
    # server memory charged to a user (user, bytes, what) -> its release; raises LimitExceeded past the budget
    hold_memory: Callable[[str, int, str], Callable[[], None]] = lambda user, n, what: lambda: None


__all__ = ["SandboxJob"]

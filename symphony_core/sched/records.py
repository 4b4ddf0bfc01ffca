"""What every fired batch leaves behind, for the live views, the debugger and the tests."""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field


@dataclass
class BatchMember:
    pid: int | None
    tid: int | None
    user: str
    file: int  # KV file id
    tokens: int  # tokens this member fed in this batch
    kind: str  # "decode" | "prefill"
    chunk: tuple[int, int, int]  # (start, end, total) of the call's tokens run here


@dataclass
class BatchRecord:
    bid: int
    t_start: float
    t_end: float
    members: list[BatchMember]
    tokens: int
    queue_depth: int  # calls queued when it fired (members included)
    pages_used: int
    pages_total: int
    policy: str
    errors: int = 0

    @property
    def size(self) -> int:
        return len(self.members)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["size"] = self.size
        return d


@dataclass
class BatchLog:
    """The most recent batch records (bounded), plus running totals that never roll over."""

    maxlen: int = 20000
    records: deque = field(default_factory=deque)
    total_batches: int = 0
    total_tokens: int = 0
    total_members: int = 0

    def add(self, r: BatchRecord) -> None:
        self.records.append(r)
        if len(self.records) > self.maxlen:
            self.records.popleft()
        self.total_batches += 1
        self.total_tokens += r.tokens
        self.total_members += r.size

    def since(self, bid: int) -> list[BatchRecord]:
        return [r for r in list(self.records) if r.bid > bid]

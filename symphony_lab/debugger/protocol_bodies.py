"""The typed bodies of the protocol's analysis commands (`profile_*`, `what_if`), as a client
receives them (docs/protocol.md, "Profiling and what-if"). protocol.py re-exports them."""

from __future__ import annotations

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

# closed: a field the debugger sends and these do not name fails the schema check (protocol_schema.py)
Closed = ConfigDict(extra="forbid")


@with_config(Closed)
class TimesBody(TypedDict):
    """Seconds per bucket (docs: symphony_lab/profiler/profile.py) and the counts."""

    queue: float
    forward: float
    own: float
    blocking: float
    kernel: float
    total: float
    preds: int
    tokens: int
    syscalls: int


@with_config(Closed)
class ProfileThreadBody(TimesBody):
    pid: int
    tid: int
    name: str
    t_start: float
    t_end: float
    wall: float
    dropped: int  # records that fell off the collector's bounded log


@with_config(Closed)
class ProfileLineBody(TimesBody):
    pid: int
    tid: int
    file: str
    name: str  # how the file is shown: a notebook cell's `In[3]`, else its base name
    line: int
    function: str
    inclusive: float  # seconds with the line anywhere on the stack


@with_config(Closed)
class ProfileStackBody(TimesBody):
    frames: list[tuple[str, int, str]]  # [[file, line, function], ...], outermost first


@with_config(Closed)
class ProfilingBody(TypedDict):
    """`profile_start`: what is being profiled."""

    pid: int | None  # None: every process of the engine
    profiling: bool
    since: float  # engine clock


@with_config(Closed)
class ProfileBody(ProfilingBody):
    """`profile` / `profile_stop`: the profile so far (lines and stacks: the `top` costliest)."""

    done: bool  # the process has ended and every thread's end was seen: the profile is final
    threads: list[ProfileThreadBody]
    lines: list[ProfileLineBody]
    stacks: list[ProfileStackBody]
    pages: list[tuple[float, int, int]]  # [t, pages used, pages total] after each batch
    batches: int
    lines_total: int  # before `top` cut the list


@with_config(ConfigDict(extra="forbid", strict=True))  # an argument too: "8" is not a top_k
class SamplerSettings(TypedDict, total=False):
    """`what_if`'s `sampler`: the alternative's decoding (symphony_core.model.sampling.Sampler)."""

    temperature: float
    top_k: int
    top_p: float
    min_p: float
    seed: int


@with_config(Closed)
class WhatIfFile(TypedDict):
    fid: int
    parent: int | None
    len: int


@with_config(Closed)
class WhatIfPair(TypedDict):
    """The original continuation's and the alternative's texts."""

    original: str
    alternative: str


@with_config(Closed)
class WhatIfTokenTexts(TypedDict):
    original: list[str]  # one text per token
    alternative: list[str]


@with_config(Closed)
class WhatIfFiles(TypedDict):
    base: WhatIfFile  # the shared prefix
    original: WhatIfFile
    alternative: WhatIfFile


@with_config(Closed)
class WhatIfBody(TypedDict):
    """`what_if`: both continuations from `position` of thread `tid`'s recorded token stream."""

    pid: int
    tid: int
    position: int  # tokens[:position] is the shared prefix
    token: int  # the alternative's first token
    original_token: int  # the recorded token at `position`
    sampler: SamplerSettings | None  # the alternative's sampler (None: greedy, like the original)
    original: list[int]
    alternative: list[int]
    recorded: list[int]  # the recording's tokens from `position` on
    token_texts: WhatIfTokenTexts
    texts: WhatIfPair  # the continuations as text
    diverge_at: int | None  # first index where the continuations differ (None: identical)
    reproduces_recording: bool  # the original continuation equals the recording
    shared_pages: list[int]  # KV pages both forks held: the prefix's
    prefix_pages: int
    files: WhatIfFiles  # the fork tree
    recomputed_prefix: bool  # False when the prefix came from a live KV file (`source`)


__all__ = [
    "ProfileBody",
    "ProfileLineBody",
    "ProfileStackBody",
    "ProfileThreadBody",
    "ProfilingBody",
    "SamplerSettings",
    "TimesBody",
    "WhatIfBody",
    "WhatIfFile",
    "WhatIfFiles",
    "WhatIfPair",
    "WhatIfTokenTexts",
]

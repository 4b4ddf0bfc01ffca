"""The typed bodies of the protocol's analysis commands (`profile_*`, `what_if`), as a client
receives them (docs/protocol.md, "Profiling and what-if"). protocol.py re-exports them."""

from __future__ import annotations

from typing_extensions import TypedDict


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


class ProfileThreadBody(TimesBody):
    pid: int
    tid: int
    name: str
    t_start: float
    t_end: float
    wall: float
    dropped: int  # records that fell off the collector's bounded log


class ProfileLineBody(TimesBody):
    pid: int
    tid: int
    file: str
    line: int
    function: str
    inclusive: float  # seconds with the line anywhere on the stack


class ProfileStackBody(TimesBody):
    frames: list[list]  # [[file, line, function], ...], outermost first


class ProfilingBody(TypedDict):
    """`profile_start`: what is being profiled."""

    pid: int | None  # None: every process of the engine
    profiling: bool
    since: float  # engine clock


class ProfileBody(ProfilingBody):
    """`profile` / `profile_stop`: the profile so far (lines and stacks: the `top` costliest)."""

    done: bool  # the process has ended and every thread's end was seen: the profile is final
    threads: list[ProfileThreadBody]
    lines: list[ProfileLineBody]
    stacks: list[ProfileStackBody]
    pages: list[list]  # [t, pages used, pages total] after each batch
    batches: int
    lines_total: int  # before `top` cut the list


class SamplerSettings(TypedDict, total=False):
    """`what_if`'s `sampler`: the alternative's decoding (symphony_core.model.sampling.Sampler)."""

    temperature: float
    top_k: int
    top_p: float
    min_p: float
    seed: int


class WhatIfFile(TypedDict):
    fid: int
    parent: int | None
    len: int


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
    token_texts: dict[str, list[str]]  # original / alternative: one text per token
    texts: dict[str, str]  # original / alternative: the continuation as text
    diverge_at: int | None  # first index where the continuations differ (None: identical)
    reproduces_recording: bool  # the original continuation equals the recording
    shared_pages: list[int]  # KV pages both forks held: the prefix's
    prefix_pages: int
    files: dict[str, WhatIfFile]  # base / original / alternative KV files (the fork tree)
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
]

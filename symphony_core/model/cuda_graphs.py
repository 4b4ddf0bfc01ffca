"""Decode steps replayed as CUDA graphs, one captured per padded batch size (as vLLM and nano-vllm do).

A decode step of a small model on a GPU is mostly launch gaps: ~10 kernels a layer, each a few µs of
work. A graph replays all of a step's launches at once. It replays fixed addresses and shapes, so
each captured size reads its inputs from static buffers (made once, for the largest size; a size
uses their leading rows) and writes its logits into one static buffer: a batch of B decodes is padded
to the next captured size, its inputs copied into the buffers, the graph replayed, and the first B
rows of logits copied out (a `Dist` may be read after the next step has replayed the graph again).

The padding rows mirror the batch's last row (its token, position, write slot and context): they
compute the same K/V and write them to the same slot, so nothing outside the batch is touched and
the slot holds what the real row wrote. The attention is the Triton kernel (triton_backend.py): its
grid is one program per row, and how far each reads into its context comes from `seq_lens` in
device memory, so one graph serves every context length up to the table's width.

Only batches of single-token decodes in one group (`takes`) replay; prefills, chunks and mixed
batches run the model eagerly. Each size is captured on first use (a warm-up run first: Triton
compiles, cuBLAS chooses), or all at once by `capture_all` (an engine does at start, before any
program runs: a capture must not see another thread's work on the GPU). `capture` is how a graph
is made: CUDA's by default; the tests on the CPU pass one that reruns the forward eagerly.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from typing import Any, cast

import torch

from .forward_batch import AttentionGroup, ForwardBatch
from .triton_attention import LaunchPlan
from .triton_backend import page_table


def graph_sizes(max_batch: int) -> list[int]:
    """The padded batch sizes captured: 1, 2, 4, 8, then every 16 up to `max_batch`."""
    sizes = [s for s in (1, 2, 4, 8) if s <= max_batch] + list(range(16, max_batch + 1, 16))
    if not sizes or sizes[-1] != max_batch:
        sizes.append(max_batch)
    return sizes


class Replay:
    """A captured step: `replay()` reruns it, leaving its result in `output` (the same tensor each time)."""

    def __init__(self, replay: Callable[[], Any], output: torch.Tensor) -> None:
        self.replay = replay
        self.output = output


def cuda_capture(step: Callable[[], torch.Tensor], pool: Any) -> tuple[Replay, Any]:
    """Capture `step` as a CUDA graph in the memory pool `pool` (None: a new one); returns it and its pool."""
    step()  # warm-up, outside the graph: kernels compile and libraries pick their algorithms
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
        out = step()
    return Replay(graph.replay, out), graph.pool()


def eager_capture(step: Callable[[], torch.Tensor], pool: Any) -> tuple[Replay, Any]:
    """A stand-in for `cuda_capture` where there is no GPU: `replay` reruns the step eagerly into one output."""
    out = step()
    return Replay(lambda: out.copy_(step()), out), pool


class DecodeGraphs:
    def __init__(
        self,
        model,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        page_size: int,
        max_batch: int = 256,
        capture: Callable[[Callable[[], torch.Tensor], Any], tuple[Replay, Any]] = cuda_capture,
    ) -> None:
        self.model = model
        self.k_cache, self.v_cache = k_cache, v_cache
        self.page_size = page_size
        self.sizes = graph_sizes(max_batch)
        self.max_context = model.cfg.max_positions
        self.capture = capture
        self.graphs: dict[int, Replay] = {}
        self.pool: Any = None  # the graphs' one memory pool: a step's temporaries are reused by every size
        # Every size leaves its logits in the first rows of this one buffer (not one output per graph:
        # at 256 rows and a 128k vocabulary each would hold 128 MB).
        self.logits: torch.Tensor | None = None
        self.replays = 0  # steps run by replaying a graph (stats and tests)
        n, dev = self.sizes[-1], model.device
        # Static inputs; a padded size reads their first rows. Row values before use: a valid dummy
        # step (token 0 at position 0, writing slot 0 of page 0: free when `capture_all` runs).
        self.tokens = torch.zeros(n, dtype=torch.long, device=dev)
        self.positions = torch.zeros(n, dtype=torch.long, device=dev)
        self.write_slots = torch.zeros(n, dtype=torch.long, device=dev)
        self.table = torch.zeros(n, -(-self.max_context // page_size), dtype=torch.int32, device=dev)
        self.seq_lens = torch.ones(n, dtype=torch.int32, device=dev)
        self.rows = torch.arange(n, device=dev)
        self.progs = torch.arange(n, dtype=torch.int32, device=dev)
        self.ones = torch.ones(n, dtype=torch.int32, device=dev)
        self.zeros = torch.zeros(n, dtype=torch.int32, device=dev)

    def padded(self, n: int) -> int | None:
        """The captured size a batch of `n` decodes runs at (None: more than the largest)."""
        i = bisect.bisect_left(self.sizes, n)
        return self.sizes[i] if i < len(self.sizes) else None

    def takes(self, fb: ForwardBatch) -> bool:
        """Single-token decodes only, in one group that covers the batch, within the captured sizes."""
        if len(fb.groups) != 1:
            return False
        g = fb.groups[0]
        return (
            isinstance(g, AttentionGroup)
            and g.n_query == 1
            and g.prefix_slots is None
            and g.all_rows
            and len(fb.output_counts) == g.n_seqs
            and fb.output_rows.shape[0] == g.n_seqs  # one output each (a row may ask for none)
            and g.n_seqs <= self.sizes[-1]
            and g.context_len <= self.max_context
        )

    def _static_batch(self, bs: int) -> ForwardBatch:
        plan = LaunchPlan(
            self.table[:bs],
            self.seq_lens[:bs],
            self.ones[:bs],
            self.rows[:bs],
            self.progs[:bs],
            self.zeros[:bs],
            self.page_size,
            1,
        )
        groups = cast("list[AttentionGroup]", [plan])  # the backend's plan() passes a LaunchPlan through
        return ForwardBatch(
            self.tokens[:bs], self.positions[:bs], self.write_slots[:bs], groups, self.rows[:bs], [1] * bs
        )

    def graph(self, bs: int) -> Replay:
        g = self.graphs.get(bs)
        if g is None:
            fb = self._static_batch(bs)

            def step() -> torch.Tensor:
                out = self.model.forward(fb, self.k_cache, self.v_cache)
                if self.logits is None:  # on the first (warm-up) run, outside any capture
                    self.logits = torch.empty(self.sizes[-1], out.shape[1], dtype=out.dtype, device=out.device)
                return self.logits[:bs].copy_(out)

            g, self.pool = self.capture(step, self.pool)
            self.graphs[bs] = g
        return g

    @torch.inference_mode()
    def capture_all(self) -> None:
        """Capture every size, the largest first (its memory is then reused by the smaller ones)."""
        for bs in reversed(self.sizes):
            self.graph(bs)

    @torch.inference_mode()
    def forward(self, fb: ForwardBatch, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        """The logits [B, vocab] of a batch `takes` accepted, by replaying the graph of its padded size."""
        assert k_cache is self.k_cache and v_cache is self.v_cache, "a graph reads the pool it was captured on"
        g = fb.groups[0]
        b = g.n_seqs
        bs = self.padded(b)
        assert bs is not None
        self.tokens[:b].copy_(fb.token_ids, non_blocking=True)
        self.positions[:b].copy_(fb.positions, non_blocking=True)
        self.write_slots[:b].copy_(fb.write_slots, non_blocking=True)
        width = -(-g.context_len // self.page_size)
        self.table[:b, :width].copy_(page_table(g.context_slots, b, g.context_len, self.page_size))
        self.seq_lens[:b].copy_(torch.tensor(g.lengths, dtype=torch.int32), non_blocking=True)
        if bs > b:  # padding rows mirror the last real row
            for buf in (self.tokens, self.positions, self.write_slots, self.seq_lens):
                buf[b:bs].copy_(buf[b - 1 : b].expand(bs - b))
            self.table[b:bs, :width].copy_(self.table[b - 1 : b, :width].expand(bs - b, width))
        graph = self.graph(bs)
        graph.replay()
        self.replays += 1
        return graph.output[:b].clone()


GRAPHS_ENV = "SYMPHONY_CUDA_GRAPHS"  # "0": decode eagerly; else the largest batch captured (default 256)


def decode_graphs_for(model, k_cache: torch.Tensor, v_cache: torch.Tensor, page_size: int) -> DecodeGraphs | None:
    """Every size captured for a CUDA model whose attention is the Triton kernel; None elsewhere."""
    setting = os.environ.get(GRAPHS_ENV, "256")
    if model.device.type != "cuda" or getattr(model.attention, "name", None) != "triton_paged" or setting == "0":
        return None
    graphs = DecodeGraphs(model, k_cache, v_cache, page_size, max_batch=int(setting))
    graphs.capture_all()
    return graphs

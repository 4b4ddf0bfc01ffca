"""What one forward pass computes: the tokens of many `pred` calls and where their K/V live.

The model sees slots, never files: each sequence brings the slots its new tokens are written
to and the slots of its whole context (prefix + new tokens, in cache order). Attention runs
per *group*: all single-token decodes share one padded group; each multi-token chunk gets its
own, so a long prefill pads nobody (on CPU the short chunks over short contexts share one
decode-style group instead, a row per token). On CPU, decodes that share leading slots (forks of one
file) get a shared-prefix group instead (see attention.py). Every index tensor is built here,
once per batch, and reused by all layers.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import torch

# A sequence of cache slots: a list, or a KV file's cached int64 array (`KVFS.cached_context_slots`).
Slots = list[int] | array


def _on_cpu(device) -> bool:
    return device == "cpu" or getattr(device, "type", None) == "cpu"


def _long(x: Slots, device) -> torch.Tensor:
    """An int64 tensor from a list of ints (or an int64 array, copied): through a C array, ~3x faster
    than torch.tensor(list) (and, unlike torch.arange and friends, it never lets go of the GIL in the
    middle). A KV file's cached slot array is copied: while a tensor views an array, the array cannot grow."""
    if not x:
        return torch.empty(0, dtype=torch.long, device=device)
    return _long_of_array(array("q", x), device)


def _long_of_array(a: array, device) -> torch.Tensor:
    """An int64 tensor over an int64 array this batch made (no copy: nobody grows it afterwards)."""
    if not a:
        return torch.empty(0, dtype=torch.long, device=device)
    t = torch.frombuffer(a, dtype=torch.long)
    return t if _on_cpu(device) else t.to(device)


def _length_mask(lens: list[int], width: int, device) -> torch.Tensor:
    """[B, 1, 1, width] bool: True on the first lens[b] slots of row b (built as bytes)."""
    ones, zeros = b"\x01" * width, b"\x00" * width
    buf = bytearray().join(ones[:n] + zeros[n:] for n in lens)
    m = torch.frombuffer(buf, dtype=torch.bool).view(len(lens), 1, 1, width)
    return m if _on_cpu(device) else m.to(device)


@dataclass
class SeqInput:
    token_ids: list[int]
    positions: list[int]
    write_slots: list[int]
    context_slots: Slots  # every slot of the file after this write, in order (a list or an int64 array)
    output_index: list[int]  # which of token_ids want logits


class AttentionGroup:
    """B sequences with Q new tokens each, attending over contexts padded to L slots.

    rows: [B*Q] rows of the flat token batch, sequence-major. context_slots: [B*L] cache slots
    (padding repeats slot 0 of the sequence). mask: [B, 1, Q, L] True = may attend; None = attend
    to all (or causal) — for a padded decode group it is built on first read from `padded_lengths`,
    since the compiled decode kernel reads `lengths` instead and most batches never need it.
    causal: a square causal block with no prefix (the kernel builds the mask). all_rows: rows are
    exactly 0..T-1 in order (read q and write the output in place). lengths: the true context
    length of each sequence (for paged kernels). A shared-prefix ("cascade") decode group: every
    sequence's context starts with the same prefix_len slots `prefix_slots` [P]; context_slots,
    context_len and the mask then describe only each sequence's own suffix, padded to context_len.
    """

    __slots__ = (
        "rows",
        "n_seqs",
        "n_query",
        "context_slots",
        "context_len",
        "_mask",
        "_padded_lengths",
        "causal",
        "all_rows",
        "lengths",
        "prefix_slots",
        "prefix_len",
    )

    def __init__(
        self,
        rows: torch.Tensor,
        n_seqs: int,
        n_query: int,
        context_slots: torch.Tensor,
        context_len: int,
        mask: torch.Tensor | None,
        causal: bool,
        all_rows: bool,
        lengths: list[int],
        prefix_slots: torch.Tensor | None = None,
        prefix_len: int = 0,
        padded_lengths: list[int] | None = None,
    ) -> None:
        self.rows = rows
        self.n_seqs = n_seqs
        self.n_query = n_query
        self.context_slots = context_slots
        self.context_len = context_len
        self._mask = mask
        self._padded_lengths = padded_lengths  # each row's slots in context_slots, when some are padding
        self.causal = causal
        self.all_rows = all_rows
        self.lengths = lengths
        self.prefix_slots = prefix_slots
        self.prefix_len = prefix_len

    @property
    def mask(self) -> torch.Tensor | None:
        if self._mask is None and self._padded_lengths is not None:
            self._mask = _length_mask(self._padded_lengths, self.context_len, self.context_slots.device)
        return self._mask


class DecodeRows:
    """Single-token decodes as columns: token, position, write slot and context slots of each.

    Most batches are mostly these, and for them a `SeqInput` per row (four one-element lists)
    cost more to build than the row's own data. `KVFS.append_decodes` appends to the columns as it
    takes each decode's slot; their rows come first in the batch, in order. The columns are
    int64 arrays, which become tensors without a conversion per value."""

    __slots__ = ("tokens", "positions", "slots", "contexts")

    def __init__(self) -> None:
        self.tokens = array("q")
        self.positions = array("q")
        self.slots = array("q")
        self.contexts: list[Slots] = []  # every slot of the file after this write, in order

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass
class ForwardBatch:
    token_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    write_slots: torch.Tensor  # [T]
    groups: list[AttentionGroup]
    output_rows: torch.Tensor  # [R]
    output_counts: list[int]  # outputs per sequence, to split logits back

    @classmethod
    def build(
        cls,
        seqs: list[SeqInput],
        device: torch.device | str = "cpu",
        decodes: DecodeRows | None = None,
        shared_prefixes: bool = True,
    ) -> ForwardBatch:
        """The batch of `decodes` (rows 0..D-1, one output each) followed by `seqs`, in order.
        `shared_prefixes`: on CPU, decodes that share leading slots get a shared-prefix group of their
        own (the attention backend's `shares_prefixes`; attention.py)."""
        n_dec = len(decodes) if decodes is not None else 0
        toks = array("q", decodes.tokens) if decodes is not None else array("q")  # copies: the batch's own
        pos = array("q", decodes.positions) if decodes is not None else array("q")
        slots = array("q", decodes.slots) if decodes is not None else array("q")
        outs: list[int] = list(range(n_dec))
        starts: list[int] = []
        for s in seqs:
            starts.append(len(toks))
            outs.extend(len(toks) + i for i in s.output_index)
            toks.extend(s.token_ids)
            pos.extend(s.positions)
            slots.extend(s.write_slots)
        total = len(toks)
        # Every single-token row attends as a decode: the columns' rows, then the single-token seqs.
        dec_ctx: list[Slots] = list(decodes.contexts) if decodes is not None else []
        dec_rows: list[int] = list(range(n_dec))
        chunks: list[int] = []
        for i, s in enumerate(seqs):
            if len(s.token_ids) == 1:
                dec_ctx.append(s.context_slots)
                dec_rows.append(starts[i])
            else:
                chunks.append(i)
        groups = []
        outs_t = None
        if dec_ctx and shared_prefixes and _on_cpu(device):
            shared, rest = _shared_prefixes(dec_ctx)
            for members, n in shared:
                groups.append(
                    _decode_group([dec_ctx[i] for i in members], [dec_rows[i] for i in members], total, device, n)
                )
            if len(rest) < len(dec_ctx):
                dec_ctx, dec_rows = [dec_ctx[i] for i in rest], [dec_rows[i] for i in rest]
        if dec_ctx:
            # A batch of decodes only (most are): the group's rows and the output rows are the same tensor.
            rows_t = _long(dec_rows, device)
            groups.append(_decode_group(dec_ctx, dec_rows, total, device, rows_t=rows_t))
            if not seqs and len(dec_rows) == total:
                outs_t = rows_t
        if _on_cpu(device):
            folded = [i for i in chunks if _folds_into_rows(seqs[i])]
            chunks = [i for i in chunks if not _folds_into_rows(seqs[i])]
            if folded:
                groups.append(_folded_chunks([seqs[i] for i in folded], [starts[i] for i in folded], total, device))
        for i in chunks:
            groups.append(_chunk_group(seqs[i], starts[i], total, device))

        return cls(
            _long_of_array(toks, device),
            _long_of_array(pos, device),
            _long_of_array(slots, device),
            groups,
            _long(outs, device) if outs_t is None else outs_t,
            [1] * n_dec + [len(s.output_index) for s in seqs],
        )


def _decode_group(
    contexts: list[Slots], rows: list[int], total: int, device, n_prefix: int = 0, rows_t: torch.Tensor | None = None
) -> AttentionGroup:
    """One query row per context (rows[b] of the batch attends over contexts[b]; `rows_t`: the same
    as a tensor, where the caller has it), padded to the longest. With `n_prefix` (a shared-prefix group) the first n_prefix slots, the same for every
    member, are kept apart as `prefix_slots` and the padded context holds only each row's own suffix.
    The padded slots are copied into one int64 array (a memcpy for a file's cached slot array)."""
    lens = [len(c) for c in contexts]
    own = [n - n_prefix for n in lens] if n_prefix else lens
    width = max(own)
    flat = array("q")
    for c, n in zip(contexts, own):
        flat.extend(c[n_prefix:] if n_prefix else c)
        if n < width:
            flat.extend(c[n_prefix : n_prefix + 1] * (width - n))
    return AttentionGroup(
        rows=_long(rows, device) if rows_t is None else rows_t,
        n_seqs=len(contexts),
        n_query=1,
        context_slots=_long_of_array(flat, device),
        context_len=width,
        mask=None,
        padded_lengths=own if min(own) != width else None,
        causal=False,
        all_rows=len(rows) == total and rows[-1] == total - 1,  # rows increase: then they are 0..T-1
        lengths=lens,
        prefix_slots=_long(contexts[0][:n_prefix], device) if n_prefix else None,
        prefix_len=n_prefix,
    )


# On CPU the short chunks over short contexts form one decode-style group, a query row per token
# (`_folded_chunks`), so a wide batch of many programs' short prompts runs one attention call a layer
# instead of one per chunk, each with its own gather (~130 µs a chunk a layer: 100 programs
# prefilling 12 tokens spent ~8% of a forward there). The limits keep the group's padding (every row
# is padded to the longest context) small.
FOLD_MAX_QUERY = 32
FOLD_MAX_CONTEXT = 128


def _folds_into_rows(s: SeqInput) -> bool:
    return len(s.token_ids) <= FOLD_MAX_QUERY and len(s.context_slots) <= FOLD_MAX_CONTEXT


def _folded_chunks(seqs: list[SeqInput], starts: list[int], total: int, device) -> AttentionGroup:
    """Short chunks as one decode-style group, a row per token: token j of a q-token chunk over
    `length` slots attends over the first length - q + j + 1 (its own slot and those before). A
    group of their own, so a long decode in the batch pads none of them."""
    contexts: list[Slots] = []
    rows: list[int] = []
    for s, start in zip(seqs, starts):
        q, length = len(s.token_ids), len(s.context_slots)
        contexts += [s.context_slots[: length - q + j + 1] for j in range(q)]
        rows += range(start, start + q)
    return _decode_group(contexts, rows, total, device)


# A shared-prefix group needs this many sequences with this many common leading slots (one
# 16-slot page at the default page size); below, the plain decode group is as fast.
CASCADE_MIN_SEQS = 2
CASCADE_MIN_PREFIX = 16


def _common_prefix(a: Slots, b: Slots, n: int) -> int:
    """Length of the common prefix of a[:n] and b[:n] (slice compares run in C: binary search)."""
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _shared_prefixes(contexts: list[Slots]) -> tuple[list[tuple[list[int], int]], list[int]]:
    """Split single-token decodes (their contexts) into shared-prefix clusters ([members], prefix
    length) and the rest (indices, in order). Sequences forked from one file share its leading
    pages, hence the same leading slots: cluster by the first slot, then take the cluster's longest
    common slot prefix, kept at least one slot short of every context so each sequence has a suffix
    (its own new token). Contexts that all start apart (no forks among them) are told in one
    C-level pass."""
    firsts = [c[0] for c in contexts]
    if len(set(firsts)) == len(firsts):
        return [], list(range(len(contexts)))
    by_first: dict[int, list[int]] = {}
    for i, first in enumerate(firsts):
        by_first.setdefault(first, []).append(i)
    shared, rest = [], []
    for members in by_first.values():
        n = 0
        if len(members) >= CASCADE_MIN_SEQS:
            ref = contexts[members[0]]
            n = min(len(contexts[i]) for i in members) - 1
            for i in members[1:]:
                if n < CASCADE_MIN_PREFIX:
                    break
                n = _common_prefix(ref, contexts[i], n)
        if n >= CASCADE_MIN_PREFIX:
            shared.append((members, n))
        else:
            rest.extend(members)
    rest.sort()
    return shared, rest


def _chunk_group(s: SeqInput, start: int, total: int, device) -> AttentionGroup:
    q, length = len(s.token_ids), len(s.context_slots)
    rows = torch.arange(start, start + q, device=device)
    ctx = _long(s.context_slots, device)
    mask = None
    if q != length:
        # Query i sits at cache index (length - q + i) and sees everything up to and including it.
        qi = torch.arange(q, device=device)[:, None] + (length - q)
        mask = (torch.arange(length, device=device)[None, :] <= qi)[None, None]
    return AttentionGroup(
        rows=rows,
        n_seqs=1,
        n_query=q,
        context_slots=ctx,
        context_len=length,
        mask=mask,
        causal=q == length,
        all_rows=start == 0 and q == total,
        lengths=[length],
    )

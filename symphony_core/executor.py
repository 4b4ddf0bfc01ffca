"""Runs a list of `pred` calls as one forward pass: validate, reserve KV slots, forward, sample.

This is where KVFS meets the model, and the one way to it: `Engine.pred_batch` and the batch
scheduler both call `Executor.run`, which holds the forward lock for the whole pass. Each call
is checked on its own (its sampler too), so one bad call gets its own error and the rest of the
batch runs. A failed forward rolls every reservation back, so no file is ever left holding
tokens whose K/V were not written, and runs the members again in halves, so that only the calls
that make it fail get the error; a call whose in-engine pick fails is taken back out of its file.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, cast

import torch

from .errors import PredError, SymphonyError
from .kvfs import KV, KVFS, KVFile, Reservation
from .model.dist import Dist, fast_argmax, version_of
from .model.forward_batch import DecodeRows, ForwardBatch, SeqInput
from .model.llama import PagedLlama
from .model.sampling import Sampler, sample_rows
from .pred_args import as_int_list, check_sampler

if TYPE_CHECKING:  # imported on CUDA only (it needs Triton)
    from .model.cuda_graphs import DecodeGraphs

_perf = time.perf_counter
_thread_time = time.thread_time
_is_decode = attrgetter("decode")
_kv_of = attrgetter("kv")
_argmax_read = attrgetter("argmax_read")


class PredCall:
    """One `pred` call: its arguments as given (what `Engine.pred_batch` takes) and, once
    `Executor.prepare` has checked them, their normalised form (`tokens`, `pos`, `out_index`,
    `mask_tensor`; `plain`: one output, the last, with no sampler or mask; `decode`: plain, and one
    token at the position after the file's last, which the executor reserves inline). Default
    positions are fixed when the call's batch runs: `pos` holds them for calls the executor cuts
    into chunks, and is not kept up to date for a `decode`."""

    __slots__ = (
        "kv",
        "token_ids",
        "positions",
        "outputs",
        "sampler",
        "mask",
        "tokens",
        "pos",
        "out_index",
        "mask_tensor",
        "plain",
        "decode",
    )

    def __init__(
        self,
        kv: KV,
        token_ids: Sequence[int],
        positions: Sequence[int] | None = None,
        outputs: str | Sequence[int] = "last",
        sampler: Sampler | str | None = None,
        mask: object = None,
    ) -> None:
        self.kv = kv
        self.token_ids = token_ids
        self.positions = positions
        self.outputs = outputs
        self.sampler = sampler
        self.mask = mask
        # Filled in by `Executor.prepare`:
        self.tokens: list[int] = []
        self.pos: list[int] = []
        self.out_index: list[int] = []
        self.mask_tensor: torch.Tensor | None = None
        self.plain = False
        self.decode = False

    def __repr__(self) -> str:
        return f"PredCall({self.kv!r}, {self.token_ids!r}, outputs={self.outputs!r})"


class Executor:
    def __init__(self, model: PagedLlama, kvfs: KVFS) -> None:
        self.model = model
        self.kvfs = kvfs
        self.vocab = model.cfg.vocab_size
        self.max_pos = model.cfg.max_positions
        # Time inside the model's forward (wall, and the calling thread's CPU): what the batch
        # scheduler subtracts to report its own host cost.
        self.forward_s = 0.0
        self.forward_cpu_s = 0.0
        self.lock = threading.Lock()  # one forward pass at a time (the batch scheduler, Engine.pred)
        # On CUDA, decode-only batches replay a captured graph (model/cuda_graphs.py); set by the engine.
        self.decode_graphs: DecodeGraphs | None = None

    def prepare(self, c: PredCall) -> None:
        """Check one call's arguments against the model and its KV file; raise PredError/KVError.

        The common call (a list of ints, default positions, the last output, no sampler or
        mask) passes each check in a few operations; `as_int_list` and `_outputs` word the
        errors and take the other forms."""
        start = self.kvfs.next_write_position(c.kv, "pred")
        ids = c.token_ids
        if type(ids) is list and len(ids) == 1 and type(ids[0]) is int and 0 <= ids[0] < self.vocab:
            toks = [ids[0]]  # one in-vocabulary decode token, most calls: no need for the scans below
        else:
            toks = self._token_ids(c)
        n = len(toks)
        if c.positions is None:
            pos = [start] if n == 1 else list(range(start, start + n))
            past = start + n > self.max_pos
        else:
            pos = as_int_list(c.positions, "positions")
            if len(pos) != n:
                raise PredError(f"pred: {len(pos)} positions for {n} tokens")
            past = min(pos) < 0 or max(pos) >= self.max_pos
        if past:
            raise PredError(
                f"pred: positions {min(pos)}..{max(pos)} are past the model's context of {self.max_pos} tokens"
            )
        out = [n - 1] if type(c.outputs) is str and c.outputs == "last" else self._outputs(c.outputs, n)
        if c.sampler is not None:
            if isinstance(c.sampler, str):
                if c.sampler != "greedy":
                    raise PredError(f"pred: sampler must be a Sampler or 'greedy', got {c.sampler!r}")
                c.sampler = Sampler.greedy()
            elif not isinstance(c.sampler, Sampler):
                raise PredError(f"pred: sampler must be a Sampler, got {type(c.sampler).__name__}")
            else:
                check_sampler(c.sampler)
        c.mask_tensor = self._mask(c.mask, len(out)) if c.mask is not None else None
        c.tokens, c.pos, c.out_index = toks, pos, out
        c.plain = c.sampler is None and c.mask is None and type(c.outputs) is str and c.outputs == "last"
        c.decode = c.plain and n == 1 and c.positions is None

    def _token_ids(self, c: PredCall) -> list[int]:
        """`c.token_ids` as a new, non-empty list of in-vocabulary ints, or a PredError naming why not."""
        ids = c.token_ids
        if type(ids) is list and all(type(t) is int for t in ids):  # bools, numpy ints: `as_int_list`
            toks = list(ids)  # the caller may reuse its list
        else:
            toks = as_int_list(ids, "token_ids")
        if not toks:
            raise PredError(f"pred on {c.kv.describe()}: token_ids is empty")
        vocab = self.vocab
        if min(toks) < 0 or max(toks) >= vocab:
            raise PredError(
                f"pred: token ids {[t for t in toks if not 0 <= t < vocab][:5]} are outside the vocabulary [0, {vocab})"
            )
        return toks

    @staticmethod
    def _outputs(outputs, n: int) -> list[int]:
        """The rows `outputs` asks for, of `n` tokens: "last", "all" or a list of indices."""
        if isinstance(outputs, str):
            if outputs == "last":
                return [n - 1]
            if outputs == "all":
                return list(range(n))
            raise PredError(f"pred: outputs must be 'last', 'all' or a list of indices, got {outputs!r}")
        out = as_int_list(outputs, "outputs")
        if any(not -n <= i < n for i in out):
            raise PredError(f"pred: outputs {out} index outside the {n} tokens given")
        return [i % n for i in out]

    def _continue_positions(self, c: PredCall) -> None:
        """Default positions continue the file as it is *now*: an earlier call of the same
        batch on the same file has written its tokens since `prepare` looked."""
        start = c.kv.file.next_position
        if start + len(c.tokens) > self.max_pos:
            raise PredError(
                f"pred: positions {start}..{start + len(c.tokens) - 1} are past the model's context "
                f"of {self.max_pos} tokens"
            )
        c.pos = list(range(start, start + len(c.tokens)))

    def _mask(self, mask, rows: int) -> torch.Tensor:
        if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
            m = mask
        else:
            ids = as_int_list(mask, "mask (allowed token ids)")
            if any(not 0 <= t < self.vocab for t in ids):
                raise PredError("pred: mask holds token ids outside the vocabulary")
            m = torch.zeros(self.vocab, dtype=torch.bool)
            m[ids] = True
        if m.shape[-1] != self.vocab or m.dim() > 2 or (m.dim() == 2 and m.shape[0] != rows):
            raise PredError(f"pred: mask must be bool [{self.vocab}] or [{rows}, {self.vocab}], got {list(m.shape)}")
        if not bool(m.any(-1).all()):
            raise PredError("pred: mask allows no token at some position")
        return m

    def run(
        self, calls: list[PredCall], *, argmax: bool = False, prepared_apart: bool = False
    ) -> list[Dist | SymphonyError]:
        """Execute calls (already `prepare`d or not); results line up with `calls`. `argmax`:
        the caller will want every decode row's argmax (the event stream names it), so take
        them all in one call here rather than one per row later. `prepared_apart`: the caller
        (the batch scheduler) vouches that every call is prepared and each is on its own file."""
        with self.lock:
            if prepared_apart:
                results: list = [None] * len(calls)
                self._forward(calls, range(len(calls)), results, argmax)
                return results
            return self._run(calls, argmax)

    def _run(self, calls: list[PredCall], argmax: bool) -> list[Dist | SymphonyError]:
        results: list[Dist | SymphonyError | None] = [None] * len(calls)
        ready: list[int] = []
        for i, c in enumerate(calls):
            try:
                if not c.tokens:
                    self.prepare(c)
                ready.append(i)
            except SymphonyError as e:
                results[i] = e
        # Two calls on one file cannot share a pass: the second must see the first's K/V.
        while ready:
            seen: set[int] = set()
            now: list[int] = []
            later: list[int] = []
            for i in ready:
                fid = calls[i].kv.file.fid
                (later if fid in seen else now).append(i)
                seen.add(fid)
            self._forward([calls[i] for i in now], now, results, argmax)
            ready = later
        return results  # type: ignore[return-value]

    def _forward(self, calls: list[PredCall], idx: Sequence[int], results: list, argmax: bool) -> None:
        kvfs = self.kvfs
        decodes = DecodeRows()
        # (result index, call, the file's length before) of every member with its slots reserved, in
        # the batch's row order: the decodes' columns first, then the other calls (`seqs`).
        dec_members: list[tuple[int, PredCall, int]] = []
        seq_members: list[tuple[int, PredCall, int]] = []
        seqs: list[SeqInput] = []
        members: frozenset[int] | None = None  # the batch's file ids, spared by eviction (built when needed)
        context_slots, max_pos = kvfs.cached_context_slots, self.max_pos
        prefixes = kvfs.prefix_cache
        prompts: list[tuple[KVFile, int]] = []  # files this pass writes a prompt into: for the prefix cache
        # Most calls are one token appended after the last: KVFS's fast path takes them all at once.
        # Copy-on-write, eviction and the prefix cache's kept pages take `kvfs.reserve`, below. Other
        # members' reservations never touch a decode's pages (eviction spares them), so its context
        # slots, read now, stay right. The decodes take their slots before any other call reserves, so
        # under page pressure they get the free pages first.
        flags = list(map(_is_decode, calls))
        dec_at: Sequence[int]
        rest: list[int]
        if all(flags):
            dec_at, dec_calls, rest = range(len(calls)), calls, []
        else:
            dec_at = [j for j, d in enumerate(flags) if d]
            dec_calls = [calls[j] for j in dec_at]
            rest = [j for j, d in enumerate(flags) if not d]
        with kvfs.reserving():  # one hold for the whole batch
            if dec_calls:
                lengths = kvfs.append_decodes(
                    list(map(_kv_of, dec_calls)), [c.tokens[0] for c in dec_calls], max_pos, decodes
                )
                if -1 not in lengths:
                    dec_members = list(zip([idx[j] for j in dec_at], dec_calls, lengths))
                else:
                    for j, c, n in zip(dec_at, dec_calls, lengths):
                        if n < 0:
                            rest.append(j)
                        else:
                            dec_members.append((idx[j], c, n))
                    rest.sort()
            for j in rest:
                i, c = idx[j], calls[j]
                kv = c.kv
                f = kv.file
                n = len(f.tokens)
                # A prompt written into an empty file at positions 0..: the prefix cache may hold its start.
                prompt = n == 0 and c.positions is None and prefixes is not None and len(c.tokens) > 1
                try:
                    if c.positions is None:  # `_continue_positions`, inline for the common case
                        fp, k = f.positions, len(c.tokens)
                        start = fp[-1] + 1 if fp else 0
                        if start + k > max_pos:
                            self._continue_positions(c)  # raises the error
                        c.pos = [start] if k == 1 else list(range(start, start + k))
                    if members is None:
                        members = frozenset(call.kv.file.fid for call in calls)
                    # Every row the call wants logits for is computed: reuse stops before the first.
                    r = kvfs.reserve(kv, c.tokens, c.pos, members, min(c.out_index) if prompt else 0)
                except SymphonyError as e:
                    results[i] = e
                    continue
                seq_members.append((i, c, n))
                k = r.reused  # the first k tokens' K/V came from the prefix cache: the rest is computed
                out = [j - k for j in c.out_index] if k else c.out_index
                seqs.append(SeqInput(c.tokens[k:], c.pos[k:], r.slots, context_slots(f), out))
                if prompt:
                    prompts.append((f, len(c.tokens)))
            if not dec_members and not seq_members:
                return
        reserved = dec_members + seq_members
        try:
            fb = ForwardBatch.build(seqs, self.model.device, decodes, self.model.attention.shares_prefixes)
            w0, c0 = _perf(), _thread_time()
            graphs = self.decode_graphs
            run = graphs.forward if graphs is not None and graphs.takes(fb) else self.model.forward
            logits = run(fb, self.kvfs.pool.k, self.kvfs.pool.v)
            self.forward_cpu_s += _thread_time() - c0
            self.forward_s += _perf() - w0
        except Exception as e:
            for _, c, n in reserved:
                kvfs.rollback(Reservation(c.kv, n, []))
            self._isolate([(i, c) for i, c, _ in reserved], results, argmax, e)
            return
        except BaseException:
            for _, c, n in reserved:
                kvfs.rollback(Reservation(c.kv, n, []))
            raise
        # Every decode is plain (one output, no sampler or mask): only the other calls need a look.
        plain = all(c.plain for _, c, _ in seq_members)
        # On a GPU every row's argmax is taken in one call (one sync): a LIP's `.argmax()` then reads it.
        self._scatter(logits, fb.output_counts, reserved, results, argmax or logits.is_cuda, plain)
        for f, n in prompts:
            kvfs.remember_prompt(f, n)

    def _isolate(self, members: list[tuple[int, PredCall]], results: list, argmax: bool, e: Exception) -> None:
        """The forward pass of `members` failed (and wrote nothing): find whose rows make it fail by
        running halves apart, so that only those calls get the error and the rest their Dists."""
        if len(members) == 1:
            i, c = members[0]
            results[i] = SymphonyError(f"forward pass failed for this call: {type(e).__name__}: {e}")
            return
        half = len(members) // 2
        for part in (members[:half], members[half:]):
            self._forward([c for _, c in part], [i for i, _ in part], results, argmax)

    def _scatter(
        self, logits: torch.Tensor, counts: list[int], reserved, results: list, argmax: bool, plain: bool
    ) -> None:
        """Each reserved call's `Dist` into `results`; `plain`: every call is (`PredCall.plain`)."""
        if plain and logits.shape[0] == len(reserved):
            # The common decode batch: one row per call, nothing to mask or sample.
            # A row gets its argmax here when the row's last Dist had it read (a greedy loop), while the
            # logits are still in this core's cache: read later on each LIP's thread, one after another,
            # a row cost ~3x as much (and LIPs that sample or read the logits are not charged for it).
            row_of = Dist.row_of
            if not argmax:
                for k, (i, c, _) in enumerate(reserved):
                    f = c.kv.file
                    if f.argmax_read:
                        break
                    results[i] = row_of(logits, k, None, f)
                else:
                    return  # no row's argmax wanted
            files = [c.kv.file for _, c, _ in reserved]
            wanted = list(map(_argmax_read, files))
            version = version_of(logits)
            memos: list[tuple | None]
            if argmax or all(wanted):
                best = cast("list[int]", fast_argmax(logits))  # [B, V]: a list
                memos = [(b, logits, version) for b in best]
            else:
                memos = [(fast_argmax(logits[k]), logits, version) if w else None for k, w in enumerate(wanted)]
            for k, (i, _, _) in enumerate(reserved):
                files[k].argmax_read = False  # until this step's Dist has its argmax read (Dist.argmax)
                results[i] = row_of(logits, k, memos[k], files[k])
            return
        start = 0
        rows_by_call = []
        for (i, c, n0), n in zip(reserved, counts):
            lg = logits[start : start + n]
            start += n
            if c.mask_tensor is not None:
                lg = lg.masked_fill(~c.mask_tensor.to(lg.device), float("-inf"))
            rows_by_call.append((i, c, n0, lg))
        picks = self._sample(rows_by_call, results)
        for k, (i, c, _, lg) in enumerate(rows_by_call):
            if results[i] is not None:  # its sampling failed
                continue
            single = c.outputs == "last"
            tok = picks.get(k)
            results[i] = Dist(lg[0] if single else lg, (tok[0] if single else tok) if tok else None)

    def _sample(self, rows_by_call: list, results: list) -> dict[int, list[int]]:
        """The in-engine picks of every call with a sampler, by its index in `rows_by_call`: one
        batched call, or, when that fails, one per call, each failing call getting its error and
        its tokens taken back out of its file (its K/V was written, but the call failed)."""
        with_sampler = []
        for k, (i, c, n0, _) in enumerate(rows_by_call):
            if c.sampler is not None:
                # Again (the program may have changed its sampler since `prepare`), and its generator
                # made here, call by call: a failure inside the batched pick would cost the rows
                # before it the noise they had drawn.
                try:
                    check_sampler(c.sampler)
                    if not isinstance(c.sampler.generator(), torch.Generator):
                        raise PredError("pred: the sampler's generator() returned no torch.Generator")
                    with_sampler.append(k)
                except Exception as e:
                    results[i] = e if isinstance(e, PredError) else PredError(f"pred: the sampler failed: {e!r}")
                    self.kvfs.rollback(Reservation(c.kv, n0, []))
        if not with_sampler:
            return {}
        try:
            return self._picks(rows_by_call, with_sampler)
        except Exception:
            pass
        picks: dict[int, list[int]] = {}
        for k in with_sampler:
            i, c, n0, _ = rows_by_call[k]
            try:
                picks.update(self._picks(rows_by_call, [k]))
            except Exception as e:
                results[i] = PredError(f"pred: the sampler failed: {type(e).__name__}: {e}")
                self.kvfs.rollback(Reservation(c.kv, n0, []))
        return picks

    @staticmethod
    def _picks(rows_by_call: list, which: list[int]) -> dict[int, list[int]]:
        flat, owners = [], []
        for k in which:
            c, lg = rows_by_call[k][1], rows_by_call[k][3]
            flat.append(lg)
            owners.extend([(k, c.sampler)] * lg.shape[0])
        picks = sample_rows(torch.cat(flat), [s for _, s in owners])
        by_call: dict[int, list[int]] = {}
        for (k, _), t in zip(owners, picks):
            by_call.setdefault(k, []).append(t)
        return by_call

"""llama.cpp as a peer, through llama-cpp-python's low-level API: every sequence in one batch.

`Peer(gguf, threads, n_seq, n_ctx)` holds one model and context. `prefill` runs one prompt as
one batch; `decode` runs B prompts greedily with all B sequences in every `llama_decode` (a
`llama_batch` whose tokens carry their own seq_id), as a serving engine would, not one
`generate` per sequence. `quantize` makes F32 / Q8_0 / F16 files from the shipped Q4_1 GGUF with
llama.cpp's own quantiser (`llama_model_quantize`, requantising allowed).

Skips cleanly: `available()` says why not when the package is missing or fails to import.
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path

import numpy as np

FTYPES = {"F32": 0, "F16": 1, "Q4_1": 3, "Q8_0": 7}  # llama_ftype values (LLAMA_FTYPE_ALL_F32, MOSTLY_*)


def available() -> str | None:
    """None when llama-cpp-python imports, else why it cannot be used."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as e:
        return f"llama-cpp-python not installed (`make bench` installs the [bench] extra): {e}"
    except Exception as e:  # a broken build loads its shared library at import
        return f"llama-cpp-python does not load: {type(e).__name__}: {e}"
    return None


def _fn(lib, *names):
    for n in names:
        if hasattr(lib, n):
            return getattr(lib, n)
    raise AttributeError(f"llama-cpp-python has none of {names}")


def quantize(src: Path, dst: Path, ftype: str, threads: int) -> Path:
    """`dst` as llama.cpp's quantiser makes it from `src` (kept when it exists already)."""
    import llama_cpp as L

    if dst.exists():
        return dst
    params = L.llama_model_quantize_default_params()
    params.ftype = FTYPES[ftype]
    params.nthread = threads
    params.allow_requantize = True
    tmp = dst.with_suffix(".tmp.gguf")
    rc = L.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
    if rc != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"llama_model_quantize {src.name} -> {ftype} failed ({rc})")
    tmp.replace(dst)
    return dst


class Peer:
    def __init__(self, gguf: Path, threads: int, n_seq: int, n_ctx: int, n_batch: int = 512) -> None:
        import llama_cpp as L

        self.L = L
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        self.model = _fn(L, "llama_model_load_from_file", "llama_load_model_from_file")(str(gguf).encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {gguf}")
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        cp.n_ubatch = n_batch
        cp.n_seq_max = n_seq
        cp.n_threads = threads
        cp.n_threads_batch = threads
        if hasattr(cp, "kv_unified"):
            cp.kv_unified = True  # one cache shared by the sequences (n_ctx in all), as our page pool is
        self.ctx = _fn(L, "llama_init_from_model", "llama_new_context_with_model")(self.model, cp)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context")
        vocab = L.llama_model_get_vocab(self.model) if hasattr(L, "llama_model_get_vocab") else None
        self.n_vocab = L.llama_vocab_n_tokens(vocab) if vocab is not None else L.llama_n_vocab(self.model)
        self.n_batch, self.n_seq = n_batch, n_seq
        self.batch = L.llama_batch_init(n_batch, 0, n_seq)
        self.name = gguf.name

    def close(self) -> None:
        L = self.L
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        _fn(L, "llama_model_free", "llama_free_model")(self.model)

    def clear(self) -> None:
        L = self.L
        if hasattr(L, "llama_get_memory"):
            L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        else:
            _fn(L, "llama_kv_self_clear", "llama_kv_cache_clear")(self.ctx)

    def _run(self, items: list[tuple[int, int, int, bool]]) -> np.ndarray:
        """items: (token, position, seq_id, want_logits); returns logits [n_wanted, vocab]."""
        b = self.batch
        for i, (tok, pos, seq, want) in enumerate(items):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = want
        b.n_tokens = len(items)
        rc = self.L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        n_out = sum(1 for it in items if it[3])
        ptr = self.L.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab))

    def prefill(self, prompt: list[int]) -> float:
        """Seconds to run `prompt` (one sequence) through the model, in n_batch chunks."""
        self.clear()
        t0 = time.perf_counter()
        for s in range(0, len(prompt), self.n_batch):
            chunk = prompt[s : s + self.n_batch]
            self._run([(t, s + j, 0, s + j == len(prompt) - 1) for j, t in enumerate(chunk)])
        return time.perf_counter() - t0

    def decode(self, prompts: list[list[int]], new: int) -> tuple[float, float, list[list[int]]]:
        """Greedy, exactly `new` tokens per prompt, all sequences in each batch:
        (prefill seconds, decode seconds, tokens)."""
        self.clear()
        t0 = time.perf_counter()
        items = [(t, j, s, j == len(p) - 1) for s, p in enumerate(prompts) for j, t in enumerate(p)]
        toks: list[int] = []
        for c in range(0, len(items), self.n_batch):  # the prompts, packed into full batches
            chunk = items[c : c + self.n_batch]
            logits = self._run(chunk)
            toks += [int(i) for i in logits.argmax(axis=1)]
        t1 = time.perf_counter()
        out = [[t] for t in toks]
        pos = [len(p) for p in prompts]
        for _ in range(new - 1):
            logits = self._run([(t, pos[s], s, True) for s, t in enumerate(toks)])
            toks = [int(i) for i in logits.argmax(axis=1)]
            for s, t in enumerate(toks):
                out[s].append(t)
                pos[s] += 1
        return t1 - t0, time.perf_counter() - t1, out

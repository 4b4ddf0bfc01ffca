"""The Triton paged-attention kernel against SDPA over gathered K/V, run by Triton's interpreter on the CPU.

Every check draws fresh random K/V into a pool whose pages are handed out in a shuffled order (as
KVFS's are after some use), poisons the output first and checks that exactly the rows the batch
names were written. Shapes stay small: the interpreter runs the kernel's tile arithmetic in numpy.
On a GPU (`make gpu-check`) the same tests run compiled, with half-precision tiles multiplied as such.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

triton = pytest.importorskip("triton")

from symphony_core.model.forward_batch import ForwardBatch, SeqInput  # noqa: E402
from symphony_core.model.triton_attention import LaunchPlan, paged_attention, reference_attention  # noqa: E402
from symphony_core.model.triton_backend import TritonPaged  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


# Tolerances on max |kernel - SDPA in fp32| for outputs of unit scale: the kernel accumulates in fp32
# and rounds its output to the pool's dtype once (on a GPU half-precision tiles also round p to it).
TOL = {torch.float32: 2e-5 if DEVICE == "cpu" else 2e-3, torch.bfloat16: 2e-2, torch.float16: 4e-3}


def _pool(n_pages: int, page_size: int, kvh: int, d: int, dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(n_pages * page_size, kvh, d, generator=g).to(DEVICE, dtype)
    v = torch.randn(n_pages * page_size, kvh, d, generator=g).to(DEVICE, dtype)
    order = torch.randperm(n_pages, generator=g).tolist()
    return k, v, order


def _files(lengths: list[int], page_size: int, order: list[int]) -> list[list[int]]:
    """Each file's context slots, page by page from the shuffled free list (KVFS's layout)."""
    files, free = [], list(order)
    for n in lengths:
        pages = [free.pop() for _ in range(-(-n // page_size))]
        files.append([pages[i // page_size] * page_size + i % page_size for i in range(n)])
    return files


def _batch(lengths: list[int], new: list[int], page_size: int, order: list[int]) -> ForwardBatch:
    """Sequences with `new[b]` new tokens at the end of `lengths[b]`-slot contexts (1: a decode)."""
    seqs = []
    for ctx, n in zip(_files(lengths, page_size, order), new):
        seqs.append(SeqInput([1] * n, list(range(len(ctx) - n, len(ctx))), ctx[-n:], ctx, [n - 1]))
    return ForwardBatch.build(seqs, DEVICE, None, False)


def _check(q, k, v, fb: ForwardBatch, lengths, new, page_size, order, window=0, scale=None):
    backend = TritonPaged(page_size)
    got = backend(q, k, v, backend.plan(fb.groups), scale=scale, window=window)
    rows, r = [], 0
    for n in new:
        rows.append(r)
        r += n
    ctx = [torch.tensor(c, device=DEVICE) for c in _files(lengths, page_size, order)]
    want = reference_attention(q, k, v, ctx, rows, new, scale=scale, window=window)
    err = (got.float() - want).abs().max().item()
    assert err < TOL[k.dtype], f"max error {err:.2e} over {TOL[k.dtype]:.0e} ({k.dtype}, page {page_size})"
    return err


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("page_size", [16, 5, 1])
def test_decodes_match_sdpa(dtype, page_size):
    """Three decodes (contexts of 1, 23 and 70 slots: one, partial and several pages) with 4 query heads a KV head."""
    h, kvh, d = 8, 2, 64
    lengths, new = [1, 23, 70], [1, 1, 1]
    k, v, order = _pool(-(-100 // page_size) + 8, page_size, kvh, d, dtype, seed=page_size)
    fb = _batch(lengths, new, page_size, order)
    q = torch.randn(3, h, d, device=DEVICE).to(dtype)
    _check(q, k, v, fb, lengths, new, page_size, order)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunks_and_decodes_in_one_batch(dtype):
    """A 37-token chunk after 20 cached slots (causal within the chunk, three 16-query blocks), a whole
    40-token prompt and two decodes, with Phi-3's head size (96: not a power of two) and 3 query heads a KV head."""
    h, kvh, d, ps = 6, 2, 96, 16
    lengths, new = [57, 9, 40, 33], [37, 1, 40, 1]
    k, v, order = _pool(20, ps, kvh, d, dtype, seed=3)
    fb = _batch(lengths, new, ps, order)
    q = torch.randn(sum(new), h, d, device=DEVICE).to(dtype)
    backend = TritonPaged(ps)
    got = backend(q, k, v, backend.plan(fb.groups))
    ctx = [torch.tensor(c, device=DEVICE) for c in _files(lengths, ps, order)]
    # ForwardBatch.build puts the sequences in order: rows 0..36 the chunk, 37 a decode, 38..77 the prompt, 78 a decode
    want = reference_attention(q, k, v, ctx, [0, 37, 38, 78], new)
    err = (got.float() - want).abs().max().item()
    assert err < TOL[dtype], err


@pytest.mark.parametrize("window", [1, 8, 20])
def test_sliding_window(window):
    """Each query sees only the `window` keys ending at its own (HF's sliding-window rule), in a chunk (40
    tokens: more than a CPU batch folds into decode rows) and a decode."""
    h, kvh, d, ps = 4, 1, 32, 16
    lengths, new = [70, 30], [40, 1]
    k, v, order = _pool(8, ps, kvh, d, torch.float32, seed=window)
    fb = _batch(lengths, new, ps, order)
    q = torch.randn(41, h, d, device=DEVICE)
    _check(q, k, v, fb, lengths, new, ps, order, window=window, scale=0.3)
    full = TritonPaged(ps)
    unwindowed = full(q, k, v, full.plan(fb.groups))
    windowed = full(q, k, v, full.plan(fb.groups), window=window)
    assert not torch.allclose(unwindowed, windowed)  # the window has an effect at these lengths


def test_writes_exactly_the_rows_the_plan_names():
    """A plan naming rows 2 and 5 of 7 (decodes at scattered rows, as an engine's mixed batch puts them):
    those rows are written, the rest keep their poison."""
    h, kvh, d, ps = 4, 2, 32, 16
    k, v, order = _pool(4, ps, kvh, d, torch.float32, seed=9)
    files = _files([10, 30], ps, order)
    table = torch.zeros(2, 2, dtype=torch.int32)
    for b, f in enumerate(files):
        pages = [f[i] // ps for i in range(0, len(f), ps)]
        table[b, : len(pages)] = torch.tensor(pages, dtype=torch.int32)
    rows = torch.tensor([2, 5])
    plan = LaunchPlan(
        table.to(DEVICE),
        torch.tensor([10, 30], dtype=torch.int32, device=DEVICE),
        torch.ones(2, dtype=torch.int32, device=DEVICE),
        rows.to(DEVICE),
        torch.arange(2, dtype=torch.int32, device=DEVICE),
        torch.zeros(2, dtype=torch.int32, device=DEVICE),
        ps,
        1,
    )
    q = torch.randn(7, h, d, device=DEVICE)
    out = torch.full_like(q, float("nan"))
    paged_attention(q, k, v, plan, out)
    want = reference_attention(q, k, v, [torch.tensor(f, device=DEVICE) for f in files], [2, 5], [1, 1])
    assert torch.isnan(out[[0, 1, 3, 4, 6]]).all()
    assert (out[rows.to(DEVICE)] - want[rows.to(DEVICE)]).abs().max() < TOL[torch.float32]


def test_the_backend_chosen_on_cuda(monkeypatch):
    """On CUDA the Triton kernel is the default (choosing builds no tensor: no GPU needed to ask); the pool's
    page size reaches it; `SYMPHONY_CUDA_ATTENTION=sdpa` picks the gathering path; a CPU backend is left as it is."""
    from symphony_core.model.attention import TorchSDPA, choose_backend, for_pool

    cuda = torch.device("cuda")
    backend = choose_backend(cuda)
    assert isinstance(backend, TritonPaged) and backend.page_size == 1
    assert for_pool(backend, 16) is backend and backend.page_size == 16
    try:
        import flash_attn  # noqa: F401
    except ImportError:  # without flash-attn, 256-slot pages stay with the Triton kernel
        assert for_pool(TritonPaged(), 256).page_size == 256
    monkeypatch.setenv("SYMPHONY_CUDA_ATTENTION", "sdpa")
    assert isinstance(choose_backend(cuda), TorchSDPA)
    cpu = choose_backend(torch.device("cpu"))
    assert for_pool(cpu, 16) is cpu


def test_the_interpreter_ran_here():
    """On a CPU these tests ran Triton's interpreter (tests/conftest.py turns it on), not a skip or a fallback."""
    if DEVICE == "cpu":
        assert os.environ.get("TRITON_INTERPRET") == "1"
        from symphony_core.model.triton_attention import _kernel, interpreting

        assert interpreting() and type(_kernel(True)).__name__ == "InterpretedFunction"


def _compile_for_hopper(dtype: str, g: int, d: int, block_q: int, block_m: int, block_n: int, warps: int):
    """The kernel compiled ahead of time for an sm_90a GPU (Triton's own ptxas; no GPU needed)."""
    import inspect

    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    from symphony_core.model.triton_attention import _kernel_source

    names = list(inspect.signature(_kernel_source).parameters)
    sig = dict.fromkeys(["q_ptr", "k_ptr", "v_ptr", "o_ptr"], "*" + dtype)
    sig |= {"table_ptr": "*i32", "seq_lens_ptr": "*i32", "q_lens_ptr": "*i32", "q_rows_ptr": "*i64"}
    sig |= {"prog_seq_ptr": "*i32", "prog_q0_ptr": "*i32", "scale": "fp32"}
    sig |= dict.fromkeys(names[names.index("window") : names.index("G")], "i32")
    dot = {"bf16": tl.bfloat16, "fp16": tl.float16, "fp32": tl.float32}[dtype]
    consts = {"G": g, "HEAD_DIM": d, "BLOCK_D": max(16, 1 << (d - 1).bit_length()), "BLOCK_Q": block_q}
    consts |= {"BLOCK_M": block_m, "BLOCK_N": block_n, "DOT_DTYPE": dot, "IEEE": dtype == "fp32"}
    sig |= dict.fromkeys(consts, "constexpr")
    src = ASTSource(JITFunction(_kernel_source), sig, constexprs={(names.index(k),): v for k, v in consts.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})


HOPPER_SHAPES = [
    ("bf16", 4, 64, 1, 16, 64, 4),  # a decode, Llama 3.2 1B's heads
    ("bf16", 8, 128, 16, 128, 32, 8),  # a chunk, Llama 3 8B's heads
    ("fp16", 7, 96, 16, 128, 32, 8),  # Phi-3's head size, 7 query heads a KV head
    ("fp32", 4, 64, 1, 16, 64, 4),
]

# Compiled in a process of their own: Triton (3.9) reads TRITON_INTERPRET as it imports and then generates even
# a real compile's code with the interpreter's ops, and one failed compile spoils the next in that process.
# An empty cache makes it a compile, not a hit left by an earlier run.
COMPILE_ALL = """
import json, sys
sys.path.insert(0, sys.argv[1])
from test_triton_attention import HOPPER_SHAPES, _compile_for_hopper
out = []
for shape in HOPPER_SHAPES:
    try:
        k = _compile_for_hopper(*shape)
    except ImportError as e:  # a Triton without this ahead-of-time API
        out.append({"skip": str(e)})
        continue
    out.append({"cubin": len(k.asm["cubin"]), "ptx": k.asm["ptx"]})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def hopper_kernels(tmp_path_factory) -> list[dict]:
    env = os.environ | {"TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path_factory.mktemp("triton_cache"))}
    proc = subprocess.run(
        [sys.executable, "-c", COMPILE_ALL, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("i", range(len(HOPPER_SHAPES)), ids=[str(s) for s in HOPPER_SHAPES])
def test_compiles_for_hopper_without_a_gpu(hopper_kernels, i):
    """What the interpreter cannot show: the kernel goes through Triton's GPU compiler to an sm_90a cubin
    (the interpreter runs Python, so a type Triton's compiler would refuse passes there)."""
    kernel = hopper_kernels[i]
    if "skip" in kernel:
        pytest.skip(f"Triton's ahead-of-time compile API differs here: {kernel['skip']}")
    assert kernel["cubin"] > 0 and ".entry _kernel_source" in kernel["ptx"]
    assert ("mma" in kernel["ptx"]) == (HOPPER_SHAPES[i][0] != "fp32")  # half-precision tiles on the tensor cores

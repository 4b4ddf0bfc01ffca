"""The CUDA-graph decode runner's bookkeeping. On the CPU the graph capture is replaced by an eager rerun
(`eager_capture`), everything else is the runner a CUDA engine uses, over the Triton kernel (run by Triton's
interpreter there, tests/conftest.py); on a GPU (`make gpu-check`) the same tests capture real CUDA graphs.
What is checked: which batches replay and which run eagerly, the padding to the captured sizes, one capture
per size and static buffers reused across steps, logits copied out of the shared buffer, and that a
replayed step computes and writes what the eager forward does (fp32 engines: the tokens of a CPU engine)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from symphony_core.model.cuda_graphs import DecodeGraphs, cuda_capture, eager_capture, graph_sizes  # noqa: E402
from symphony_core.model.forward_batch import ForwardBatch, SeqInput  # noqa: E402
from symphony_core.model.triton_backend import TritonPaged  # noqa: E402
from tests.lips_for_tests import greedy  # noqa: E402
from tests.test_device_paths import _prompt, tiny_model  # noqa: E402, F401  (the fixture: a tiny random Llama)

PAGE = 16
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_graph_sizes_and_padding():
    assert graph_sizes(256) == [1, 2, 4, 8] + list(range(16, 257, 16))
    assert graph_sizes(20) == [1, 2, 4, 8, 16, 20]
    assert graph_sizes(3) == [1, 2, 3]


@pytest.fixture(scope="module")
def engine(tiny_model):  # noqa: F811
    """An fp32 engine on the tiny Llama whose attention is the Triton kernel and whose decodes replay graphs
    (on the CPU, graphs rerun eagerly); up to 8 rows, with the captures counted."""
    from symphony_core import Engine

    eng = Engine(tiny_model, device=DEVICE, dtype=torch.float32, num_pages=64, page_size=PAGE, prefix_cache=False)
    eng.model.attention = TritonPaged(PAGE)
    captures: list[int] = []

    def counting_capture(step, pool):
        captures.append(len(captures))
        return (cuda_capture if DEVICE == "cuda" else eager_capture)(step, pool)

    graphs = DecodeGraphs(eng.model, eng.pool.k, eng.pool.v, PAGE, max_batch=8, capture=counting_capture)
    graphs.captures = captures  # type: ignore[attr-defined]
    eng.executor.decode_graphs = graphs
    yield eng
    eng.shutdown()


def _decodes(eng, n: int, seed: int) -> tuple[ForwardBatch, list]:
    """`n` files with prompts of different lengths written, and a batch of one decode for each."""
    kvs, seqs = [], []
    for i in range(n):
        kv = eng.kv_create()
        eng.pred(kv, _prompt(3 + 11 * i + seed, seed + i))  # eager: a prefill
        f = kv.file
        slot = eng.kvfs.reserve(kv, [5], [len(f.tokens)], frozenset(), 0).slots
        seqs.append(SeqInput([5], [f.positions[-1]], slot, eng.kvfs.context_slots(f), [0]))
        kvs.append(kv)
    return ForwardBatch.build(seqs, DEVICE, None, False), kvs


def test_a_replayed_step_equals_the_eager_forward(engine):
    """3 decodes pad to 4 rows: logits and the whole pool afterwards equal the eager forward's (the padding
    rows mirror the last row, so they write nothing anywhere else); the logits are a copy, not the buffer."""
    graphs = engine.executor.decode_graphs
    fb, kvs = _decodes(engine, 3, seed=1)
    assert graphs.takes(fb) and graphs.padded(3) == 4
    k0, v0 = engine.pool.k.clone(), engine.pool.v.clone()
    want = engine.model.forward(fb, engine.pool.k, engine.pool.v)
    k_eager, v_eager = engine.pool.k.clone(), engine.pool.v.clone()
    engine.pool.k.copy_(k0)
    engine.pool.v.copy_(v0)
    replays = graphs.replays
    got = graphs.forward(fb, engine.pool.k, engine.pool.v)
    assert graphs.replays == replays + 1 and 4 in graphs.graphs
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(engine.pool.k, k_eager, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(engine.pool.v, v_eager, rtol=1e-5, atol=1e-5)
    assert got.data_ptr() != graphs.logits.data_ptr()
    # the padding row (row 3) mirrored row 2
    assert graphs.tokens[3] == graphs.tokens[2] and graphs.write_slots[3] == graphs.write_slots[2]
    for kv in kvs:
        engine.kv_close(kv)


@pytest.mark.slow
def test_one_capture_per_size_and_the_buffers_are_reused(engine):
    graphs = engine.executor.decode_graphs
    ptrs = [t.data_ptr() for t in (graphs.tokens, graphs.table, graphs.seq_lens, graphs.logits)]
    fb3, kvs3 = _decodes(engine, 3, seed=5)
    fb4, kvs4 = _decodes(engine, 4, seed=7)
    captured = len(graphs.captures)
    first = graphs.forward(fb3, engine.pool.k, engine.pool.v)
    kept = first.clone()
    graphs.forward(fb4, engine.pool.k, engine.pool.v)  # the same padded size: no new capture
    assert len(graphs.captures) == captured and set(graphs.graphs) >= {4}
    torch.testing.assert_close(first, kept, rtol=0, atol=0)  # the earlier step's logits were not overwritten
    assert [t.data_ptr() for t in (graphs.tokens, graphs.table, graphs.seq_lens, graphs.logits)] == ptrs
    fb1, kvs1 = _decodes(engine, 1, seed=9)
    graphs.forward(fb1, engine.pool.k, engine.pool.v)
    assert len(graphs.captures) == captured + 1 and 1 in graphs.graphs
    for kv in kvs3 + kvs4 + kvs1:
        engine.kv_close(kv)


def test_capture_all_at_start(engine):
    """What an engine does at start (no file open): every size captured, largest first, on dummy inputs; a
    real step then replays without another capture and matches the eager forward."""
    sizes = []

    def recording(step, pool):
        r = (cuda_capture if DEVICE == "cuda" else eager_capture)(step, pool)
        sizes.append(r[0].output.shape[0])
        return r

    graphs = DecodeGraphs(engine.model, engine.pool.k, engine.pool.v, PAGE, max_batch=4, capture=recording)
    graphs.capture_all()
    assert sizes == [4, 2, 1] and set(graphs.graphs) == {1, 2, 4}
    fb, kvs = _decodes(engine, 2, seed=11)
    k0, v0 = engine.pool.k.clone(), engine.pool.v.clone()
    want = engine.model.forward(fb, engine.pool.k, engine.pool.v)
    engine.pool.k.copy_(k0)
    engine.pool.v.copy_(v0)
    torch.testing.assert_close(graphs.forward(fb, engine.pool.k, engine.pool.v), want, rtol=1e-4, atol=1e-4)
    assert len(sizes) == 3
    for kv in kvs:
        engine.kv_close(kv)


def test_prefills_and_mixed_batches_run_eagerly(engine):
    graphs = engine.executor.decode_graphs
    kv = engine.kv_create()
    engine.pred(kv, _prompt(40, 3))
    f = kv.file
    prompt = SeqInput(_prompt(40, 4), list(range(40)), list(range(40)), list(range(40)), [39])
    decode = SeqInput([5], [f.positions[-1] + 1], [len(f.tokens)], engine.kvfs.context_slots(f) + [0], [0])
    assert not graphs.takes(ForwardBatch.build([prompt], DEVICE, None, False))
    assert not graphs.takes(ForwardBatch.build([decode, prompt], DEVICE, None, False))
    assert graphs.takes(ForwardBatch.build([decode], DEVICE, None, False))
    no_output = SeqInput([5], decode.positions, decode.write_slots, decode.context_slots, [])
    assert not graphs.takes(ForwardBatch.build([decode, no_output], DEVICE, None, False))
    too_many = ForwardBatch.build([decode] * 9, DEVICE, None, False)  # more than the largest size (8)
    assert not graphs.takes(too_many)
    engine.kv_close(kv)


def test_programs_decode_through_the_graphs(engine, tiny_model):  # noqa: F811
    """Concurrent programs on the graph engine give the greedy tokens of a plain CPU engine; their decode
    steps replayed graphs, their prompts ran eagerly, and every page came back."""
    from symphony_core import Engine

    ref = Engine(tiny_model, device="cpu", num_pages=64)
    try:
        prompts = [_prompt(n, 20 + n) for n in (4, 19, 33)]
        want = [greedy(ref, p, 6) for p in prompts]
    finally:
        ref.shutdown()
    graphs = engine.executor.decode_graphs
    replays = graphs.replays
    procs = [engine.run(greedy, p, 6) for p in prompts]
    assert [p.result(timeout=300) for p in procs] == want
    assert graphs.replays > replays
    assert engine.kvfs.stats()["pages_used"] == 0

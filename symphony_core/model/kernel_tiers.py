"""Kernel choices that depend on the CPU, measured on this machine when a model loads and cached.

1. Up to how many rows the compiled int8 kernel runs before fp32 takes over (q8 and q4 engines).

The int8 kernel (cpu_kernels/gemv.cpp) reads a quarter of fp32's bytes and multiplies int16 pairs (one
`vpmaddwd` does 16 products where an fp32 FMA does 8). Which of the two matters depends on the CPU, so the
row count where fp32 starts to win does too. Measured with `python -m bench.kernels`, ms per model step's
matmuls, int8 compiled / fp32 (the faster of compiled and MKL):
- 2-core EPYC Zen 1 (256-bit instructions run as two halves): 8 rows 48.2 / 47.9, 16 rows 93.5 / 81.1:
  fp32 from ~8 rows.
- 2-core EPYC Zen 3: 8 rows 16.3 / 33.1, 32 rows 59.4 / 72.1, 48 rows 87.4 / 102.4, 64 rows 115.3 / 131.9,
  128 rows 226.7 / 226.7: int8 to ~100 rows.
A fixed limit is wrong on one of them by up to ~20% of a wide decode step. So a q8 or q4 engine times both
kernels on a few of its own layers at each of a few candidate row counts when it loads (~0.5 s; the
candidates are weight_formats.INT8_ROWS_TRIED) and runs int8 up to the widest count where int8 won at it
and at every count below (never fewer than the first, a count where int8 won everywhere it was measured).
The answer is cached per machine in the model's directory
(`kernel-tiers.json`, keyed by the CPU, the thread count, torch and the kernels' build), so only a
machine's first load pays for it. A measurement taken while other processes held the CPUs (>= 10% of
their time, cpu_load.py) is used by its process but not cached: on a busy machine int8 and fp32 lose time
unevenly, and a skewed limit would otherwise stay for good. The next load measures again.
`SYMPHONY_INT8_MAX_ROWS=<rows>` sets the limit instead (reproducible runs; the choice moves which batches round activations to int16, not what any kernel computes).

2. Which fp32 kernel runs one row (fp32 engines; cpu_kernels/gemv.cpp): "blocked", four weight rows at
once with software prefetch, fastest on the Zen 1 EPYC, or "streamed", one row at a time without it, 7-9%
faster on the Zen 3 one. Timed the same way on the model's layers at one row (~0.4 s), cached beside the first
answer; `SYMPHONY_F32_ONE_ROW=blocked|streamed` sets it instead. Both compute the same fp32 sums in the
same order per output, so the choice changes no result.

3. Whether a quantised engine runs its wide batches (above the int8 limit) in bf16 rather than fp32, on a CPU
that multiplies bf16 natively (AVX512-BF16, AMX: torch's oneDNN then runs bf16 matmuls 3-4x as fast as MKL's
fp32 sgemm once compute-bound). Timed the same way at `weight_formats.BF16_ROWS_TRIED` rows, cached;
`SYMPHONY_WIDE_BF16=1|0` decides instead. The int8 limit is then measured against that tier, its own entry.

4. From how many rows an fp32 matmul runs oneDNN's fp32 kernel on weights packed for it (quant.OnednnLinear)
rather than the compiled fp32 kernel or MKL's sgemm, in every engine (fp32, and the fp32 tiers of q8/q4). Where
the CPU has AVX-512 oneDNN uses it and the MKL that torch ships may not: on a 2-core Zen 5 EPYC, ms per model
step's matmuls, compiled / MKL / oneDNN packed: 8 rows 13.9 / 25.0 / 13.2, 32 rows 34.9 / 49.6 / 22.9, 256 rows
254 / 273 / 122. Timed at each of `weight_formats.ONEDNN_ROWS_TRIED` against the other fp32 tiers; it runs from
the narrowest count where it won there and at every wider one, nowhere if it lost at the widest. Cached;
`SYMPHONY_ONEDNN_FROM_ROWS=<rows>|off` decides instead. The products are fp32 either way; only their order
differs. The packed weights are a second copy of the fp32 projections (and LM head).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from .cpu_load import others_share

ENV = "SYMPHONY_INT8_MAX_ROWS"
F32_ENV = "SYMPHONY_F32_ONE_ROW"
BF16_ENV = "SYMPHONY_WIDE_BF16"
ONEDNN_ENV = "SYMPHONY_ONEDNN_FROM_ROWS"
F32_ONE_ROW = ("blocked", "streamed")  # the first wins a tie
ONE_ROW_REPEATS = 7
CACHE_FILE = "kernel-tiers.json"
CONTENDED = 0.10  # share of all CPUs' time other processes used during a measurement: then it is not cached
SAMPLE_LAYERS = 6  # ~84 MB of fp32 weights: more than the L3 of the machines measured, as a whole model is
REPEATS = 3

Linear = Callable[[torch.Tensor], torch.Tensor]

# Per process, by (cache directory, key): where there is no cache directory, or the measurement was not cached.
_measured: dict[tuple[str, str], object] = {}


def _cpu_name() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    fields: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return " ".join(fields.get(k, "?") for k in ("model name", "cpu family", "model", "stepping"))


def machine_key(kernels_digest: str) -> str:
    return f"{_cpu_name()} | {torch.get_num_threads()} threads | torch {torch.__version__} | kernels {kernels_digest}"


def _timed(linears: Sequence[Linear], xs: dict[int, torch.Tensor]) -> float:
    t0 = time.perf_counter()
    for lin in linears:
        lin(xs[lin.shape[1]])  # type: ignore[attr-defined]
    return time.perf_counter() - t0


def _faster(pairs: Sequence[tuple[Linear, Linear]], rows: int) -> bool:
    """Whether the first linear of each pair ran all of them faster than the second at `rows` rows. The two
    alternate within each repeat; medians. pairs: each linear with `.shape` (out, in)."""
    firsts, seconds = [p[0] for p in pairs], [p[1] for p in pairs]
    xs = {lin.shape[1]: torch.randn(rows, lin.shape[1]) for lin in firsts}  # type: ignore[attr-defined]
    _timed(firsts, xs), _timed(seconds, xs)  # warm-up
    times: list[list[float]] = [[], []]
    for r in range(REPEATS):
        for k in (0, 1) if r % 2 == 0 else (1, 0):
            times[k].append(_timed(firsts if k == 0 else seconds, xs))
    return statistics.median(times[0]) < statistics.median(times[1])


def measure(pairs: Sequence[tuple[Linear, Linear]], candidates: Sequence[int]) -> int:
    """The widest of the (increasing) candidate row counts at which the int8 linears ran faster than their
    wider tier (fp32, or bf16 where that runs wide batches), as they did at every candidate below it; the first
    candidate, the floor, if int8 lost there. pairs: (int8, wide tier) per weight."""
    chosen = candidates[0]
    for rows in candidates:
        if not _faster(pairs, rows):
            break
        chosen = max(chosen, rows)
    return chosen


def measure_from(pairs: Sequence[tuple[Linear, Linear]], candidates: Sequence[int]) -> int:
    """The narrowest of the (increasing) candidate row counts from which the first linears of `pairs` ran faster
    than the second at it and at every wider candidate; 0 where they lost at the widest. Widest first."""
    chosen = 0
    for rows in reversed(candidates):
        if not _faster(pairs, rows):
            break
        chosen = rows
    return chosen


def measure_one_row(linears: Sequence[Linear], use: Callable[[str], None]) -> str:
    """The fp32 one-row kernel (of F32_ONE_ROW) that ran `linears` fastest at one row; `use(name)` selects
    a kernel. The kernels alternate within each repeat; medians."""
    xs = {lin.shape[1]: torch.randn(1, lin.shape[1]) for lin in linears}  # type: ignore[attr-defined]
    times: dict[str, list[float]] = {k: [] for k in F32_ONE_ROW}
    for k in F32_ONE_ROW:  # warm-up
        use(k)
        _timed(linears, xs)
    for r in range(ONE_ROW_REPEATS):
        for k in F32_ONE_ROW if r % 2 == 0 else F32_ONE_ROW[::-1]:
            use(k)
            times[k].append(_timed(linears, xs))
    return min(F32_ONE_ROW, key=lambda k: statistics.median(times[k]))


def int8_max_rows(
    pairs: Sequence[tuple[Linear, Linear]],
    candidates: Sequence[int],
    kernels_digest: str,
    cache_dir: Path | None,
    measure_fn=measure,
    against: str = "fp32",
) -> int:
    """The int8 tier's row limit: `ENV` if set, else this machine's cached measurement, else
    `measure_fn(pairs, candidates)` (then cached in `cache_dir`, or for this process where there is none).
    `against`: the tier above int8 that `pairs` holds ("fp32" or "bf16"), part of the cache's key."""
    override = _rows_override(ENV)
    if override is not None:
        return override
    return _cached(
        "int8_max_rows",
        f"{machine_key(kernels_digest)} | rows {','.join(map(str, candidates))}{_against(against)}",
        cache_dir,
        lambda: measure_fn(pairs, candidates),
        lambda v: isinstance(v, int) and not isinstance(v, bool),
        lambda rows: f"the int8 kernel runs up to {rows} rows on this machine",
    )


def wide_bf16(
    pairs: Sequence[tuple[Linear, Linear]],
    rows: int,
    kernels_digest: str,
    cache_dir: Path | None,
    measure_fn=_faster,
    against: str = "fp32",
) -> bool:
    """Whether a quantised engine runs its wide batches in bf16: `BF16_ENV` ("1"/"0") if set, else this
    machine's cached measurement, else whether the bf16 linears of `pairs` (bf16, fp32) beat fp32 at `rows`
    rows (cached as int8_max_rows's is). `against`: which fp32 tiers `pairs` holds, part of the cache's key."""
    override = os.environ.get(BF16_ENV, "").strip()
    if override:
        if override not in ("0", "1"):
            raise ValueError(f"{BF16_ENV}={override!r}: give 1 (bf16) or 0 (fp32)")
        return override == "1"
    return _cached(
        "wide_bf16",
        f"{machine_key(kernels_digest)} | bf16 at {rows} rows{_against(against)}",
        cache_dir,
        lambda: measure_fn(pairs, rows),
        lambda v: isinstance(v, bool),
        lambda bf16: f"quantised engines run wide batches in {'bf16' if bf16 else 'fp32'} on this machine",
    )


def onednn_from_rows(
    pairs: Callable[[], Sequence[tuple[Linear, Linear]]],
    candidates: Sequence[int],
    kernels_digest: str,
    cache_dir: Path | None,
    measure_fn=measure_from,
) -> int:
    """The row count from which fp32 matmuls run oneDNN's kernel, 0 for none: `ONEDNN_ENV` (rows, or "off") if
    set, else this machine's cached measurement, else `measure_fn(pairs(), candidates)` (cached as
    int8_max_rows's is). `pairs()` makes the sample, (oneDNN, the other fp32 tiers) per weight, only where it is
    measured: packing it for oneDNN is a copy of six layers' weights."""
    override = _rows_override(ONEDNN_ENV, off=0)
    if override is not None:
        return override
    return _cached(
        "onednn_from_rows",
        f"{machine_key(kernels_digest)} | onednn at rows {','.join(map(str, candidates))}",
        cache_dir,
        lambda: measure_fn(pairs(), candidates),
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        lambda rows: (
            f"fp32 matmuls run oneDNN's kernel from {rows} rows on this machine"
            if rows
            else "fp32 matmuls do not run oneDNN's kernel on this machine"
        ),
    )


def f32_one_row(
    linears: Sequence[Linear],
    use: Callable[[str], None],
    kernels_digest: str,
    cache_dir: Path | None,
    measure_fn=measure_one_row,
) -> str:
    """The fp32 one-row kernel's name: `F32_ENV` if set, else this machine's cached measurement, else
    `measure_fn(linears, use)` (cached as int8_max_rows's is). The caller selects it with `use`."""
    override = os.environ.get(F32_ENV, "").strip().lower()
    if override:
        if override not in F32_ONE_ROW:
            raise ValueError(f"{F32_ENV}={override!r}: choose one of {', '.join(F32_ONE_ROW)}")
        return override
    return _cached(
        "f32_one_row",
        f"{machine_key(kernels_digest)} | f32 one row",
        cache_dir,
        lambda: measure_fn(linears, use),
        lambda v: v in F32_ONE_ROW,
        lambda name: f"the {name} fp32 kernel runs one row on this machine",
    )


def _rows_override(env: str, off: int | None = None) -> int | None:
    """The row count the variable `env` sets, None where unset; "off" gives `off` where that is allowed."""
    override = os.environ.get(env, "").strip()
    if not override:
        return None
    if off is not None and override.lower() == "off":
        return off
    try:
        rows = int(override)
    except ValueError:
        rows = 0
    if rows < 1:
        raise ValueError(
            f"{env}={override!r}: give a row count of at least 1" + (", or off" if off is not None else "")
        )
    return rows


def _against(against: str) -> str:
    """The cache key's note of the tier a measurement was timed against (none for fp32's own, as keys always had)."""
    return "" if against == "fp32" else f" | against {against}"


def _cached(name: str, key: str, cache_dir: Path | None, measure_fn, valid, says):
    """`name`'s value for `key` from the cache in `cache_dir` (or this process's memo where there is
    none, or where its measurement ran beside other load), else measured by `measure_fn()` and stored there."""
    path = cache_dir / CACHE_FILE if cache_dir is not None else None
    cached = _read(path)
    entry = cached.get(key)
    if isinstance(entry, dict) and valid(entry.get(name)):
        return entry[name]
    memo = (str(path), key)
    if memo in _measured:
        return _measured[memo]
    t0 = time.perf_counter()
    value, others = others_share(measure_fn)
    took = time.perf_counter() - t0
    contended = others is not None and others >= CONTENDED
    busy = (
        f" while other processes used {others:.0%} of the CPUs: used by this process, not cached; the next "
        "load measures again"
        if contended
        else ""
    )
    print(f"symphony: {says(value)} (measured in {took:.1f} s{busy})", file=sys.stderr)
    if path is None or contended:
        _measured[memo] = value
        return value
    cached[key] = {name: value, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    if others is not None:
        cached[key]["others_cpu"] = round(others, 3)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        tmp.write_text(json.dumps(cached, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError as e:  # a read-only cache still runs: it measures again next load
        print(f"symphony: could not cache the kernel tiers: {e}", file=sys.stderr)
        tmp.unlink(missing_ok=True)
    return value


def _read(path: Path | None) -> dict:
    if path is None or not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # unreadable or half-written by a crashed process: measure again and rewrite it
    return data if isinstance(data, dict) else {}

"""kernel_tiers.py: the int8 tier's row limit, the fp32 one-row kernel, the wide tier and where oneDNN's fp32 kernel
starts are measured once per machine, cached, and can be set by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from symphony_core.model import cpu_load, kernel_tiers
from symphony_core.model.cpu_load import CpuTicks
from symphony_core.model.kernel_tiers import (
    BF16_ENV,
    CACHE_FILE,
    ENV,
    F32_ENV,
    ONEDNN_ENV,
    f32_one_row,
    int8_max_rows,
    machine_key,
    measure,
    measure_from,
    measure_one_row,
    onednn_from_rows,
    wide_bf16,
)

TRIED = (8, 16, 32, 48, 63)
ONEDNN_TRIED = (8, 16, 32, 64, 256)


class FakeClock:
    """Stands in for time.perf_counter: only the fake linears move it, so the timings are exact."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeLinear:
    def __init__(self, clock: FakeClock, cost, shape=(64, 32)) -> None:
        self.clock, self.cost, self.shape = clock, cost, shape
        self.rows_seen: list[int] = []

    def __call__(self, x):
        assert x.shape[1] == self.shape[1]
        self.rows_seen.append(x.shape[0])
        self.clock.now += self.cost(x.shape[0])


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(kernel_tiers.time, "perf_counter", c)
    return c


def test_measure_takes_the_widest_count_int8_wins_at_and_below(clock):
    int8 = FakeLinear(clock, lambda rows: 1.0 if rows <= 32 else 3.0)
    fp32 = FakeLinear(clock, lambda rows: 2.0)
    assert measure([(int8, fp32)], TRIED) == 32
    assert 48 in int8.rows_seen and 63 not in int8.rows_seen  # stops at the first loss
    # a win above a loss does not count: the tier must cover every row count below its limit
    int8 = FakeLinear(clock, lambda rows: 3.0 if rows == 16 else 1.0)
    assert measure([(int8, fp32)], TRIED) == 8
    int8 = FakeLinear(clock, lambda rows: 1.0)
    assert measure([(int8, fp32)], TRIED) == 63


def test_measure_never_goes_below_the_floor(clock):
    int8 = FakeLinear(clock, lambda rows: 5.0)
    fp32 = FakeLinear(clock, lambda rows: 1.0)
    assert measure([(int8, fp32)], TRIED) == 8


def test_measure_from_takes_the_narrowest_count_onednn_wins_at_and_above(clock):
    others = FakeLinear(clock, lambda rows: 2.0)
    onednn = FakeLinear(clock, lambda rows: 1.0 if rows >= 32 else 3.0)
    assert measure_from([(onednn, others)], ONEDNN_TRIED) == 32
    assert 16 in onednn.rows_seen and 8 not in onednn.rows_seen  # widest first, stops at the first loss
    # a win below a loss does not count: the tier covers every row count above where it starts
    onednn = FakeLinear(clock, lambda rows: 3.0 if rows == 64 else 1.0)
    assert measure_from([(onednn, others)], ONEDNN_TRIED) == 256
    onednn = FakeLinear(clock, lambda rows: 1.0)
    assert measure_from([(onednn, others)], ONEDNN_TRIED) == 8
    # lost at the widest: nowhere
    onednn = FakeLinear(clock, lambda rows: 1.0 if rows < 256 else 3.0)
    assert measure_from([(onednn, others)], ONEDNN_TRIED) == 0


def test_where_onednn_starts_is_cached_and_the_variable_wins(tmp_path, monkeypatch):
    monkeypatch.delenv(ONEDNN_ENV, raising=False)

    def must_not_measure(*args):
        raise AssertionError("measured again though the answer is cached or set")

    assert onednn_from_rows(list, ONEDNN_TRIED, "d", tmp_path, lambda pairs, tried: 0) == 0  # "never" is an answer
    assert onednn_from_rows(list, ONEDNN_TRIED, "d", tmp_path, must_not_measure) == 0
    assert onednn_from_rows(list, ONEDNN_TRIED, "e", tmp_path, lambda pairs, tried: 16) == 16
    assert onednn_from_rows(list, ONEDNN_TRIED, "e", tmp_path, must_not_measure) == 16
    entries = json.loads((tmp_path / CACHE_FILE).read_text())
    assert sorted(v["onednn_from_rows"] for v in entries.values()) == [0, 16]
    monkeypatch.setenv(ONEDNN_ENV, "Off")
    assert onednn_from_rows(list, ONEDNN_TRIED, "e", tmp_path, must_not_measure) == 0
    monkeypatch.setenv(ONEDNN_ENV, "24")
    assert onednn_from_rows(list, ONEDNN_TRIED, "e", tmp_path, must_not_measure) == 24
    for bad in ("0", "wide"):
        monkeypatch.setenv(ONEDNN_ENV, bad)
        with pytest.raises(ValueError, match=f"{ONEDNN_ENV}='{bad}'"):
            onednn_from_rows(list, ONEDNN_TRIED, "e", tmp_path, must_not_measure)


def test_the_answer_is_cached_per_machine_and_a_bad_cache_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    calls = []

    def fake_measure(pairs, tried):
        calls.append(pairs)
        return 48

    assert int8_max_rows([], TRIED, "digest-a", tmp_path, fake_measure) == 48
    saved = json.loads((tmp_path / CACHE_FILE).read_text())
    (entry,) = saved.values()
    assert entry["int8_max_rows"] == 48 and machine_key("digest-a") in next(iter(saved))

    def must_not_measure(pairs, tried):
        raise AssertionError("measured again though the answer is cached")

    assert int8_max_rows([], TRIED, "digest-a", tmp_path, must_not_measure) == 48
    # another build of the kernels is another key: measured, and the first key is kept
    assert int8_max_rows([], TRIED, "digest-b", tmp_path, fake_measure) == 48
    assert len(calls) == 2 and len(json.loads((tmp_path / CACHE_FILE).read_text())) == 2
    (tmp_path / CACHE_FILE).write_text('{"half-writ')
    assert int8_max_rows([], TRIED, "digest-a", tmp_path, fake_measure) == 48 and len(calls) == 3
    assert any(machine_key("digest-a") in k for k in json.loads((tmp_path / CACHE_FILE).read_text()))


def test_without_a_cache_directory_a_process_measures_once(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(kernel_tiers, "_measured", {})
    calls = []

    def fake_measure(pairs, tried):
        calls.append(1)
        return 16

    assert int8_max_rows([], TRIED, "digest-c", None, fake_measure) == 16
    assert int8_max_rows([], TRIED, "digest-c", None, fake_measure) == 16
    assert calls == [1]


def test_a_measurement_beside_other_load_is_used_but_not_cached(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(kernel_tiers, "_measured", {})
    shares = iter([0.4, 0.3, 0.02])
    monkeypatch.setattr(kernel_tiers, "others_share", lambda during: (during(), next(shares)))
    calls = []

    def fake_measure(pairs, tried):
        calls.append(1)
        return 16 if len(calls) < 3 else 63

    assert int8_max_rows([], TRIED, "d", tmp_path, fake_measure) == 16
    assert not (tmp_path / CACHE_FILE).exists()
    assert "other processes used 40% of the CPUs" in capsys.readouterr().err
    assert int8_max_rows([], TRIED, "d", tmp_path, fake_measure) == 16 and calls == [1]  # once a process
    monkeypatch.setattr(kernel_tiers, "_measured", {})  # the next process measures again: busy again
    assert int8_max_rows([], TRIED, "d", tmp_path, fake_measure) == 16 and len(calls) == 2
    monkeypatch.setattr(kernel_tiers, "_measured", {})  # and again, on a quiet machine: cached from then on
    assert int8_max_rows([], TRIED, "d", tmp_path, fake_measure) == 63
    (entry,) = json.loads((tmp_path / CACHE_FILE).read_text()).values()
    assert entry["int8_max_rows"] == 63 and entry["others_cpu"] == 0.02
    monkeypatch.setattr(kernel_tiers, "_measured", {})
    assert int8_max_rows([], TRIED, "d", tmp_path, fake_measure) == 63 and len(calls) == 3


def test_others_share_counts_other_processes_cpu_not_our_own(monkeypatch):
    ticks = iter([CpuTicks(1000, 300, 50), CpuTicks(1200, 460, 150)])
    monkeypatch.setattr(cpu_load, "cpu_ticks", lambda: next(ticks))
    assert cpu_load.others_share(lambda: "x") == ("x", pytest.approx((160 - 100) / 200))
    ticks = iter([CpuTicks(1000, 300, 50), CpuTicks(1004, 304, 52)])  # too few ticks passed to tell
    monkeypatch.setattr(cpu_load, "cpu_ticks", lambda: next(ticks))
    assert cpu_load.others_share(lambda: 1) == (1, None)


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs /proc")
def test_others_share_sees_a_process_spinning_beside_the_measurement():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # started
        _, share = cpu_load.others_share(lambda: time.sleep(1.0))
    finally:
        spinner.kill()
        spinner.wait()
    assert share is not None and share >= 0.6 / (os.cpu_count() or 1)  # one busy core of them all
    # Our own work, on every torch thread, is not counted (counted, it would be ~100%).
    a = torch.randn(512, 512)
    _, share = cpu_load.others_share(lambda: [a @ a for _ in range(200)])
    assert share is None or share < 0.8


def test_the_variable_sets_the_limit_and_bad_values_are_named(tmp_path, monkeypatch):
    def must_not_measure(pairs, tried):
        raise AssertionError("measured though the variable is set")

    monkeypatch.setenv(ENV, "24")
    assert int8_max_rows([], TRIED, "d", tmp_path, must_not_measure) == 24
    assert not (tmp_path / CACHE_FILE).exists()
    for bad in ("lots", "0", "-3"):
        monkeypatch.setenv(ENV, bad)
        with pytest.raises(ValueError, match=f"{ENV}='{bad}'"):
            int8_max_rows([], TRIED, "d", tmp_path, must_not_measure)


def test_the_one_row_kernel_that_ran_faster_is_chosen_and_a_tie_keeps_blocked(clock):
    costs = {"blocked": 2.0, "streamed": 1.0}
    current = []
    lin = FakeLinear(clock, lambda rows: costs[current[-1]])
    assert measure_one_row([lin], current.append) == "streamed"
    assert set(lin.rows_seen) == {1} and current.count("blocked") == current.count("streamed") > 1
    costs["streamed"] = 3.0
    assert measure_one_row([lin], current.append) == "blocked"
    costs["streamed"] = 2.0
    assert measure_one_row([lin], current.append) == "blocked"


def test_the_one_row_kernel_is_cached_beside_the_int8_limit_and_the_variable_wins(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv(F32_ENV, raising=False)

    def must_not_measure(*args):
        raise AssertionError("measured again though the answer is cached or set")

    assert int8_max_rows([], TRIED, "d", tmp_path, lambda pairs, tried: 32) == 32
    assert f32_one_row([], print, "d", tmp_path, lambda lins, use: "streamed") == "streamed"
    assert f32_one_row([], print, "d", tmp_path, must_not_measure) == "streamed"
    assert int8_max_rows([], TRIED, "d", tmp_path, must_not_measure) == 32
    entries = json.loads((tmp_path / CACHE_FILE).read_text())
    assert sorted(str(v.get("f32_one_row", v.get("int8_max_rows"))) for v in entries.values()) == ["32", "streamed"]
    monkeypatch.setenv(F32_ENV, "Blocked")
    assert f32_one_row([], print, "d", tmp_path, must_not_measure) == "blocked"
    monkeypatch.setenv(F32_ENV, "fastest")
    with pytest.raises(ValueError, match=f"{F32_ENV}='fastest'"):
        f32_one_row([], print, "d", tmp_path, must_not_measure)


def test_the_wide_tier_choice_is_cached_apart_from_the_int8_limit_and_the_variable_wins(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv(BF16_ENV, raising=False)

    def must_not_measure(*args):
        raise AssertionError("measured again though the answer is cached or set")

    assert wide_bf16([], 64, "d", tmp_path, lambda pairs, rows: True) is True
    assert wide_bf16([], 64, "d", tmp_path, must_not_measure) is True
    # measured against other fp32 tiers (oneDNN's from some rows): another entry
    assert wide_bf16([], 64, "d", tmp_path, lambda pairs, rows: False, against="fp32, oneDNN from 16 rows") is False
    assert wide_bf16([], 64, "d", tmp_path, must_not_measure, against="fp32, oneDNN from 16 rows") is False
    # the int8 limit measured against bf16 is another entry than the one against fp32
    assert int8_max_rows([], TRIED, "d", tmp_path, lambda pairs, tried: 8, against="bf16") == 8
    assert int8_max_rows([], TRIED, "d", tmp_path, lambda pairs, tried: 48) == 48
    assert int8_max_rows([], TRIED, "d", tmp_path, must_not_measure, against="bf16") == 8
    entries = json.loads((tmp_path / CACHE_FILE).read_text())
    assert sorted(str(v.get("wide_bf16", v.get("int8_max_rows"))) for v in entries.values()) == [
        "48",
        "8",
        "False",
        "True",
    ]
    monkeypatch.setenv(BF16_ENV, "0")
    assert wide_bf16([], 64, "d", tmp_path, must_not_measure) is False
    monkeypatch.setenv(BF16_ENV, "yes")
    with pytest.raises(ValueError, match=f"{BF16_ENV}='yes'"):
        wide_bf16([], 64, "d", tmp_path, must_not_measure)


@pytest.mark.slow  # ~10 s: loads a q8 engine
def test_a_q8_engine_runs_int8_up_to_the_limit_then_bf16_where_asked(monkeypatch):
    from symphony_core import Engine
    from symphony_core.model.quant import Bf16Linear, Int8Linear
    from symphony_core.model.weight_formats import WIDE

    monkeypatch.setenv(ENV, "16")
    monkeypatch.setenv(BF16_ENV, "1")
    eng = Engine(num_pages=16, weights="q8")
    try:
        for lin in (eng.model.layers[0].wqkv, eng.model.layers[-1].w_down, eng.model.lm_head):
            assert [rows for rows, _ in lin.tiers] == [16, WIDE]
            assert isinstance(lin.pick(16), Int8Linear) and isinstance(lin.pick(17), Bf16Linear)
    finally:
        eng.shutdown()


@pytest.mark.slow  # ~10 s: loads a q8 engine
def test_a_q8_engine_runs_int8_up_to_the_limit_then_fp32(monkeypatch):
    from symphony_core import Engine
    from symphony_core.model.cpu_kernels import compiled
    from symphony_core.model.quant import CompiledDenseLinear, DenseLinear, Int8Linear

    if compiled() is None:
        pytest.skip("the compiled kernels are not built here: torch's kernels keep their fixed limits")
    monkeypatch.setenv(ENV, "16")
    monkeypatch.setenv(BF16_ENV, "0")  # fp32 above int8, as where the CPU has no native bf16
    monkeypatch.setenv(ONEDNN_ENV, "off")  # the compiled fp32 kernel, then MKL, as where oneDNN loses
    eng = Engine(num_pages=16, weights="q8")
    try:
        for lin in (eng.model.layers[0].wqkv, eng.model.layers[-1].w_down, eng.model.lm_head):
            assert [rows for rows, _ in lin.tiers][:2] == [16, 63]
            assert isinstance(lin.pick(16), Int8Linear) and isinstance(lin.pick(17), CompiledDenseLinear)
            assert isinstance(lin.pick(64), DenseLinear)
    finally:
        eng.shutdown()

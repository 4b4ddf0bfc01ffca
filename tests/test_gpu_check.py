"""`make gpu-check` (bench/gpu_check) where there is no GPU: its arguments, its refusal without a CUDA
device, its correctness sections run end to end on the CPU in fp32 (the same code the GPU run uses, in
bf16 there), and the speed table it prints. The GPU figures themselves come from a GPU machine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from bench.gpu_check.__main__ import NO_CUDA, SECTIONS, main, parse_args
from bench.gpu_check.families import FAMILIES
from bench.gpu_check.speed import hf_decode, hf_prefill, markdown, symphony_decode, symphony_prefill


def test_arguments():
    a = parse_args([])
    assert a.families == list(FAMILIES) and a.skip == [] and not a.quick
    assert a.decode_batches == [1, 8, 64, 256] and a.steps == 64
    q = parse_args(["--quick", "--out", "/tmp/x", "--families", "llama", "--skip", "speed,tests"])
    assert q.quick and str(q.out) == "/tmp/x" and q.families == ["llama"] and q.skip == ["speed", "tests"]
    assert q.decode_batches == [1, 64] and q.steps < a.steps
    assert set(SECTIONS) == {"parity", "kvfs", "programs", "speed", "tests"}


@pytest.mark.parametrize("argv", [["--families", "gpt2"], ["--skip", "everything"], ["--families", ""]])
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "choose from" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message a machine without CUDA gets")
def test_without_cuda_it_says_so_and_exits_3(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "bench.gpu_check", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 3 and NO_CUDA in r.stderr
    assert not list(tmp_path.iterdir())  # nothing written: no half report


@pytest.mark.slow
def test_correctness_sections_on_the_cpu(tmp_path):
    """parity (64 greedy steps), kvfs and programs run on the CPU in fp32 and pass; speed and tests are left out
    there; the JSON, text and markdown reports are written."""
    out = tmp_path / "out"
    assert main(["--device", "cpu", "--out", str(out)]) == 0
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["environment"]["card"] == "none (CPU run)"
    from bench.gpu_check.families import FAMILIES

    for fam in FAMILIES:  # every family, each with its quirks on
        p = report[f"parity:{fam}"]
        assert p["ok"] and p["greedy_agree"] == 64 and p["prompt_logits_rel_err"] < 1e-4, fam
    k = report["kvfs"]
    assert k["ok"] and k["copy_on_write"] and k["shared_pages_after_fork"] == 3
    g = report["programs"]
    assert g["ok"] and g["lips"] == 64 and g["prefix_example"]["second_run_found_cache"]
    assert g["debugger"]["override_applied"]
    assert "speed" not in report and "tests" not in report
    text = (out / "gpu_check.txt").read_text()
    n = len(FAMILIES) + 2
    assert f"{n} of {n} sections passed" in text
    section = (out / "gpu_check.md").read_text()  # for bench/RESULTS.md
    assert section.startswith("## On a GPU: none (CPU run)") and "| llama | float32 | " in section
    assert (
        "| 64 / 64 |" in section and "Symphony / transformers vs fp32" in section and "| programs | pass |" in section
    )


def test_speed_table():
    """The table the speed section prints: each batch's figures and its ratio to transformers' best mode,
    marked where transformers' compiled mode was not run; the probe of a decode after transformers' runs."""
    result = {
        "decode": [
            {"batch": 1, "symphony": 200.0, "hf_dynamic": 50.0, "hf_static": 80.0, "hf_static+compile": 160.0},
            {"batch": 64, "symphony": 6400.0, "hf_dynamic": 3200.0, "hf_static_error": "TypeError: x"},
        ],
        "prefill": {"symphony_1x2048": 1e5, "hf_1x2048": 5e4, "symphony_8x512": 2e5, "hf_8x512": 1e5},
        "batch1_step_ms": 5.0,
        "batch1_floor_ms": 1.0,
        "weight_bytes": 2.5e9,
        "copy_bandwidth_GBps": 2500.0,
        "batch1_fraction_of_hbm_floor": 0.2,
        "decode_after_hf_compile": "AcceleratorError: CUDA error: an illegal memory access\nSearch for ...",
    }
    lines = markdown(result)
    assert lines[2] == "| 1 | 200 | 50 | 80 | 160 | 1.25x |"
    assert lines[3] == "| 64 | 6,400 | 3,200 | error | - | 2.00x (eager transformers) |"
    assert lines[-2].endswith("AcceleratorError: CUDA error: an illegal memory access.")  # its first line only
    assert "20% of the HBM floor" in lines[-1]


@pytest.mark.slow
def test_speed_measurements_run_on_the_cpu(tmp_path):
    """The speed section's measurements on the tiny Llama on the CPU (no figures kept: the GPU's are what
    count): the engine's decode steps and prefill, and transformers' generate with a dynamic and a static
    cache (its torch.compile'd mode compiles for minutes on a CPU: the GPU run covers it)."""
    from bench.gpu_check.families import FAMILIES, make_model
    from symphony_core import Engine

    hf = make_model(FAMILIES["llama"](), tmp_path / "m")
    eng = Engine(str(tmp_path / "m"), device="cpu", num_pages=128)
    try:
        assert symphony_decode(eng, 3, 4) > 0 and symphony_prefill(eng, 2, 64) > 0
        assert eng.kvfs.stats()["pages_used"] == 0
    finally:
        eng.shutdown()
    assert hf_decode(hf, 2, 4, "dynamic") > 0 and hf_decode(hf, 2, 4, "static") > 0
    assert hf_prefill(hf, 2, 64) > 0

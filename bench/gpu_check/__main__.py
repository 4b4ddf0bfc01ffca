"""`make gpu-check`: Symphony on a GPU, proven in one run (docs/architecture.md, "On a GPU").

    python -m bench.gpu_check [--quick] [--out DIR] [--families llama,...] [--skip SECTION,...]

Sections, in order (each is recorded, passed or failed, and the run goes on):
  parity    every family's tiny random model in bf16 against transformers' forward on the same GPU:
            logits of a prompt, and greedy agreement over 64 steps
  kvfs      fork, copy-on-write and truncate on the GPU, each against a recompute
  programs  64 concurrent LIPs, the prefix example, one debugger stop and override
  speed     decode tok/s at 1 / 8 / 64 / 256 sequences and prefill tok/s for a random-weights 1B-class
            Llama, beside transformers' generate (dynamic cache, static cache, static + torch.compile),
            and the fraction of the HBM-bandwidth floor reached at batch 1
  tests     the CUDA tests: tests/test_device_paths.py, test_triton_attention.py, test_cuda_graphs.py
It prints each figure as it comes, and writes gpu_check.json and gpu_check.txt under --out
(default bench/out/gpu_check). Exit status: 0 when every section ran and passed, 1 when one failed,
3 when there is no CUDA device. `--device cpu` runs the correctness sections on the CPU in fp32 (for
testing this script; speed and tests need the GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from .families import FAMILIES

SECTIONS = ("parity", "kvfs", "programs", "speed", "tests")
CUDA_TESTS = ["tests/test_device_paths.py", "tests/test_triton_attention.py", "tests/test_cuda_graphs.py"]
NO_CUDA = (
    "no CUDA device: `make gpu-check` proves the GPU engine and needs a GPU that torch sees "
    "(torch.cuda.is_available() is False here). On the CPU, `--device cpu` checks this script's correctness sections."
)


def _names(value: str, known: tuple[str, ...] | list[str], what: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(bad) or repr(value)}; choose from {', '.join(known)}"
        )
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description="Symphony on a GPU, proven in one run.")
    p.add_argument("--quick", action="store_true", help="fewer steps and sizes (about 2 minutes)")
    p.add_argument("--out", type=Path, default=Path("bench/out/gpu_check"), help="folder for gpu_check.json/.txt")
    p.add_argument(
        "--families",
        type=lambda v: _names(v, tuple(FAMILIES), "family"),
        default=list(FAMILIES),
        help=f"comma-separated, of: {', '.join(FAMILIES)} (default: all)",
    )
    p.add_argument(
        "--skip", type=lambda v: _names(v, SECTIONS, "section"), default=[], help=f"sections to leave out: {SECTIONS}"
    )
    p.add_argument(
        "--budget",
        type=float,
        default=450.0,
        help="seconds the run aims to end within: torch.compile runs are left out past it",
    )
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.decode_batches = [1, 64] if args.quick else [1, 8, 64, 256]
    args.steps = 16 if args.quick else 64
    args.compile_batches = [1] if args.quick else [1, 64]
    return args


def environment(device: str) -> dict:
    import torch
    import transformers

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "commit": os.environ.get("SYMPHONY_COMMIT") or _git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env |= {
            "card": torch.cuda.get_device_name(0),
            "memory_GiB": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count,
            "cuda": torch.version.cuda,
        }
    else:
        env["card"] = "none (CPU run)"
    return env


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (set SYMPHONY_COMMIT)"


def run_tests() -> dict:
    """The CUDA tests in a child pytest; its summary line's counts."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout=600", *CUDA_TESTS]
    r = subprocess.run(cmd, capture_output=True, text=True)
    tail = (r.stdout + r.stderr).strip().splitlines()[-30:]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error|errors)", tail[-1] if tail else "")}
    return {"returncode": r.returncode, **counts, "tail": tail, "ok": r.returncode == 0 and not counts.get("skipped")}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.started = time.perf_counter()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(NO_CUDA, file=sys.stderr)
        return 3
    from .correctness import kvfs_ops, parity, programs

    cpu = args.device == "cpu"
    dtype = torch.float32 if cpu else torch.bfloat16
    skip = set(args.skip) | ({"speed", "tests"} if cpu else set())
    args.out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def log(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    report: dict = {"environment": environment(args.device), "args": {"quick": args.quick, "families": args.families}}
    log("gpu-check: " + ", ".join(f"{k} {v}" for k, v in report["environment"].items()))
    work = Path(tempfile.mkdtemp(prefix="symphony-gpu-check-"))
    jobs = [
        (f"parity:{f}", lambda f=f: parity(f, work, args.device, dtype)) for f in args.families if "parity" not in skip
    ]
    if "kvfs" not in skip:
        jobs.append(("kvfs", lambda: kvfs_ops(work, args.device, dtype)))
    if "programs" not in skip:
        jobs.append(("programs", lambda: programs(work, args.device, dtype)))
    if "speed" not in skip:
        jobs.append(("speed", lambda: speed_section(work, args, log)))
    if "tests" not in skip:
        jobs.append(("tests", run_tests))
    for name, job in jobs:
        t0 = time.perf_counter()
        try:
            result = job()
        except Exception as e:
            result = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        result["seconds"] = round(time.perf_counter() - t0, 1)
        report[name] = result
        shown = {k: v for k, v in result.items() if k not in ("traceback", "tail")}
        log(f"{name}: {'PASS' if result.get('ok') else 'FAIL'} {json.dumps(shown, default=str)}")
        if not result.get("ok") and ("traceback" in result or "tail" in result):
            log("\n".join(result.get("tail") or [result["traceback"]]))
    failed = [n for n, _ in jobs if not report[n].get("ok")]
    log(
        f"gpu-check: {len(jobs) - len(failed)} of {len(jobs)} sections passed"
        + (f"; failed: {failed}" if failed else "")
    )
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    (args.out / "gpu_check.txt").write_text("\n".join(lines) + "\n")
    (args.out / "gpu_check.md").write_text("\n".join(results_section(report, [n for n, _ in jobs])) + "\n")
    print(f"written: gpu_check.json, gpu_check.txt and gpu_check.md (a section for bench/RESULTS.md) in {args.out}")
    return 1 if failed else 0


def results_section(report: dict, names: list[str]) -> list[str]:
    """The run as a markdown section for bench/RESULTS.md: the card and versions, each section's verdict,
    the parity figures and the speed table."""
    env = report["environment"]
    out = [
        f"## On a GPU: {env.get('card')}",
        "",
        f"`make gpu-check` on commit {env['commit']}, {env['date']}: torch {env['torch']} (CUDA {env.get('cuda')}), "
        f"Triton {env['triton']}, transformers {env['transformers']}.",
        "",
        "| section | result | seconds |",
        "|---|---|---|",
    ]
    out += [f"| {n} | {'pass' if report[n].get('ok') else 'FAIL'} | {report[n].get('seconds')} |" for n in names]
    parities = [report[n] for n in names if n.startswith("parity:") and "family" in report[n]]
    if parities:
        out += [
            "",
            "| family | dtype | logits vs transformers (rel.) | Symphony / transformers vs fp32 | greedy steps agreeing |",
            "|---|---|---|---|---|",
        ]
        for p in parities:
            tie = " (near tie)" if p["divergence_is_near_tie"] else ""
            vs32 = f"{p['ours_vs_fp32_rel_err']:.1e} / {p['transformers_vs_fp32_rel_err']:.1e}"
            out.append(
                f"| {p['family']} | {p['dtype']} | {p['prompt_logits_rel_err']:.1e} | {vs32} "
                f"| {p['greedy_agree']} / {p['greedy_steps']}{tie} |"
            )
    if "decode" in report.get("speed", {}):
        from .speed import markdown

        out += ["", *markdown(report["speed"])]
    return out


def speed_section(work: Path, args: argparse.Namespace, log) -> dict:
    from .speed import markdown, speed

    # the tests section after it takes about a minute
    result = speed(work, args.decode_batches, args.steps, args.compile_batches, log, args.started + args.budget - 60)
    for line in markdown(result):
        log(line)
    return result


if __name__ == "__main__":
    sys.exit(main())

"""Run the benchmark suite: `python -m bench [--quick] [--only NAME ...] [--out PATH]`.

Each workload is a module with `main(argv) -> str` that accepts `--quick` and returns its
results as markdown; a module may also leave its numbers with `bench.common.publish`. Each runs in
a process of its own (bench/one_workload.py), one after another. A full run writes the markdown, with the date, commit and machine, to
bench/RESULTS.md, the numbers and each workload's markdown to bench/results.json, and PNG plots
drawn from them to bench/plots/ (bench/plots.py), linked from RESULTS.md. `--only NAME` re-runs
some workloads: RESULTS.md keeps the other workloads' sections from results.json, each marked
with the date and commit of the run it came from. `--render` runs nothing and rewrites RESULTS.md
from results.json. `--quick` (toy sizes, used by the test suite) writes nothing unless --out, and
then writes the JSON and the plots beside that file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

# name -> module under bench/; add a workload with one line here.
WORKLOADS = {
    "matmul": "bench.matmul",
    "kernels": "bench.kernels",
    "decode": "bench.decode",
    "weights": "bench.weights",
    "model_size": "bench.weights:sized",
    "quality": "bench.quality",
    "profile": "bench.profile_forward",
    "shared_prefix": "bench.shared_prefix",
    "agents": "bench.agents",
    "graph_of_thought": "bench.graph_of_thought",
    "runtime_overhead": "bench.runtime_overhead:suite",
    "pred_timeline": "bench.pred_timeline:suite",
    "short_programs": "bench.short_programs",
    "debugger_overhead": "bench.debugger_overhead:suite",
    "profiler_overhead": "bench.profiler_overhead:suite",
    "sandbox_latency": "bench.sandbox_latency",
    "server_peer": "bench.server_peer",
}


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        # the suite's own outputs from an earlier run do not change what is measured
        own = [":!bench/RESULTS.md", ":!bench/results.json", ":!bench/plots"]
        status = ["git", "status", "--porcelain", "--", ".", *own]
        dirty = subprocess.run(status, capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="every workload at toy size (seconds, for the tests)")
    ap.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), help="run just these workloads")
    ap.add_argument(
        "--out", type=Path, default=None, help="where to write the results (default bench/RESULTS.md on full runs)"
    )
    ap.add_argument("--render", action="store_true", help="run nothing: rewrite RESULTS.md from results.json")
    ap.add_argument(
        "--args",
        action="append",
        default=[],
        metavar="NAME:ARGS",
        help="extra arguments for one workload, e.g. --args 'weights:--new 16 --repeats 3' (repeatable)",
    )
    args = ap.parse_args(argv)
    extra = {}
    for item in args.args:
        name, _, rest = item.partition(":")
        if name not in WORKLOADS:
            ap.error(f"--args {item!r}: no workload named {name!r}")
        extra[name] = shlex.split(rest)
    names = [] if args.render else (args.only or list(WORKLOADS))
    sections: dict[str, str] = {}
    numbers = {}
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name}", flush=True)
        sections[name], published = _run_alone(name, (["--quick"] if args.quick else []) + extra.get(name, []))
        if published:
            numbers[name] = published
    out = args.out or (None if args.quick else Path(__file__).with_name("RESULTS.md"))
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now()
    run = {
        "date": stamp.isoformat(timespec="minutes"),
        "id": stamp.isoformat(timespec="microseconds"),
        "commit": _commit(),
        "quick": args.quick,
    }
    saved = _merge_saved(out.with_name("results.json"), numbers, sections, run if names else None)
    run = saved["_run"]
    from .targets import missed_notes, targets_table

    head = (
        f"# Benchmark results\n\nRun {run['date'].replace('T', ' ')}, commit {run['commit']}"
        f"{' (quick sizes)' if run.get('quick') else ''}.\n\n" + targets_table(saved) + "\n\n"
    )
    notes = missed_notes(saved)
    if notes:
        head += notes + "\n\n"
    body = []
    for name in WORKLOADS:
        sec = saved["_sections"].get(name)
        if not sec or not sec["markdown"]:
            continue
        if _run_key(sec) != _run_key(run):  # kept from an earlier run
            body.append(
                sec["markdown"] + f"\n\n_(from the run of {sec['date'].replace('T', ' ')}, commit {sec['commit']})_"
            )
        else:
            body.append(sec["markdown"])
    body.append(_plots(saved, out))
    body.append(_gpu_section(out))
    out.write_text(head + "\n\n".join(s for s in body if s) + "\n")
    print(f"wrote {out}")


def _run_alone(name: str, args: list[str]) -> tuple[str, dict | None]:
    """Run workload `name` in a process of its own (bench/one_workload.py); its markdown and numbers."""
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        out = Path(tmp) / "result.json"
        proc = subprocess.run([sys.executable, "-m", "bench.one_workload", name, str(out), *args])
        if proc.returncode != 0:
            how = (
                f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exited with {proc.returncode}"
            )
            hint = " (SIGKILL: most likely the kernel's out-of-memory killer)" if proc.returncode == -9 else ""
            raise SystemExit(f"bench: workload {name!r} {how}{hint}; its output is above")
        result = json.loads(out.read_text())
    return result["markdown"], result["numbers"]


def _merge_saved(path: Path, numbers: dict, sections: dict[str, str], run: dict | None) -> dict:
    """results.json beside RESULTS.md: this run's numbers and markdown over those of the
    workloads it did not run (each section keeps the date and commit of its own run).
    `run` None (--render): nothing ran, the file's last run stays the one named."""
    saved = {}
    if path.exists():
        try:
            saved = json.loads(path.read_text())
        except ValueError:
            saved = {}
    saved.update(numbers)
    saved.setdefault("_sections", {})
    for name, md in sections.items():
        saved["_sections"][name] = {"markdown": md, "date": run["date"], "id": run["id"], "commit": run["commit"]}
    if run is not None:
        saved["_run"] = run
    path.write_text(json.dumps(saved, indent=1, default=str) + "\n")
    print(f"wrote {path}")
    return saved


def _run_key(r: dict):
    return r.get("id") or (r.get("date"), r.get("commit"))


def _gpu_section(out: Path) -> str:
    """The last `make gpu-check` run committed under results/gpu/ (a GPU machine's output; bench/ runs on the CPU)."""
    gpu = out.with_name("results") / "gpu"
    parts = [gpu / "gpu_check.md", gpu / "NOTES.md"]
    return "\n\n".join(p.read_text().strip() for p in parts if p.exists())


def _plots(saved: dict, out: Path) -> str:
    """Draw the plots into plots/ beside `out`; the markdown section that shows them."""
    try:
        from .plots import make_plots

        pngs = make_plots(saved, out.with_name("plots"))
    except ImportError as e:  # matplotlib is in the [dev] and [bench] extras
        return f"### Plots\n\nNot drawn: {e}."
    for p in pngs:
        print(f"wrote {p}")
    links = "\n\n".join(f"![{p.stem}](plots/{p.name})" for p in pngs)
    return f"### Plots\n\nDrawn by bench/plots.py from results.json.\n\n{links}" if pngs else ""


if __name__ == "__main__":
    main()

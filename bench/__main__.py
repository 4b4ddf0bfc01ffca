"""Run the benchmark suite: `python -m bench [--quick] [--only NAME ...] [--out PATH]`.

Each workload is a module with `main(argv) -> str` that accepts `--quick` and returns its
results as markdown; a module may also leave its numbers in a module-level dict
`last_results`. A full run writes the markdown, with the date, commit and machine, to
bench/RESULTS.md, the numbers to bench/results.json (merged with the workloads it did not run)
and PNG plots drawn from them to bench/plots/ (bench/plots.py), linked from RESULTS.md.
`--quick` (toy sizes, used by the test suite) writes nothing unless --out, and then writes the
JSON and the plots beside that file.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import subprocess
from pathlib import Path

# name -> module under bench/; add a workload with one line here.
WORKLOADS = {
    "matmul": "bench.matmul",
    "decode": "bench.decode",
    "profile": "bench.profile_forward",
    "shared_prefix": "bench.shared_prefix",
    "agents": "bench.agents",
    "graph_of_thought": "bench.graph_of_thought",
    "runtime_overhead": "bench.runtime_overhead:suite",
    "debugger_overhead": "bench.debugger_overhead:suite",
}


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="every workload at toy size (seconds, for the tests)")
    ap.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), help="run just these workloads")
    ap.add_argument("--out", type=Path, default=None, help="where to write the results (default bench/RESULTS.md on full runs)")
    args = ap.parse_args(argv)
    names = args.only or list(WORKLOADS)
    sections = []
    numbers = {}
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name}", flush=True)
        modname, _, fname = WORKLOADS[name].partition(":")
        module = importlib.import_module(modname)
        sections.append(getattr(module, fname or "main")(["--quick"] if args.quick else []))
        if getattr(module, "last_results", None):
            numbers[name] = dict(module.last_results)
    out = args.out or (None if args.quick else Path(__file__).with_name("RESULTS.md"))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        sections.append(_save_numbers_and_plots(numbers, out, quick=args.quick))
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        head = f"# Benchmark results\n\nRun {stamp}, commit {_commit()}{' (quick sizes)' if args.quick else ''}.\n\n"
        from .targets import targets_table

        head += targets_table(numbers) + "\n\n"
        out.write_text(head + "\n\n".join(s for s in sections if s) + "\n")
        print(f"wrote {out}")


def _save_numbers_and_plots(numbers: dict, out: Path, quick: bool) -> str:
    """Write results.json beside `out` (keeping the entries of workloads not run this time) and
    draw the plots into plots/ there; returns the markdown section that shows them."""
    path = out.with_name("results.json")
    saved = {}
    if path.exists():
        try:
            saved = json.loads(path.read_text())
        except ValueError:
            saved = {}
    saved.update(numbers)
    saved["_run"] = {"date": datetime.datetime.now().isoformat(timespec="minutes"), "commit": _commit(), "quick": quick}
    path.write_text(json.dumps(saved, indent=1, default=str) + "\n")
    print(f"wrote {path}")
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

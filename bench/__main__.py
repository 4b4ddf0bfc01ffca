"""Run the benchmark suite: `python -m bench [--quick] [--only NAME ...] [--out PATH]`.

Each workload is a module with `main(argv) -> str` that accepts `--quick` and returns its
results as markdown. A full run writes them, with the date, commit and machine, to
bench/RESULTS.md; `--quick` (toy sizes, used by the test suite) writes nothing unless --out.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import subprocess
from pathlib import Path

# name -> module under bench/; add a workload with one line here.
WORKLOADS = {
    "matmul": "bench.matmul",
    "decode": "bench.decode",
    "profile": "bench.profile_forward",
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
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name}", flush=True)
        module = importlib.import_module(WORKLOADS[name])
        sections.append(module.main(["--quick"] if args.quick else []))
    out = args.out or (None if args.quick else Path(__file__).with_name("RESULTS.md"))
    if out is not None:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        head = f"# Benchmark results\n\nRun {stamp}, commit {_commit()}{' (quick sizes)' if args.quick else ''}.\n\n"
        out.write_text(head + "\n\n".join(sections) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""Grade a folder of submitted lab notebooks on this machine, without Docker.

    python tutorials/grade_labs.py SUBMISSIONS [--bundle dist/labs] [--out grades] [--jobs N]

Each `*.ipynb` under SUBMISSIONS is matched to its lab by the assignment name otter wrote into
the student notebook, and graded with `otter run` (otter-grader's non-containerized grader)
against that lab's autograder zip from `make labs` — public and hidden tests. The notebook runs
top to bottom in a fresh kernel, so grading a lab takes about as long as running it.

Writes OUT/<submission>/results.json (otter's full report), OUT/<submission>/executed.ipynb (the
submission as the grader ran it, outputs and errors included) and OUT/grades.csv: one row per
submission with each question's score, the total, the maximum and the seconds grading took.
`--jobs N` grades N submissions at once (each in its own kernel with its own engine; give each
job at least two cores). Submissions run with the student's code: grade them on a machine (or
in a VM) you do not mind them running on.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def assignment_of(notebook: Path) -> str | None:
    try:
        meta = json.loads(notebook.read_text())["metadata"]
    except (OSError, ValueError, KeyError) as e:
        print(f"skipping {notebook}: not a notebook ({e})", file=sys.stderr)
        return None
    name = meta.get("otter", {}).get("assignment_name")
    if not name:
        print(
            f"skipping {notebook}: no otter assignment name (not made from a lab's student notebook)", file=sys.stderr
        )
    return name


def grade_one(notebook: Path, autograder: Path, out: Path, timeout: float) -> dict:
    """Grade one submission in a child process (otter runs in its own temporary folder and chdirs
    there, so two gradings cannot share a process)."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, "--one", str(notebook), str(autograder), str(out)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"grading took more than {timeout:.0f} s", "seconds": round(time.perf_counter() - t0, 1)}
    seconds = round(time.perf_counter() - t0, 1)
    (out / "otter-run.log").write_text(proc.stdout + proc.stderr)
    results = out / "results.json"
    if proc.returncode != 0 or not results.exists():
        return {"error": f"otter run failed (exit {proc.returncode}); see {out / 'otter-run.log'}", "seconds": seconds}
    scores = {}
    for t in json.loads(results.read_text())["tests"]:
        if "max_score" in t and t.get("name") != "Public Tests":
            scores[t["name"]] = (t.get("score") or 0.0, t["max_score"])
    return {"scores": scores, "seconds": seconds}


def otter_run(notebook: Path, autograder: Path, out: Path) -> None:
    """What `otter run -a AUTOGRADER -o OUT NOTEBOOK` does, keeping the notebook as it was executed."""
    import nbformat
    from otter.run import main as run

    results = run(
        str(notebook.resolve()), autograder=str(autograder.resolve()), output_dir=str(out.resolve()), no_logo=True
    )
    if results.notebook is not None:
        nbformat.write(results.notebook, out / "executed.ipynb")


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--one"]:  # the child process of grade_one
        otter_run(*(Path(a) for a in sys.argv[2:5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("submissions", type=Path, help="folder of submitted notebooks (searched recursively)")
    ap.add_argument("--bundle", type=Path, default=Path("dist/labs"), help="what `make labs` built (default dist/labs)")
    ap.add_argument("--out", type=Path, default=Path("grades"), help="where results go (default grades/)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds one submission may take (default 900)")
    ap.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default 1)")
    args = ap.parse_args(argv)
    if not args.submissions.is_dir():
        ap.error(f"no such folder: {args.submissions}")
    notebooks = sorted(p for p in args.submissions.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if not notebooks:
        ap.error(f"no .ipynb under {args.submissions}")
    todo = []
    for nb in notebooks:
        lab = assignment_of(nb)
        if lab is None:
            continue
        autograder = args.bundle / "autograder" / f"{lab}.zip"
        if not autograder.exists():
            print(f"skipping {nb}: no autograder {autograder} (run `make labs` first)", file=sys.stderr)
            continue
        todo.append((nb, lab, autograder, nb.relative_to(args.submissions).with_suffix("")))

    def grade(job: tuple) -> dict:
        nb, lab, autograder, rel = job
        res = grade_one(nb, autograder, args.out / rel, args.timeout)
        row = {"submission": str(rel), "lab": lab}
        if "error" in res:
            row.update(total="", max="", error=res["error"])
        else:
            row.update({q: s for q, (s, _) in res["scores"].items()})
            row.update(
                total=sum(s for s, _ in res["scores"].values()), max=sum(m for _, m in res["scores"].values()), error=""
            )
        row["seconds"] = res["seconds"]
        print(
            f"{row['submission']}: {row['lab']} {row['total']}/{row['max']} {row['seconds']} s {row['error']}".rstrip()
        )
        return row

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        rows = list(pool.map(grade, todo))
    args.out.mkdir(parents=True, exist_ok=True)
    fields = (
        ["submission", "lab"]
        + sorted({k for r in rows for k in r} - {"submission", "lab", "total", "max", "seconds", "error"})
        + ["total", "max", "seconds", "error"]
    )
    with open(args.out / "grades.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} graded -> {args.out / 'grades.csv'}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())

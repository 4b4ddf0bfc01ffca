"""Grade a folder of submitted lab notebooks on this machine, without Docker.

    python tutorials/grade_labs.py SUBMISSIONS [--bundle dist/labs] [--out grades]

Each `*.ipynb` under SUBMISSIONS is matched to its lab by the assignment name otter wrote into
the student notebook, and graded with `otter run` (otter-grader's non-containerized grader)
against that lab's autograder zip from `make labs` — public and hidden tests. The notebook runs
top to bottom in a fresh kernel, so grading a lab takes about as long as running it.

Writes OUT/<submission>/results.json (otter's full report) and OUT/grades.csv: one row per
submission with each question's score, the total and the maximum. Submissions run with the
student's code: grade them on a machine (or in a VM) you do not mind them running on.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
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
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "otter", "run", "--no-logo", "-a", str(autograder), "-o", str(out), str(notebook)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"grading took more than {timeout:.0f} s"}
    (out / "otter-run.log").write_text(proc.stdout + proc.stderr)
    results = out / "results.json"
    if proc.returncode != 0 or not results.exists():
        return {"error": f"otter run failed (exit {proc.returncode}); see {out / 'otter-run.log'}"}
    scores = {}
    for t in json.loads(results.read_text())["tests"]:
        if "max_score" in t and t.get("name") != "Public Tests":
            scores[t["name"]] = (t.get("score") or 0.0, t["max_score"])
    return {"scores": scores}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("submissions", type=Path, help="folder of submitted notebooks (searched recursively)")
    ap.add_argument("--bundle", type=Path, default=Path("dist/labs"), help="what `make labs` built (default dist/labs)")
    ap.add_argument("--out", type=Path, default=Path("grades"), help="where results go (default grades/)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds one submission may take (default 900)")
    args = ap.parse_args(argv)
    if not args.submissions.is_dir():
        ap.error(f"no such folder: {args.submissions}")
    notebooks = sorted(p for p in args.submissions.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if not notebooks:
        ap.error(f"no .ipynb under {args.submissions}")
    rows = []
    for nb in notebooks:
        lab = assignment_of(nb)
        if lab is None:
            continue
        autograder = args.bundle / "autograder" / f"{lab}.zip"
        if not autograder.exists():
            print(f"skipping {nb}: no autograder {autograder} (run `make labs` first)", file=sys.stderr)
            continue
        rel = nb.relative_to(args.submissions).with_suffix("")
        res = grade_one(nb, autograder, args.out / rel, args.timeout)
        row = {"submission": str(rel), "lab": lab}
        if "error" in res:
            row.update(total="", max="", error=res["error"])
        else:
            row.update({q: s for q, (s, _) in res["scores"].items()})
            row.update(
                total=sum(s for s, _ in res["scores"].values()), max=sum(m for _, m in res["scores"].values()), error=""
            )
        print(f"{row['submission']}: {row['lab']} {row['total']}/{row['max']} {row['error']}".rstrip())
        rows.append(row)
    args.out.mkdir(parents=True, exist_ok=True)
    fields = (
        ["submission", "lab"]
        + sorted({k for r in rows for k in r} - {"submission", "lab", "total", "max", "error"})
        + ["total", "max", "error"]
    )
    with open(args.out / "grades.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} graded -> {args.out / 'grades.csv'}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())

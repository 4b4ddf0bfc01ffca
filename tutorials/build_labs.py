"""Build the course bundle from the master notebooks: `python tutorials/build_labs.py [OUT]`.

Each master `tutorials/NN_*.ipynb` is in otter-grader's assign format (solutions, public and
hidden tests). `otter assign` turns it into a student notebook (blanks, public tests only) and an
autograder zip (all tests). The bundle (default `dist/labs/`):

    student/NN_name.ipynb          what students get (run `grader.check("q1")` in it)
    autograder/NN_name.zip         what `otter run -a` grades a submission with (hidden tests)
    build/NN_name/                 otter's own output, kept for inspection

`make labs` runs this; `make grade-labs SUBMISSIONS=dir` grades a folder (tutorials/grade_labs.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def masters() -> list[Path]:
    return sorted(p for p in HERE.glob("[0-9][0-9]_*.ipynb"))


def build(out: Path, only: list[str] | None = None, quiet: bool = True) -> dict[str, dict[str, Path]]:
    """Run `otter assign` on each master (tests are not re-run: the suite executes the masters);
    return {lab: {"student": notebook, "autograder": zip}}."""
    from otter.assign import main as assign

    out = out.resolve()
    (out / "student").mkdir(parents=True, exist_ok=True)
    (out / "autograder").mkdir(parents=True, exist_ok=True)
    built = {}
    for master in masters():
        if only and master.stem not in only:
            continue
        work = out / "build" / master.stem
        shutil.rmtree(work, ignore_errors=True)
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink) if quiet else contextlib.nullcontext():
            assign(str(master), str(work), no_pdfs=True, no_run_tests=True)
        student = out / "student" / master.name
        shutil.copyfile(work / "student" / master.name, student)
        zips = sorted((work / "autograder").glob("*.zip"))
        if len(zips) != 1:
            raise RuntimeError(f"otter assign left {len(zips)} autograder zips for {master.name}")
        grader = out / "autograder" / f"{master.stem}.zip"
        shutil.copyfile(zips[0], grader)
        built[master.stem] = {"student": student, "autograder": grader}
        print(f"{master.stem}: {student.relative_to(out)}  {grader.relative_to(out)}")
    return built


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default="dist/labs", help="bundle folder (default dist/labs)")
    ap.add_argument("--only", nargs="*", help="lab names (e.g. 02_kv_cache_as_files) to build")
    args = ap.parse_args(argv)
    built = build(Path(args.out), args.only)
    if not built:
        sys.exit("no master notebook matched")


if __name__ == "__main__":
    main()

"""The course labs (tutorials/NN_*.ipynb, otter-grader masters) run in a real Jupyter kernel.

- `otter assign` builds every master into a student notebook and an autograder zip;
- every master runs top to bottom with its solutions: its test cells (public and hidden, the
  same functions the autograder runs) are executed in place, so any failing test is an error;
- every student notebook runs with its blanks: the kernel survives, no cell hangs, and each
  `grader.check("qN")` reports that question's public tests as failed, with a message;
- lab 1 also keeps what tests/test_jupyter_tutorials.py used to check: the live widgets were
  displayed with a state the browser can render.

Each notebook loads its own engine (one per kernel); `pytest --durations=0` shows each lab's time.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tutorials"))
import build_labs  # noqa: E402

MASTERS = build_labs.masters()
IDS = [p.stem for p in MASTERS]


def question_names(nb) -> list[str]:
    """The `name:` of every `# BEGIN QUESTION` raw cell."""
    names = []
    for c in nb.cells:
        if c.cell_type == "raw" and c.source.lstrip().startswith("# BEGIN QUESTION"):
            names += [ln.split(":", 1)[1].strip() for ln in c.source.splitlines() if ln.startswith("name:")]
    return names


def execute(path: Path, allow_errors: bool):
    """Run the notebook at `path` in its own folder; returns it with its outputs."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    runtime = path.parent / "runtime"
    runtime.mkdir(exist_ok=True)
    old = os.environ.get("JUPYTER_RUNTIME_DIR")
    os.environ["JUPYTER_RUNTIME_DIR"] = str(runtime)  # the kernel's sidebar bridge registers here
    t0 = time.perf_counter()
    try:
        NotebookClient(
            nb,
            timeout=240,
            kernel_name="python3",
            allow_errors=allow_errors,
            resources={"metadata": {"path": str(path.parent)}},
        ).execute()
    finally:
        if old is None:
            os.environ.pop("JUPYTER_RUNTIME_DIR", None)
        else:
            os.environ["JUPYTER_RUNTIME_DIR"] = old
    print(f"{path.name}: executed in {time.perf_counter() - t0:.1f} s")
    return nb


def outputs(nb, kind: str | None = None):
    return [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if kind is None or o.output_type == kind
    ]


def text_of(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        parts.append(o.get("text", ""))
        data = o.get("data", {})
        parts.append(data.get("text/plain", ""))
        parts.append(data.get("text/html", ""))
        if o.output_type == "error":
            parts.append(f"{o.ename}: {o.evalue}")
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("labs")
    built = build_labs.build(out)
    assert sorted(built) == IDS
    return built


def test_masters_are_otter_assignments():
    import nbformat

    assert len(MASTERS) == 7, [p.name for p in MASTERS]
    for path in MASTERS:
        nb = nbformat.read(path, as_version=4)
        assert nb.cells[0].cell_type == "raw" and nb.cells[0].source.startswith("# ASSIGNMENT CONFIG"), path.name
        assert f"name: {path.stem}" in nb.cells[0].source, "the assignment is named after its file"
        assert question_names(nb), f"{path.name} has no graded question"
        assert not outputs(nb), f"{path.name} is committed with outputs"
        assert "What you measured" in "".join(c.source for c in nb.cells if c.cell_type == "markdown"), path.name


@pytest.mark.slow
@pytest.mark.parametrize("master", MASTERS, ids=IDS)
def test_master_runs_and_passes_its_tests(master, tmp_path):
    work = tmp_path / master.name
    shutil.copyfile(master, work)
    nb = execute(work, allow_errors=False)  # a failing test cell raises: nbclient stops there
    assert not outputs(nb, "error")
    if master.stem.startswith("01_"):
        check_lab1_widgets(nb)


@pytest.mark.slow
@pytest.mark.parametrize("name", IDS)
def test_student_notebook_fails_its_blanks_clearly(bundle, name, tmp_path):
    import nbformat

    student = bundle[name]["student"]
    text = student.read_text()
    assert "# SOLUTION" not in text and "BEGIN SOLUTION" not in text, "solutions leaked into the student notebook"
    master_nb = nbformat.read(ROOT / "tutorials" / f"{name}.ipynb", as_version=4)
    questions = question_names(master_nb)
    tests = nbformat.read(student, as_version=4).metadata["otter"]["tests"]
    assert sorted(tests) == sorted(questions)
    assert all("hidden=True" not in t for t in tests.values()), "hidden tests leaked to students"
    assert all("hidden=False" in t for t in tests.values()), "every question has a public test"
    with zipfile_open(bundle[name]["autograder"]) as z:
        hidden = [z.read(f"tests/{q}.py").decode() for q in questions]
    assert all("hidden=True" in t for t in hidden), "every question has a hidden test in the autograder"

    work = tmp_path / student.name
    shutil.copyfile(student, work)
    nb = execute(work, allow_errors=True)  # a dead kernel or a hung cell raises here
    for q in questions:
        checks = [c for c in nb.cells if c.cell_type == "code" and f'grader.check("{q}")' in c.source]
        assert checks, f"no grader.check for {q}"
        report = text_of(checks[0])
        assert "❌" in report or "failed" in report.lower(), f"{q}'s blank passed its tests:\n{report}"
        assert "Error" in report or "assert" in report.lower(), f"{q}'s failure says nothing:\n{report}"
    errors = outputs(nb, "error")
    assert all(e.ename not in ("DeadKernelError", "CellTimeoutError") for e in errors)


def zipfile_open(path):
    import zipfile

    return zipfile.ZipFile(path)


def check_lab1_widgets(nb) -> None:
    """The live widgets were displayed, and nbclient stored a state the browser can render."""
    widgets = [
        o for o in outputs(nb, "display_data") if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert len(widgets) >= 2, "lab.run and lab.views display live widgets"
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    views = [
        m["state"].get("view") for m in state.values() if m.get("model_name") == "AnyModel" and m["state"].get("view")
    ]
    assert views, "nbclient stores the widgets' state in the notebook"
    runs = [v for v in views if v.get("name") == "complete"]
    # the state stored is the last one sent before the kernel stopped (a relaunched run may be mid-way)
    assert runs and any(v["status"] == "finished" for v in runs), [v.get("status") for v in runs]
    assert any(v["tokens"] and v["kv_tree"] and v["timeline"]["batches"] for v in runs)
    assert json.dumps(views)


@pytest.mark.slow
def test_grading_a_folder_without_docker(bundle, tmp_path):
    """`make grade-labs`: the solved notebook of lab 1 gets full marks from `otter run` (public and
    hidden tests, in a fresh kernel); a file that is no lab's notebook is skipped with a reason."""
    import csv
    import subprocess

    name = "01_debugging_lips"
    subs = tmp_path / "submissions"
    (subs / "alice").mkdir(parents=True)
    solved = bundle[name]["student"].parent.parent / "build" / name / "autograder" / f"{name}.ipynb"
    shutil.copyfile(solved, subs / "alice" / f"{name}.ipynb")
    (subs / "notes.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    out = tmp_path / "grades"
    bundle_dir = bundle[name]["student"].parent.parent
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tutorials" / "grade_labs.py"),
            str(subs),
            "--bundle",
            str(bundle_dir),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "skipping" in proc.stderr and "notes.ipynb" in proc.stderr
    rows = list(csv.DictReader(open(out / "grades.csv")))
    assert [r["submission"] for r in rows] == [f"alice/{name}"], rows
    row = rows[0]
    assert row["error"] == "" and float(row["total"]) == float(row["max"]) > 0, row
    report = json.loads((out / "alice" / name / "results.json").read_text())
    assert any(t.get("name") == "q1" and t.get("score") == t.get("max_score") for t in report["tests"]), report

"""Notebook profile lines are named by cell (`In[3]`, as IPython's tracebacks name them), not by
the temporary file ipykernel compiled the cell from (issue 50)."""

from __future__ import annotations

import os

import pytest

from symphony_lab.profiler import profile_run
from symphony_lab.profiler.names import source_name


@pytest.fixture
def shell():
    """An IPython shell compiling cells as ipykernel does (to /tmp/ipykernel_<pid>/<hash>.py)."""
    from ipykernel.compiler import XCachingCompiler
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    saved = sh.compile
    sh.compile = XCachingCompiler()
    yield sh
    sh.compile = saved
    InteractiveShell.clear_instance()


def test_a_cells_lines_are_named_by_the_cell(engine, shell):
    shell.run_cell("x = 1", store_history=True)  # In[1]: the LIP is in the second cell
    cell = "def lip(sym):\n    kv = sym.kv_create()\n    sym.pred(kv, sym.tokenize('Hello there'))\n    return 1\n"
    assert shell.run_cell(cell, store_history=True).success
    lip = shell.user_ns["lip"]
    file = lip.__code__.co_filename
    assert "ipykernel" in file and source_name(file) == "In[2]"

    _, prof = profile_run(engine, lip)
    mine = [r for r in prof.to_dict()["lines"] if r["file"] == file]
    assert mine and {r["name"] for r in mine} == {"In[2]"}
    assert {r["line"] for r in mine} >= {3}  # the pred's line of the cell
    table, flame = prof.table(), prof.flame()
    assert "In[2]:3 lip" in table and "In[2]:" in flame and os.path.basename(file) not in table + flame
    assert prof.line("In[2]", 3).times.total > 0  # looked up by the name the table shows
    assert any(s["name"].endswith("In[2]:3") for s in prof.trace_events() if s.get("ph") == "X")


def test_a_file_outside_a_notebook_keeps_its_base_name():
    assert source_name("/work/programs/agent.py") == "agent.py"

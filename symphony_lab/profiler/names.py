"""How the profiler names a source file: a notebook cell as IPython's own tracebacks do (`In[3]`),
not by the temporary file ipykernel compiled it from; any other file by its base name."""

from __future__ import annotations

import os
import sys


def source_name(file: str) -> str:
    """`In[<execution count>]` for a cell of the IPython kernel this runs in, else the base name."""
    ipython = sys.modules.get("IPython")  # never imported here: only a kernel that has it names cells
    shell = ipython.get_ipython() if ipython is not None else None
    label = getattr(getattr(shell, "compile", None), "format_code_name", None)
    named = label(file) if label is not None else None
    return named[1] if named else os.path.basename(file)


__all__ = ["source_name"]

"""One workload of `python -m bench`, in a process of its own: its markdown section and published numbers as JSON.

`python -m bench` runs every workload this way, one after another, so that each starts from a fresh
interpreter: the engines, transformers models and thread pools one workload loads are gone before the
next loads its own (in one process they added up to ~17 GB by the profile workload, and the suite
was killed for memory on a 24 GB machine), and no workload's leftover threads run during another's
timings.

    python -m bench.one_workload NAME OUT.json [ARGS...]
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    from .__main__ import WORKLOADS
    from .common import take_published

    name, out, *args = sys.argv[1:] if argv is None else argv
    modname, _, fname = WORKLOADS[name].partition(":")
    module = importlib.import_module(modname)
    markdown = getattr(module, fname or "main")(args)
    result = {"markdown": markdown, "numbers": take_published(module.__name__)}
    Path(out).write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    main()

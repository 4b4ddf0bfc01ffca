"""The declared dependencies match the imports: every third-party module symphony_core imports
is a declared dependency, every declared dependency is imported (or named below with the reason
it is needed without an import), and both commands report the package's version."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Needed at run time though no module imports them by name.
NOT_IMPORTED = {
    "gguf": "transformers reads the GGUF file through it when a built-in model is converted",
    # transformers refuses to load a GGUF without it ("accelerate is required when loading a GGUF
    # file"): a fresh clone's `make setup` converts the shipped model through that path.
    "accelerate": "transformers' GGUF loading requires it when a built-in model is converted",
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _names(deps: list[str]) -> set[str]:
    return {_norm(re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0]) for d in deps}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _imported(package: str) -> set[str]:
    dists = md.packages_distributions()
    out = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for n in names:
                top = n.split(".")[0]
                if top in sys.stdlib_module_names or top in ("symphony_core", "symphony_lab"):
                    continue
                for d in dists.get(top, [top]):
                    out.add(_norm(d))
    return out


def test_core_imports_are_declared_and_declared_deps_are_used():
    project = _project()
    declared, imported = _names(project["dependencies"]), _imported("symphony_core")
    optional = _names([d for extra in project["optional-dependencies"].values() for d in extra])
    missing = imported - declared - optional  # an optional import (flash-attn) belongs to an extra
    assert missing == set(), f"imported by symphony_core but not declared: {missing}"
    unused = declared - imported - set(NOT_IMPORTED)
    assert unused == set(), f"declared but never imported: {unused}"


def test_version_flags_report_the_package_metadata(capsys):
    from symphony_core.cli import main as symphony_main
    from symphony_lab.cli import main as lab_main

    want = md.version("symphony-lip")
    for cmd, run in (("symphony", symphony_main), ("symphony-lab", lab_main)):
        with pytest.raises(SystemExit) as e:
            run(["--version"])
        assert e.value.code == 0
        assert capsys.readouterr().out.strip() == f"{cmd} {want}"

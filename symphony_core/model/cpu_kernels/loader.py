"""Build and load gemv.cpp (with gemv_blocks.cpp, gemv_vnni.cpp), decode_ops.cpp and decode_stack.cpp as a torch C++ extension (pybind11; torch's OpenMP thread pool).

`build()` compiles it with `torch.utils.cpp_extension.load` into `BUILD_DIR` (inside the package,
git-ignored) and records a digest of the source, flags and torch version beside it. `compiled()`
imports that build if it is current and the CPU has AVX2 + FMA, else returns None with a one-line
note on stderr (once a process): the caller then runs torch's own kernels. It never compiles —
a first engine load must not stall for a build; `make kernels` (part of `make setup`) does that.

`SYMPHONY_CPU_KERNELS=torch` forces torch's kernels (`auto`, the default, takes the compiled ones
when they load).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import sys
from pathlib import Path
from types import ModuleType

import torch

NAME = "symphony_cpu_kernels"
SOURCES = [
    Path(__file__).with_name(n)
    for n in ("gemv.cpp", "gemv_blocks.cpp", "gemv_vnni.cpp", "gemv_f32_wide.cpp", "decode_ops.cpp", "decode_stack.cpp")
]
HEADERS = [
    Path(__file__).with_name(n) for n in ("kernels.h", "gemv_parts.h", "gemv_rows.h", "gemv_vnni.h", "gemv_f32_wide.h")
]
BUILD_DIR = Path(__file__).with_name("build")
CFLAGS = ["-O3", "-mavx2", "-mfma", "-mf16c", "-fopenmp"]  # -fopenmp: at::parallel_for runs on torch's OpenMP pool
LDFLAGS = ["-fopenmp"]
ENV = "SYMPHONY_CPU_KERNELS"
CHOICES = ("auto", "torch")

_noted: set[str] = set()


def digest() -> str:
    """What the current build is built from: the sources, flags and torch version."""
    h = hashlib.sha256(b"".join(src.read_bytes() for src in SOURCES + HEADERS))
    h.update(" ".join(CFLAGS + LDFLAGS + [torch.__version__]).encode())
    return h.hexdigest()[:16]


def _stamp() -> Path:
    return BUILD_DIR / f"{NAME}.digest"


def build(verbose: bool = False) -> ModuleType:
    """Compile the kernels (about 30-60 s on 2 cores) and return the module."""
    from torch.utils.cpp_extension import load

    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    mod = load(
        name=NAME,
        sources=[str(src) for src in SOURCES],
        extra_cflags=list(CFLAGS),  # load() appends to the lists it is given
        extra_ldflags=list(LDFLAGS),
        build_directory=str(BUILD_DIR),
        verbose=verbose,
    )
    _stamp().write_text(digest())
    return mod


def cpu_ok() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64") and torch.backends.cpu.get_cpu_capability() in (
        "AVX2",
        "AVX512",
    )


@functools.cache
def _import_built() -> tuple[ModuleType | None, str]:
    """(module, "") or (None, why not); looked at once a process."""
    if not cpu_ok():
        return None, f"this CPU lacks AVX2/FMA ({torch.backends.cpu.get_cpu_capability()})"
    so = BUILD_DIR / f"{NAME}.so"
    if not so.exists():
        return None, "the CPU kernels are not built (run `make kernels`)"
    if not _stamp().exists() or _stamp().read_text().strip() != digest():
        return None, "the built CPU kernels are stale (run `make kernels`)"
    try:
        loader = importlib.machinery.ExtensionFileLoader(NAME, str(so))
        spec = importlib.util.spec_from_file_location(NAME, str(so), loader=loader)
        assert spec is not None
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
    except ImportError as e:
        return None, f"the built CPU kernels do not load ({e}; run `make kernels`)"
    return mod, ""


def _note(why: str) -> None:
    if why not in _noted:
        _noted.add(why)
        print(f"symphony: {why}; torch's kernels run instead", file=sys.stderr)


def compiled() -> ModuleType | None:
    """The compiled kernels' module, or None where torch's kernels must run (see the module docstring)."""
    choice = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise ValueError(f"{ENV}={choice!r}: choose one of {', '.join(CHOICES)}")
    if choice == "torch":
        _note(f"{ENV}=torch")
        return None
    mod, why = _import_built()
    if why:
        _note(why)
    return mod

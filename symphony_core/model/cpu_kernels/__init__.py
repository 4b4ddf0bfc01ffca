"""Symphony's own compiled CPU kernels (gemv.cpp): fp32 and weight-only int8 / int4 matmuls for
decode's few rows.

Built by `make kernels` (part of `make setup`): `python -m symphony_core.model.cpu_kernels`.
`compiled()` returns the built module, or None — then fp32 runs MKL's sgemm and the quantised linears
torch's kernels.
"""

from .loader import BUILD_DIR, build, compiled, digest

__all__ = ["BUILD_DIR", "build", "compiled", "digest"]

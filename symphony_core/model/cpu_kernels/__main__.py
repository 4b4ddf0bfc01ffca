"""Build the compiled CPU kernels: `python -m symphony_core.model.cpu_kernels` (what `make kernels` runs)."""

from __future__ import annotations

import sys
import time

from .loader import BUILD_DIR, build, cpu_ok

if not cpu_ok():
    print("symphony: this CPU lacks AVX2/FMA: the CPU kernels are not built; torch's kernels run instead")
    sys.exit(0)
t0 = time.perf_counter()
try:
    build(verbose=True)
except Exception as e:  # a failed build leaves the pure-torch kernels in place; `make` reports it
    print(
        f"symphony: building the CPU kernels failed ({e}); the quantised weights will run torch's kernels",
        file=sys.stderr,
    )
    sys.exit(1)
print(f"symphony: built the CPU kernels into {BUILD_DIR} in {time.perf_counter() - t0:.0f} s")

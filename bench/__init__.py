"""Side-by-side benchmarks. `python -m bench` runs the suite (see `bench/__main__.py`)."""

# symphony_core first: it sets OpenMP's waits before torch loads libgomp (symphony_core/openmp_waits.py), as
# in every program that imports it before torch; the bench's modules import torch at their top.
import symphony_core  # noqa: E402, F401

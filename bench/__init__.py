"""Side-by-side benchmarks. `python -m bench` runs the suite (see `bench/__main__.py`)."""

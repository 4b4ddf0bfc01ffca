"""`make gpu-check`: the GPU engine proven in one run on a bare GPU machine (see `__main__.py`)."""

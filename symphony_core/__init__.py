"""Symphony's engine: serve LLM inference programs (LIPs), not prompts."""

from . import openmp_waits

openmp_waits.tune()  # before anything below imports torch

from .engine import Engine  # noqa: E402
from .errors import KVError, KVNotFound, KVPermissionError, ModelError, OutOfPages, PredError, SymphonyError  # noqa: E402
from .executor import PredCall  # noqa: E402
from .kvfs import KV  # noqa: E402
from .model import Dist, Sampler  # noqa: E402

__all__ = [
    "Dist",
    "Engine",
    "KV",
    "KVError",
    "KVNotFound",
    "KVPermissionError",
    "ModelError",
    "OutOfPages",
    "PredCall",
    "PredError",
    "Sampler",
    "SymphonyError",
]

"""Symphony's engine: serve LLM inference programs (LIPs), not prompts."""

from .engine import Engine
from .errors import KVError, KVNotFound, KVPermissionError, ModelError, OutOfPages, PredError, SymphonyError
from .executor import PredCall
from .kvfs import KV
from .model import Dist, Sampler

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

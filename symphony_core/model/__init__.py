"""Models: loading (GGUF, HF directory, built-in registry), the paged forward, sampling."""

from .config import ModelConfig
from .dist import Dist
from .llama import PagedLlama
from .loader import LoadedModel, load_model
from .registry import BUILTIN, DEFAULT_MODEL, resolve_model
from .sampling import Sampler
from .tokenizer import Tokenizer

__all__ = [
    "BUILTIN",
    "DEFAULT_MODEL",
    "Dist",
    "LoadedModel",
    "ModelConfig",
    "PagedLlama",
    "Sampler",
    "Tokenizer",
    "load_model",
    "resolve_model",
]

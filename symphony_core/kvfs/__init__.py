"""KV cache file system: a page pool and files built from its pages."""

from .file import KV, KVFile
from .fs import KVFS, Reservation
from .pool import PagePool

__all__ = ["KV", "KVFile", "KVFS", "PagePool", "Reservation"]

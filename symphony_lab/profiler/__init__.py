"""The LIP profiler: where each line of a program spends its wall time (queue, forward, own
Python, blocking, kernel), from the engine's syscall and batch events."""

from .collect import ProfileCollector
from .profile import BUCKETS, LineRow, Profile, ThreadProfile, Times
from .session import profile_engine, profile_run

__all__ = [
    "BUCKETS",
    "LineRow",
    "Profile",
    "ProfileCollector",
    "ThreadProfile",
    "Times",
    "profile_engine",
    "profile_run",
]

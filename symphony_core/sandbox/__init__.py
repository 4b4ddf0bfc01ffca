"""Sandboxed programs: a program received over the network runs in a confined worker process
and, inside the engine, as an ordinary LIP process (its twin) that makes the worker's calls.

Outside the engine's process: `zygote.py` (the fork server), `confine.py` (namespaces, limits,
seccomp), `worker.py` (the proxy `sym` a program sees) and `protocol.py` (the frames both sides
speak). Inside it: `pool.py` (`SandboxManager`, which starts the zygote and routes the workers'
I/O), `worker_link.py` (the server's end of one worker), `twin.py` (`sandboxed_lip`, the
in-engine twin) and `job.py` (`SandboxJob`, one program to run). This package never imports
the HTTP server; the server imports it.

The zygote loads this package with its `__init__` stubbed out, so nothing is imported here.
"""

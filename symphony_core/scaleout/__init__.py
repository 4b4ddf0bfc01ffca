"""Scale-out on Ray: `symphony serve --ray [ADDRESS] --replicas N` (docs/scale-out.md).

N replicas — Ray actors, each running a whole `symphony serve` (engine, runtime, sandbox) on its
node (replica.py, pool.py) — behind one front (front.py, proxy.py) that serves the single server's
HTTP, WebSocket and OpenAI-compatible API. Programs follow their user's named KV files
(placement.py); a pid names its replica (pids.py); a replica's death is reported, never hidden
(faults.py). Needs the `ray` extra; nothing else in symphony_core imports this package.
"""

"""Two-level scheduling: processes (procs.py) above, batched forward passes (batch.py) below."""

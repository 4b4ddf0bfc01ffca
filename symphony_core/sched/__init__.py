"""Two-level scheduling: processes and threads (process.py), level 1 (process_scheduler.py)
above, batched forward passes (batch_scheduler.py) below."""

# On the PYTHONPATH of the Ray processes that symphony starts (see symphony_core/scaleout/serve.py:
# ray_env): `import ray` imports jsonschema, whose optional "iri" format checker imports this
# package when installed — building its grammar costs ~3 s of CPU in every Ray process, enough on a
# busy machine for a node's dashboard agent to miss the raylet's fixed 15 s start-up window (the
# raylet then aborts). Ray never checks that format; failing the import makes jsonschema skip it.
raise ImportError("rfc3987_syntax is skipped in Symphony's Ray processes (slow to import, unused by Ray)")

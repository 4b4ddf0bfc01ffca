"""Symphony Lab in a notebook, one concept a file: `Lab` (lab.py: the engine, debugger, bridge
and event pump), `LabRun` (run.py: one launched LIP), the views the widgets and sidebar show
(views.py), the token tap (token_tap.py) and the kernel helpers (kernel.py). The user-facing
entry point is `symphony_lab.lab` (`from symphony_lab import lab; lab.run(...)`)."""

"""symphony_core sets OpenMP's waits before torch loads libgomp (symphony_core/openmp_waits.py): only where the
user chose none and torch is not loaded yet, with a note where it came too late, and a peer's process can be
started without them. Each case runs in a fresh interpreter: libgomp reads them once, when torch loads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from symphony_core import openmp_waits

NAMES = list(openmp_waits.WAITS)


def _fresh(code: str, **env: str) -> tuple[dict, str]:
    base = {k: v for k, v in os.environ.items() if k not in NAMES}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code + f"\nimport os, json; print(json.dumps({{k: os.environ.get(k) for k in {NAMES!r}}}))",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**base, **env},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_importing_symphony_core_first_sets_the_waits():
    seen, _ = _fresh("import symphony_core, torch; torch.ones(4).sum()")
    assert seen == openmp_waits.WAITS


def test_a_users_own_choice_is_kept():
    seen, _ = _fresh("import symphony_core", OMP_WAIT_POLICY="PASSIVE")
    assert seen == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None}


def test_too_late_after_torch_and_an_engine_says_so_once():
    code = "import torch\nfrom symphony_core import Engine\nEngine(num_pages=16)\nEngine(num_pages=16)"
    seen, err = _fresh(code)
    assert seen == {name: None for name in NAMES}  # libgomp already read its environment: nothing set
    assert err.count("torch was imported before symphony_core") == 1
    assert "OMP_WAIT_POLICY=ACTIVE GOMP_SPINCOUNT=300000" in err


def test_a_peer_is_started_without_what_symphony_set():
    code = (
        "import symphony_core, json\nfrom symphony_core import openmp_waits\n"
        "print(json.dumps(sorted(k for k in openmp_waits.without_ours() if k in openmp_waits.WAITS)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k not in NAMES},
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[0]) == []
    # a user's own setting is theirs: it stays
    assert openmp_waits.without_ours({"OMP_WAIT_POLICY": "PASSIVE"}) == {"OMP_WAIT_POLICY": "PASSIVE"}

"""Every Triton kernel through Triton's launch path, once per test session (not a test file).

``tests/conftest.py``'s session fixture ``triton_launches`` runs
``tests/helpers/triton_launch_worker.py`` once per triton (the installed one, and the folders in
``NEGMINE_TRITON_OLDER``), all at once; ``tests/negatives/ocsvm/test_triton_launch.py`` checks the
launches, and the tests that read what CUDA runs (the sm_90 PTX of the OC-SVM and split-BN kernels)
read the installed triton's compiles from it, so each kernel is compiled once per triton in a
session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import ROOT

OLDER = [p for p in os.environ.get("NEGMINE_TRITON_OLDER", "").split(":") if p]


def launch_all(sites: list[str | None], tmp: Path) -> dict[str | None, dict | str]:
    """Run the worker once per triton (the installed one: None), all at once (compiles are
    single-threaded): site -> its JSON, or the worker's error output."""
    procs = {}
    for i, site in enumerate(sites):
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site, str(ROOT)) if p)
        env["TRITON_CACHE_DIR"] = str(tmp / f"cache{i}")  # compile here, from nothing
        out = tmp / f"launches{i}.json"
        cmd = [sys.executable, str(ROOT / "tests/helpers/triton_launch_worker.py"), str(out)]
        procs[site] = (subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True), out)
    results = {}
    for site, (proc, out) in procs.items():
        _, err = proc.communicate(timeout=900)
        results[site] = json.loads(out.read_text()) if proc.returncode == 0 else err[-4000:]
    return results


def installed_ptx(launches: dict[str | None, dict | str], label: str) -> dict[str, str]:
    """Kernel name -> sm_90 PTX compiled by the installed triton for the launches of ``label``
    (a label of tests/helpers/triton_launch_worker.py)."""
    got = launches[None]
    assert isinstance(got, dict), got  # else the worker's error output
    (result,) = [r for r in got["results"] if r["label"] == label]
    return result["ptx"]

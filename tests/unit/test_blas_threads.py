"""The planning commands run NumPy on one BLAS thread (fitplan.cli.one_blas_thread): OpenBLAS's idle threads
spin for work at import, 60-110 ms of CPU per command on a 2-core machine for no BLAS work (the CPU it saves is
measured in bench/search.py --compare, not here). Each case runs in a fresh interpreter: the choice must be made
before NumPy loads."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fitplan.cli import BLAS_THREAD_VARIABLES as VARIABLES

ROOT = Path(__file__).resolve().parents[2]

# runs fitplan.cli.main on argv in a fresh interpreter; prints the BLAS variables after it, whether NumPy was
# loaded, and the process's threads (Linux: /proc/self/task; -1 elsewhere)
PROBE = """
import io, json, os, sys
if {preload}:
    import numpy
from fitplan.cli import main
code = main({argv!r}, out=io.StringIO(), err=io.StringIO())
task = "/proc/self/task"
print(json.dumps({{"code": code, "numpy": "numpy" in sys.modules,
                  "env": {{k: os.environ.get(k) for k in {variables!r}}},
                  "threads": len(os.listdir(task)) if os.path.isdir(task) else -1}}))
"""


def probe(argv, *, preload=False, env=None):
    clean = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    proc = subprocess.run([sys.executable, "-c", PROBE.format(preload=preload, argv=argv, variables=VARIABLES)],
                          capture_output=True, text=True, env={**clean, **(env or {})}, cwd=ROOT, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


SEED = ["plan", "--preset", "gpt3-175b", "--gpus", "8", "--suggest", "--top", "4"]


def test_a_planning_command_loads_numpy_with_one_blas_thread():
    got = probe(SEED)
    assert got["code"] == 1 and got["numpy"]            # the seed answer (nothing fits on 8), NumPy used
    assert got["env"] == {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if got["threads"] != -1:
        assert got["threads"] == 1                       # no BLAS worker threads: the main thread alone


def test_a_count_the_user_set_is_kept():
    got = probe(SEED, env={"OPENBLAS_NUM_THREADS": "3"})
    assert got["env"] == {"OPENBLAS_NUM_THREADS": "3", "MKL_NUM_THREADS": "1"}


@pytest.mark.parametrize("argv", [["validate", "--help"], ["calibrate", "--help"]])
def test_the_commands_that_time_torch_keep_the_machine_defaults(argv):
    got = probe(argv)
    assert got["code"] == 0 and got["env"] == {"OPENBLAS_NUM_THREADS": None, "MKL_NUM_THREADS": None}


def test_nothing_is_set_once_numpy_is_loaded():
    # too late to matter: OpenBLAS read its count when NumPy loaded
    got = probe(SEED, preload=True)
    assert got["env"] == {"OPENBLAS_NUM_THREADS": None, "MKL_NUM_THREADS": None}

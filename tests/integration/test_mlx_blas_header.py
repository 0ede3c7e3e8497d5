"""The run header says what mlx's matmuls ran on (engines/mlx_blas.py): OpenBLAS's kernels as this environment
makes it pick them (OPENBLAS_CORETYPE forces an older one), its threads per worker, and the OPENBLAS_* variables."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("scipy_openblas32")
ROOT = Path(__file__).resolve().parents[2]

SHOW = """
import json
from engines.base import EngineSpec
from engines.mlx_blas import prepare
from measure.machine.model_choice import engine_settings
c = prepare()
spec = EngineSpec("mlx", "m", threads=3, ctx=64, options={"blas": c.label, "mlx_blas_shim": c.shim,
                                                          "blas_kernel": c.kernel})
print(json.dumps(engine_settings(spec)))
"""


def _settings(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
    p = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={**clean, "PYTHONPATH": str(ROOT), **env})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_header_names_the_kernels_the_threads_and_the_variables():
    here = _settings()
    if not here.get("blas_kernel"):
        pytest.skip(f"no OpenBLAS shim here: {here['blas']}")
    assert here["blas_threads"] == 3 and here["blas_env"] == {}
    assert here["blas_kernel"] in here["blas"]
    forced = _settings(OPENBLAS_CORETYPE="Haswell")  # the variable some machines set: older kernels
    assert forced["blas_kernel"] == "Haswell" and forced["blas_env"] == {"OPENBLAS_CORETYPE": "Haswell"}
    assert "Haswell kernels" in forced["blas"]

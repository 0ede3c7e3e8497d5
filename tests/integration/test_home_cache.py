"""The tests leave the user's own cache alone (issue 55 item 5, issue 60): conftest.py points every cache and log
folder of the session, and of every process it starts, at a folder of its own, and fails the run naming any file of
~/.cache/inference-top that changed."""
import os
import subprocess
import sys
from pathlib import Path

from conftest import USER_CACHE

ROOT = Path(__file__).resolve().parents[2]

WHERE = """
from measure.machine import ceilings
from engines import gguf_file, mlx_blas
import os
print(ceilings._cache())
print(gguf_file._cache_file())
print(mlx_blas._cache_dir())
print(os.environ["INFERENCE_TOP_LOGS"])
"""


def test_every_cache_this_session_writes_is_its_own_not_the_users():
    home = Path(os.environ["INFERENCE_TOP_TEST_HOME"])
    assert home.resolve() != USER_CACHE.resolve()
    # a process the tests start finds the same folders (it inherits them)
    p = subprocess.run([sys.executable, "-c", WHERE], capture_output=True, text=True, cwd=ROOT, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr
    paths = [Path(x) for x in p.stdout.split("\n") if x.strip()]
    assert len(paths) >= 3
    for path in paths:
        assert home in path.parents, f"{path} is outside the tests' own folder {home}"
        assert USER_CACHE not in path.parents, path


def test_a_probe_saved_during_the_tests_lands_in_the_tests_cache(tmp_path):
    from measure.core.readings import Ceilings
    from measure.machine import ceilings

    c = Ceilings(machine="m", chip="c", cores=2, memory_bytes=1, swap_bytes=0, read_gbps={"1": 1.0}, busy_cores=0.0)
    before = {p: p.stat().st_mtime_ns for p in USER_CACHE.glob("*")} if USER_CACHE.is_dir() else {}
    ceilings._save(c)
    assert Path(os.environ["INFERENCE_TOP_CACHE"]) in ceilings._cache().parents
    assert ceilings._cache().exists()
    after = {p: p.stat().st_mtime_ns for p in USER_CACHE.glob("*")} if USER_CACHE.is_dir() else {}
    assert before == after

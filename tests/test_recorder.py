import json

import pytest

from measure.machine.recorder import Recorder, read_jsonl
from measure.core.records import RequestRecord


def test_cut_last_line_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, {"model": "m"})
    for i in range(3):
        rec.record(RequestRecord("run", i, "instances", "e", "m", 1, 1, 1, token_ns=[1, 2]))
    rec.close()
    text = path.read_text()
    path.write_text(text[:-20])  # a SIGKILL in the middle of a write
    with pytest.warns(UserWarning, match="last line is cut"):
        headers, records, _ = read_jsonl(path)
    assert headers[0]["model"] == "m" and [r.request_id for r in records] == [0, 1]
    assert json.loads(text.splitlines()[1])["kind"] == "request"


def test_lines_reach_the_file_at_once_and_the_disk_at_most_once_a_second(tmp_path, monkeypatch):
    """Every line is written to the file as it comes (a crash or SIGKILL of the process loses none of them: the
    kernel holds them), but fsync, which made the dashboard wait on the disk for every sample and request, runs at
    most once a second, on a timer for what is left, and at close: 200 lines in well under a second are one
    fsync for the header, one when the second is up, one at close."""
    import os
    import time

    from measure.machine import recorder as R

    syncs = []
    real = os.fsync
    monkeypatch.setattr(R.os, "fsync", lambda fd: syncs.append(time.monotonic()) or real(fd))
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, {"model": "m"})
    for i in range(200):
        rec.write({"kind": "sample", "i": i})
        assert path.read_text().count("\n") == i + 2  # in the file as soon as written
    assert len(syncs) == 1  # the header's
    time.sleep(1.3)  # the timer syncs what was written since
    assert len(syncs) == 2
    rec.write({"kind": "sample", "i": 200})
    rec.close()
    assert len(syncs) == 3 and path.read_text().count("\n") == 202
    assert syncs[1] - syncs[0] >= 0.99


def test_a_recording_killed_with_sigkill_keeps_every_line_written(tmp_path):
    """A process killed right after its last write: every line it wrote is in the file (fsync protects only
    against the machine losing power, not against the process dying)."""
    import subprocess
    import sys

    path = tmp_path / "r.jsonl"
    code = ("import os, signal, sys; sys.path.insert(0, sys.argv[2]); from measure.machine.recorder import Recorder; "
            "r = Recorder(sys.argv[1], {'model': 'm'}); [r.write({'kind': 'sample', 'i': i}) for i in range(500)]; "
            "os.kill(os.getpid(), signal.SIGKILL)")
    import pathlib

    root = str(pathlib.Path(__file__).resolve().parent.parent)
    p = subprocess.run([sys.executable, "-c", code, str(path), root])
    assert p.returncode == -9
    lines = path.read_text().splitlines()
    assert len(lines) == 501 and json.loads(lines[-1])["i"] == 499

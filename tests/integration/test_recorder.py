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
    assert headers[0].model == "m" and [r.request_id for r in records] == [0, 1]
    assert json.loads(text.splitlines()[1])["kind"] == "request"


def test_lines_reach_the_file_at_once_and_the_disk_at_most_once_a_second(tmp_path, monkeypatch):
    """Every line is written to the file as it comes, by the recorder's writer thread (flush waits for it; then
    a crash of the process loses none of them: the kernel holds them), but fsync, which made the dashboard wait on the disk for every sample and request, runs at
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
        assert rec.flush(5)
        assert path.read_text().count("\n") == i + 2  # in the file as soon as the writer took it
    assert len(syncs) == 1  # the header's
    time.sleep(1.3)  # the timer syncs what was written since
    assert len(syncs) == 2
    rec.write({"kind": "sample", "i": 200})
    rec.close()
    assert len(syncs) == 3 and path.read_text().count("\n") == 202
    assert syncs[1] - syncs[0] >= 0.99


def test_a_burst_of_records_is_one_wake_and_one_write_of_the_writer(tmp_path, monkeypatch):
    """64 records handed over together (64 streams ending at once) are written by one os.write, not 64: a wake of
    the writer thread per record took the GIL from the HTTP source's loop at the instants it was busiest
    (docs/design/client-processes.md). The order is kept, and close writes what it holds at once."""
    import os

    from measure.machine import recorder as R

    writes = []
    real = os.write
    monkeypatch.setattr(R.os, "write", lambda fd, data: writes.append(bytes(data).count(b"\n")) or real(fd, data))
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, {"model": "m"})
    writes.clear()  # (the header's)
    for i in range(64):
        rec.record(RequestRecord(run_id="r", request_id=i, mode="http", engine="e", model="m", model_bytes=0, k=1, b=64,
                                 token_ns=[i, i + 1]))
    rec.close()
    assert sum(writes) == 64 and len(writes) <= 2, writes  # (the per-line writer made 64)
    assert [r.request_id for r in read_jsonl(path).records] == list(range(64))


def test_a_recording_killed_with_sigkill_keeps_every_line_written(tmp_path):
    """A process killed right after its last line was flushed: every line it wrote is in the file (fsync protects
    only against the machine losing power, not against the process dying)."""
    import subprocess
    import sys

    path = tmp_path / "r.jsonl"
    code = ("import os, signal, sys; sys.path.insert(0, sys.argv[2]); from measure.machine.recorder import Recorder; "
            "r = Recorder(sys.argv[1], {'model': 'm'}); [r.write({'kind': 'sample', 'i': i}) for i in range(500)]; "
            "r.flush(); os.kill(os.getpid(), signal.SIGKILL)")
    import pathlib

    root = str(pathlib.Path(__file__).resolve().parents[2])
    p = subprocess.run([sys.executable, "-c", code, str(path), root])
    assert p.returncode == -9
    lines = path.read_text().splitlines()
    assert len(lines) == 501 and json.loads(lines[-1])["i"] == 499


def test_a_program_that_ends_without_close_still_writes_every_line(tmp_path):
    """The writer thread's queue is drained at exit (atexit): nothing handed over is lost by a normal end."""
    import pathlib
    import subprocess
    import sys

    path = tmp_path / "r.jsonl"
    code = ("import sys; sys.path.insert(0, sys.argv[2]); from measure.machine.recorder import Recorder; "
            "r = Recorder(sys.argv[1], {'model': 'm'}); [r.write({'kind': 'sample', 'i': i}) for i in range(300)]")
    root = str(pathlib.Path(__file__).resolve().parents[2])
    assert subprocess.run([sys.executable, "-c", code, str(path), root]).returncode == 0
    assert len(path.read_text().splitlines()) == 301


def test_a_line_that_is_not_json_is_said_and_the_rest_are_written(tmp_path):
    said = []
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, {"model": "m"}, on_error=said.append)
    rec.write({"kind": "sample", "i": 0})
    rec.write({"kind": "sample", "bad": object()})
    rec.write({"kind": "sample", "i": 2})
    rec.close()
    rec.close()  # idempotent
    rec.write({"kind": "sample", "i": 3})  # after close: dropped, no error
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x.get("i") for x in lines[1:]] == [0, 2] and rec.lost == 1
    assert len(said) == 1 and "cannot serialise" in said[0]


def test_the_write_runs_on_the_writer_thread_never_on_the_fleet_io_thread_nor_the_http_loop(tmp_path, monkeypatch):
    """Issue 32: a record's serialisation and write cost (~40 µs for 256 tokens, the fsync lock) is off the thread
    that dispatches the next request. Each serialisation notes the thread it ran on."""
    import threading

    import presets
    from engines.base import EngineSpec
    from engines.null_server import Behaviour, NullServer
    from measure.machine import recorder as R
    from measure.core.records import RunMeta
    from measure.core.workload import ClosedLoop, Load
    from measure.sources.fleet import Fleet
    from measure.sources.http import HttpSource

    threads: list[tuple[int, str]] = []
    real = R._line
    monkeypatch.setattr(R, "_line", lambda obj: threads.append((threading.get_ident(),
                                                                threading.current_thread().name)) or real(obj))
    monkeypatch.setenv("INFERENCE_TOP_LOGS", str(tmp_path / "logs"))
    wl = presets.workload("synthetic:16")
    meta = RunMeta("null", "none", 0, simulated=True)
    rec = Recorder(tmp_path / "r.jsonl", {"model": "m"})
    hot: dict[str, int] = {}

    def on_record(r):  # runs on the source's own thread: the one that dispatches the next request
        hot.setdefault(threading.current_thread().name, threading.get_ident())
        rec.record(r)

    fleet = Fleet(EngineSpec("null", "", options={"ttft_s": 0.002, "itl_s": 0.001}), meta, k=1, threads=1,
                  on_record=on_record, events=False)
    try:
        fleet.start(timeout=60)
        assert len(fleet.run_requests(Load(wl, ClosedLoop(2, total=6), 4), timeout=60)) == 6
    finally:
        fleet.close()
    with NullServer(Behaviour(ttft_ms=2, itl_ms=1)) as srv:
        src = HttpSource(srv.url, meta, b=2, events=False, on_record=on_record)
        try:
            src.start()
            assert len(src.run_requests(Load(wl, ClosedLoop(2, total=6), 4), timeout=60)) == 6
        finally:
            src.close()
    rec.close()
    assert set(hot) == {"fleet-io", "http-source"}  # the records came from the two hot threads
    written = threads[1:]  # after the header, written at once by the thread that made the recorder
    assert len(written) == 12 and {name for _, name in written} == {"recorder-writer"}
    assert not {ident for ident, _ in written} & set(hot.values())
    assert {ident for ident, _ in written} == {rec.writer_ident}
    assert len(path_lines := (tmp_path / "r.jsonl").read_text().splitlines()) == 13, path_lines

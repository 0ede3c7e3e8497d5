"""Issue 17 (7): fuzzed inputs get one clear error, never a traceback. Property-based (hypothesis)."""
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.base import EngineError
from measure.control.bench.runs import ReportError, load_run
from measure.sources.replay import Recording, RecordingError

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def gguf_head(model):
    with open(model.path, "rb") as fh:
        return fh.read(65536)


@FUZZ
@given(st.data())
def test_gguf_truncated_or_garbled_is_one_engine_error(gguf_head, tmp_path_factory, data):
    """The embedded GGUF's first 64 kB cut at any length, or with random bytes spliced in: EngineError (one line
    saying what is wrong), never another exception."""
    from engines.gguf_file import inspect_gguf

    cut = data.draw(st.integers(0, len(gguf_head)))
    blob = bytearray(gguf_head[:cut])
    if data.draw(st.booleans()) and blob:
        at = data.draw(st.integers(0, len(blob) - 1))
        blob[at:at + 8] = data.draw(st.binary(min_size=1, max_size=8))
    d = tmp_path_factory.mktemp("gguf")
    before = os.environ.get("INFERENCE_TOP_CACHE")
    os.environ["INFERENCE_TOP_CACHE"] = str(d)  # hypothesis draws inside one test: set and put back by hand
    try:
        p = d / "m.gguf"
        p.write_bytes(bytes(blob))
        with pytest.raises(EngineError) as exc:
            inspect_gguf(p)
    finally:
        if before is None:
            os.environ.pop("INFERENCE_TOP_CACHE", None)
        else:
            os.environ["INFERENCE_TOP_CACHE"] = before
    assert "\n" not in str(exc.value)


@pytest.fixture(scope="module")
def recording_lines(tmp_path_factory):
    """A real (simulated) dashboard recording, as lines."""
    from dataclasses import asdict

    from measure.machine.recorder import Recorder
    from sim import run_for, sim_controller

    path = tmp_path_factory.mktemp("rec") / "s.jsonl"
    c, fleet, clock = sim_controller(k=1)
    c.recorder = Recorder(path, {"engine": "llama.cpp", "model": "m", "model_bytes": 1, "simulated": True,
                                 "settings": asdict(c.settings)}, fsync=False)
    run_for(c, fleet, clock, 6)
    c.set_k(2)
    run_for(c, fleet, clock, 6)
    c.recorder.close()
    return path.read_text().splitlines()


def garble(data, lines):
    lines = list(lines)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        how = data.draw(st.sampled_from(["cut", "swap", "drop", "junk", "retype", "dup"]))
        if how == "cut":
            lines[i] = lines[i][: data.draw(st.integers(0, max(0, len(lines[i]) - 1)))]
        elif how == "swap":
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif how == "drop" and len(lines) > 1:
            del lines[i]
        elif how == "junk":
            lines[i] = data.draw(st.text(max_size=40))
        elif how == "retype":
            try:
                obj = json.loads(lines[i])
            except ValueError:
                obj = None
            if isinstance(obj, dict) and obj:
                key = data.draw(st.sampled_from(sorted(obj)))
                obj[key] = data.draw(st.one_of(st.none(), st.text(max_size=5), st.integers(), st.lists(st.text())))
                lines[i] = json.dumps(obj)
        else:
            lines.insert(i, lines[i])
    return lines


@FUZZ
@given(st.data())
def test_garbled_recordings_replay_or_refuse_in_one_line(recording_lines, tmp_path_factory, data):
    """Cut, reordered, dropped, duplicated, junk and retyped lines: the replay loads and plays to the end, or
    refuses with RecordingError; the report likewise, or ReportError."""
    from measure.control.live.replay import ReplayController

    p = tmp_path_factory.mktemp("g") / "g.jsonl"
    p.write_text("\n".join(garble(data, recording_lines)) + "\n")
    try:
        rec = Recording.load(p)
    except RecordingError as exc:
        assert "\n" not in str(exc)
    else:
        try:
            r = ReplayController(rec)
            r.advance_to(rec.end_ns)
        except RecordingError:
            pass
    try:
        load_run(p)
    except ReportError as exc:
        assert "\n" not in str(exc)


@FUZZ
@given(k=st.one_of(st.integers(-5, 5000), st.text(max_size=6)), ctx=st.one_of(st.integers(-10, 10**7), st.text(max_size=6)),
       max_tokens=st.one_of(st.integers(-5, 10**6), st.text(max_size=4)),
       rate=st.one_of(st.floats(allow_nan=True), st.text(max_size=4)),
       workload=st.sampled_from(["default", "synthetic:0", "synthetic:99999", "nope", "synthetic:x"]))
def test_cli_values_are_refused_in_one_line_or_accepted(k, ctx, max_tokens, rate, workload):
    """Any value of --k, --ctx, --max-tokens, --rate, --workload: the parser and the run plan either accept it
    or stop with exit 2 and one line — never a traceback, nothing started."""
    from measure.control.builder import make_plan
    from measure.control.plan import StartError
    from tui.options import plan_options
    from tui.options import build_parser

    dash, bench = build_parser()
    argv = ["--k", str(k), "--ctx", str(ctx), "--max-tokens", str(max_tokens), "--rate", str(rate),
            "--workload", workload]
    for parser in (dash, bench):
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:
            assert exc.code == 2
            continue
        try:
            make_plan(plan_options(args), default_max_tokens=16, progress=lambda m: None)
        except StartError as exc:
            assert "\n" not in str(exc)


def _retyped(lines, kind, key, value):
    """The recording with the first line of `kind` (a request or a sample) given `key` = value."""
    out, done = [], False
    for ln in lines:
        obj = json.loads(ln)
        if not done and obj.get("kind", "request") == kind and (kind != "request" or obj.get("t_first_token_ns")):
            obj[key], done = value, True
        out.append(json.dumps(obj))
    assert done
    return out


@pytest.mark.parametrize("kind,key,value", [
    ("request", "t_started_ns", None),  # a first token but no start: ttft_engine subtracted None (TypeError)
    ("request", "reasoning_tokens", "x"),
    ("sample", "k", ["2"]),  # a level key that is a list: the report's level periods hashed it (TypeError)
    ("sample", "b", None),
])
def test_a_retyped_line_is_refused_in_one_line(recording_lines, tmp_path, kind, key, value):
    """Cases hypothesis found (the garbled-recordings test above, on a fresh clone): each is refused by the
    replay with RecordingError and by the report with ReportError, one line naming the line, never a
    TypeError from deep inside a metric."""
    from measure.control.live.replay import ReplayController

    p = tmp_path / "r.jsonl"
    p.write_text("\n".join(_retyped(recording_lines, kind, key, value)) + "\n")
    with pytest.raises(RecordingError) as exc:
        ReplayController(Recording.load(p)).advance_to(Recording.load(p).end_ns)
    assert "\n" not in str(exc.value)
    with pytest.raises(ReportError) as exc2:
        load_run(p)
    assert "\n" not in str(exc2.value)

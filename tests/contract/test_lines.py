"""The line schemas (measure/core/lines.py): every line kind written, read back and equal; the files main wrote
before the schemas (tests/data/written_by_main) still load; a bad line is refused in one line naming its field."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from measure.core.lines import (ClockCheck, Endpoint, EventLine, LineError, RunHeader, Sample, StepLine, StepRow,
                                UnknownLine, check, check_line, event_line, line_of, request_of, sample_line,
                                step_row_line, to_line)
from measure.machine.recorder import Recorder, encoded, read_header, read_jsonl, read_lines
from measure.core.records import RequestRecord

MAIN = Path(__file__).parents[1] / "data" / "written_by_main"

HEADER = {"engine": "llama.cpp", "model": "m", "model_bytes": 1000, "bandwidth_gbps": 100.0, "chip": None,
          "settings": {"window_s": 5.0}, "environment": {"os": "Linux"}, "command": "dashboard"}
REQUEST = RequestRecord("run", 7, "http", "e", "m", 1000, 1, 2, worker=0, prompt_tokens=None, output_tokens=2,
                        t_scheduled_ns=1, t_submitted_ns=2, t_started_ns=3, t_first_token_ns=4, t_done_ns=6,
                        token_ns=[4, 5], finish_reason="length", extra={"counted": "chunks"})
SAMPLE = Sample(t_ns=10, t=0.5, k=1, b=2, mode="http", paused=False, state="steady", users=2,
                system={"mem_used": 5}, workers=[{"wid": 0}], procs={"12": [100, 1.5]}, agg_tps=3.0,
                tpot_p50=None, bw_gbps=0.5, concurrency=1.9)
ROW = StepRow("K=1 B=2 http", "http", 1, 2, True, "settled", 1.99, 15.6, 6.66, 0.15, 0.05, 0.053, 34, None, None,
              None, 599281664, 0.0067, None, "not measured here")


def written(tmp_path):
    """A file with one line of every kind, written as the dashboard writes them."""
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, HEADER, fsync=False)
    rec.record(REQUEST)
    rec.event(9, "load started", type="load_started")
    rec.write(sample_line(SAMPLE))
    rec.write(step_row_line(ROW, 11))
    rec.close()
    return path


def test_every_line_kind_written_reads_back_equal(tmp_path):
    path = written(tmp_path)
    headers, records, other = read_jsonl(path)
    head = RunHeader.of(HEADER)
    assert headers == [RunHeader.of(head.to_line())]
    assert headers[0].to_line() == head.to_line() == dict(HEADER, kind="header")
    assert (headers[0].engine, headers[0].model_bytes, headers[0].settings) == ("llama.cpp", 1000, {"window_s": 5.0})
    assert records == [REQUEST]
    assert other == [EventLine(t_ns=9, text="load started", type="load_started"), SAMPLE, StepLine(11, ROW)]
    assert read_jsonl(path).samples == [SAMPLE] and read_jsonl(path).steps == [StepLine(11, ROW)]


def test_the_bytes_are_the_dict_literals_ones(tmp_path):
    """Key order and float formatting as the writers' dict literals had them (compact separators, repr floats)."""
    lines = written(tmp_path).read_text().splitlines()
    assert lines[0] == json.dumps(dict(HEADER, kind="header"), separators=(",", ":"))
    assert lines[2] == '{"type":"load_started","kind":"event","t_ns":9,"text":"load started"}'
    assert lines[3] == ('{"kind":"sample","t_ns":10,"t":0.5,"k":1,"b":2,"mode":"http","paused":false,"state":"steady",'
                        '"users":2,"system":{"mem_used":5},"workers":[{"wid":0}],"procs":{"12":[100,1.5]},'
                        '"agg_tps":3.0,"tpot_p50":null,"bw_gbps":0.5,"concurrency":1.9}')
    assert lines[4].startswith('{"kind":"step_row","t_ns":11,"level":"K=1 B=2 http","mode":"http","k":1,"b":2,')
    # our own processes' CPU, where read, after the workers' (an older sample without it: its bytes unchanged)
    assert json.dumps(sample_line(replace(SAMPLE, ours_cpu=12.5)), separators=(",", ":")) == lines[3].replace(
        '"procs":{"12":[100,1.5]},', '"procs":{"12":[100,1.5]},"ours_cpu":12.5,')
    assert lines[4].endswith('"wall":"not measured here","watts":null,"usd_per_mtok":null,"best":false}')


def test_the_recording_main_wrote_loads_and_replays():
    from measure.control.live.replay import Recording, ReplayController
    from measure.control.bench.runs import load_run

    path = MAIN / "recording.jsonl"
    lines = read_jsonl(path)
    assert len(lines.headers) == 1 and len(lines.records) == 41
    assert (len(lines.samples), len(lines.events), len(lines.steps)) == (22, 6, 1) and len(lines.other) == 29
    h = lines.headers[0]
    assert (h.command, h.engine, h.model, h.model_bytes, h.max_tokens) == ("dashboard", "http", None, 1_000_000, 4)
    assert h.endpoints == [Endpoint(url=h.url, chip=None, label="127.0.0.1:37083", bandwidth_gbps=None)]
    assert (h.ignore_eos, h.workload, h.arrivals, h.environment and h.environment.os) == (
        True, "default", None, "Linux 6.18.44-fc-v669")
    assert lines.steps[0].row.requests == 34
    assert [e.type for e in lines.events].count("level") >= 1
    rec = Recording.load(path)
    r = ReplayController(rec)
    r.advance_to(rec.end_ns)
    assert r.snapshot().b == 1  # the recording ends at B=1
    run = load_run(path)
    assert {(c.k, c.b) for c in run.cells} == {(1, 2), (1, 1)}


def test_the_bench_output_main_wrote_loads():
    from measure.control.bench.runs import load_run

    headers, records, other = read_jsonl(MAIN / "bench" / "records.jsonl")
    assert headers[0].command == "bench" and len(records) == 6 and other == []
    assert (headers[0].argv or [])[:2] == ["--engine", "http"] and headers[0].requests == 3
    assert read_header(MAIN / "bench" / "records.jsonl") == headers[0]
    run = load_run(MAIN / "bench")
    assert [(c.k, c.b, c.ok) for c in run.cells] == [(1, 1, True), (1, 2, True)]


@pytest.mark.parametrize("kind,key,value,says", [
    ("request", "prompt_tokens", "x", "whose prompt_tokens is 'x', not int | None"),
    ("request", "token_ns", [1, 2.5], "whose token_ns is [1, 2.5], not list[int]"),
    ("request", "simulated", 1, "whose simulated is 1, not bool"),
    ("sample", "k", ["2"], "whose k is ['2'], not int"),
    ("sample", "paused", "no", "whose paused is 'no', not bool"),
    ("sample", "procs", {"12": ["a"]}, "whose procs is {'12': ['a']}, not dict[str, list[float]]"),
    ("header", "model_bytes", "1G", "whose model_bytes is '1G', not int | None"),
    ("header", "settings", [], "whose settings is [], not dict[str, Any]"),
    ("event", "t_ns", 1.5, "whose t_ns is 1.5, not int"),
    ("step_row", "requests", None, "whose requests is None, not int"),
    ("step_row", "t_ns", "now", "whose t_ns is 'now', not int"),
])
def test_a_bad_line_is_refused_in_one_line_naming_its_field(tmp_path, kind, key, value, says):
    path = written(tmp_path)
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    (i,) = [i for i, o in enumerate(lines) if o["kind"] == kind]
    lines[i][key] = value
    path.write_text("".join(json.dumps(o) + "\n" for o in lines))
    with pytest.raises(LineError) as exc:
        read_jsonl(path)
    assert str(exc.value) == f"{path}:{i + 1}: a {kind} line {says}: not one inference-top wrote"


@pytest.mark.parametrize("kind,missing", [("sample", "system"), ("sample", "t_ns"), ("request", "run_id"),
                                          ("step_row", "wall"), ("event", "t_ns")])
def test_a_line_without_a_required_field_is_refused_naming_it(kind, missing):
    line = {"request": REQUEST.to_dict(), "sample": to_line(SAMPLE), "step_row": step_row_line(ROW, 1),
            "event": event_line(1, "x", {})}[kind]
    del line[missing]
    with pytest.raises(LineError, match=f"^here: a {kind} line without its {missing}: not one inference-top wrote$"):
        request_of(line, "here") if kind == "request" else check_line(line, "here")


def test_unknown_keys_pass_and_defaults_are_what_readers_assumed():
    """A newer writer's field is allowed (kept in the dict, dropped by the record), as every reader did; a sample
    from before K, B and the rest were written has the values the readers took for them."""
    assert check_line({"kind": "sample", "t_ns": 1, "system": {}, "new": [1]}, "here") == "sample"
    assert check_line({"kind": "a kind from later", "x": 1}, "here") == "a kind from later"
    assert request_of(dict(REQUEST.to_dict(), new=1), "here") == REQUEST
    old = Sample(t_ns=1, system={})
    assert (old.k, old.b, old.mode, old.paused, old.t, old.users) == (1, 1, "instances", False, 0.0, None)


def test_a_first_token_before_any_start_is_refused():
    line = dict(REQUEST.to_dict(), t_started_ns=None)
    with pytest.raises(LineError, match="t_started_ns is null but t_first_token_ns is set"):
        request_of(line, "here")


def test_the_check_tells_ints_floats_and_bools_apart():
    """JSON has one number type: an int is a float, a bool is neither an int nor a float."""
    check(Sample, {"t_ns": 1, "t": 2, "system": {}}, "here", "sample")  # t: float, 2 is one
    for field, value in (("t_ns", True), ("t", False), ("t_ns", 1.0)):
        with pytest.raises(LineError, match=f"whose {field} is"):
            check(Sample, {"t_ns": 1, "system": {}, field: value}, "here", "sample")


def test_main_s_lines_rewritten_through_the_schemas_are_the_same_bytes():
    """Every sample, step_row, event and header line main wrote, read into its dataclass and written again the
    way the writers now write it: byte for byte the line main wrote (key order, float formatting)."""
    def dumps(obj):
        return json.dumps(obj, separators=(",", ":"))

    seen = set()
    for line in (MAIN / "recording.jsonl").read_text().splitlines():
        obj = json.loads(line)
        kind = obj.get("kind", "request")
        if kind == "sample":
            again = sample_line(Sample(**obj))
        elif kind == "step_row":
            again = step_row_line(StepRow(**{k: v for k, v in obj.items() if k not in ("kind", "t_ns")}), obj["t_ns"])
        elif kind == "event":
            again = event_line(obj["t_ns"], obj["text"], obj)
        elif kind == "header":
            again = RunHeader.of({k: v for k, v in obj.items() if k != "kind"}).to_line()
        else:
            again = RequestRecord.from_dict(obj).to_dict()
        assert dumps(again) == line
        seen.add(kind)
    assert seen == {"header", "request", "event", "sample", "step_row"}


@pytest.mark.parametrize("name", ["recording.jsonl", "bench/records.jsonl"])
def test_main_s_files_read_typed_and_written_again_are_the_same_bytes(tmp_path, name):
    """A recording and a bench records.jsonl written by main (tests/data/written_by_main), read into their
    dataclasses (read_lines: every line, in order) and written again as the recorder writes: the file's bytes."""
    path = MAIN / name
    lines = read_lines(path)
    assert {type(x).__name__ for x in lines} >= ({"RunHeader", "RequestRecord", "EventLine", "Sample", "StepLine"}
                                                 if name == "recording.jsonl" else {"RunHeader", "RequestRecord"})
    assert b"".join(encoded(x) for x in lines) == path.read_bytes()
    # through a Recorder too: the header first, then every line as the dashboard and the sweep hand them over
    again = tmp_path / "again.jsonl"
    rec = Recorder(again, lines[0].to_line(), fsync=False)
    for x in lines[1:]:
        rec.record(x) if isinstance(x, RequestRecord) else rec.write(sample_line(x) if isinstance(x, Sample)
                                                                     else x.to_line())
    rec.close()
    assert again.read_bytes() == path.read_bytes()


def test_an_event_keeps_its_type_level_and_a_clients_outcome_in_order():
    outcome = {"type": "client", "client": 1, "state": "done", "why": None, "sent": 3, "requests": 3, "records": 3}
    line = event_line(5, "client 1/2 done", outcome)
    assert list(line) == ["type", "client", "state", "why", "sent", "requests", "records", "kind", "t_ns", "text"]
    ev = line_of(line, "here")
    assert (ev.type, ev.level, ev.more["state"], ev.to_line()) == ("client", None, "done", line)
    log = line_of(event_line(6, "slow", {"level": "warn"}), "here")
    assert (log.type, log.level, log.more) == (None, "warn", {})


def test_a_header_s_nested_fields_are_typed_and_checked():
    h = RunHeader.of(dict(HEADER, clock_check={"method": "Date", "offset_s": 0.01, "bound_s": 0.002, "why": None,
                                               "samples": 3}, segment=[1, 2], endpoints=[{"url": "u", "chip": None,
                                                                                          "label": "a"}]))
    assert h.clock_check == ClockCheck(offset_s=0.01, bound_s=0.002, samples=3, why=None)
    assert h.segment == [1, 2] and h.endpoints == [Endpoint(url="u", label="a")]
    assert h.to_line()["clock_check"]["method"] == "Date"  # the keys the schema does not name are kept as written
    with pytest.raises(LineError, match="whose clock_check is {'offset_s': '0.1'}, not ClockCheck | None"):
        RunHeader.of(dict(HEADER, clock_check={"offset_s": "0.1"}))
    with pytest.raises(LineError, match="whose endpoints is"):
        RunHeader.of(dict(HEADER, endpoints=[{"bandwidth_gbps": "fast"}]))


def test_a_kind_from_later_is_kept_as_written():
    line = {"kind": "a kind from later", "x": [1]}
    assert line_of(line, "here") == UnknownLine("a kind from later", line)
    assert encoded(line_of(line, "here")) == b'{"kind":"a kind from later","x":[1]}\n'


def test_main_s_find_output_reads_its_knee_typed_and_rewrites_it_byte_for_byte(tmp_path):
    """bench --find's knee.json, written by main before it had a dataclass (tests/data/written_by_main/find):
    read into KneeResult (the run's own field, not a header key), written again: the file's bytes; the report
    marks the knee it names; its records.jsonl rewrites byte for byte too."""
    from measure.control.bench import report as R
    from measure.control.bench.knee import KneeResult, KneeStep
    from measure.control.bench.runs import load_run

    folder = MAIN / "find"
    knee = KneeResult.read(folder / "knee.json")
    assert (knee.find, knee.knee, knee.first_out, knee.target) == ("users", 2, 3, 0.9)
    assert knee.steps[0] == KneeStep(1, True, None, "100% of requests within the SLO", peak_users=1)
    knee.write(tmp_path / "knee.json")
    assert (tmp_path / "knee.json").read_bytes() == (folder / "knee.json").read_bytes()
    run = load_run(folder)
    assert run.knee == knee and "_knee" not in run.header.line
    x, label = R._knee(run, run.cells)
    assert label == "2 (users)" and x == next(c.achieved_concurrency for c in run.cells if c.knee.level == 2)
    lines = read_lines(folder / "records.jsonl")
    assert b"".join(encoded(x) for x in lines) == (folder / "records.jsonl").read_bytes()


def test_a_knee_json_bench_find_did_not_write_is_refused_naming_its_field(tmp_path):
    from measure.control.bench.knee import KneeResult
    from measure.control.bench.runs import load_run

    bad = json.loads((MAIN / "find" / "knee.json").read_text())
    bad["steps"][1]["within"] = "yes"
    (tmp_path / "knee.json").write_text(json.dumps(bad))
    with pytest.raises(LineError, match="whose steps is"):
        KneeResult.read(tmp_path / "knee.json")
    for f in ("records.jsonl", "summary.json"):
        (tmp_path / f).write_bytes((MAIN / "find" / f).read_bytes())
    assert load_run(tmp_path).knee is None  # the report then marks the knee from the cells' attainment

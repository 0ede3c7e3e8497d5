"""tune.json's records (measure/control/tune/record.py): a tune.json written by main before them
(tests/data/written_by_main/tune) reads back and rewrites byte for byte; the same planted tune run again writes
the same bytes main wrote; keys this version does not name are kept; a tune.json that is not one is refused in
one line."""
import dataclasses
import json
import random
from pathlib import Path

import pytest

import presets
from measure.control.tune import Candidate, Predicted, Settings, Tune, TuneError, TuneResult, candidates, load_done
from measure.control.tune.record import Knee, Record, RecordError, Trial, write_result

MAIN = Path(__file__).parents[1] / "data" / "written_by_main" / "tune"


def _records(r):
    """Every record in r, nested ones included."""
    yield r
    for f in dataclasses.fields(r):
        v = getattr(r, f.name)
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, Record):
                yield from _records(x)


@pytest.mark.parametrize("name", ["cli.json", "planted.json"])
def test_a_tune_json_written_by_main_reads_back_and_rewrites_byte_for_byte(name, tmp_path):
    text = (MAIN / name).read_text()
    res = TuneResult.from_json(json.loads(text))
    assert all(not r.extra for r in _records(res))  # every key main wrote is named by a record's key table
    assert write_result(tmp_path, res).read_text() == text
    assert res.winner is not None and res.winner.trial.ok and res.candidates


def test_main_s_files_are_read_as_typed_records():
    cli = TuneResult.from_json(json.loads((MAIN / "cli.json").read_text()))
    assert cli.machine and cli.settings.users == 2 and cli.settings.cost == "rented at $0.5/h"
    knee = cli.winner.knee
    assert isinstance(knee, Knee) and knee.levels and knee.records.endswith("-knee.jsonl")
    assert all(t.usd_per_mtok is not None for c in cli.candidates for t in c.trials if t.ok)
    planted = TuneResult.from_json(json.loads((MAIN / "planted.json").read_text()))
    fc = planted.final_compare
    assert fc is not None and fc.interval is not None and fc.runs and fc.runs[0].side in ("A", "B")
    assert {c.status for c in planted.candidates} >= {"measured", "crashed", "refused", "pruned"}
    assert planted.winner.knee.levels is None and planted.winner.knee.sentence.startswith("the knee was not")
    assert planted.within_noise == [planted.winner.key, fc.b if fc.a == planted.winner.key else fc.a]


# ---- the planted tune of planted.py.txt, run by this version ---------------------------------------------------
ONE = Candidate("llama", "instances", 1, 1, 2)
TWO = Candidate("llama", "instances", 2, 1, 1)
CRASH = Candidate("llama", "batch", 1, 2, 2)


def _planted_result():
    """tests/data/written_by_main/tune/planted.py.txt, run against this version (a planted measure: SIMULATED)."""
    s = Settings(engines=["llama", "llama-server"], users=2, requests=4, max_tokens=8, ctx=512, budget_s=900.0,
                 slo=presets.slo("ttft=300ms,tpot=12ms"), workload=presets.workload("synthetic:8"),
                 memory_budget=8 << 30, final_compare=True)
    rng, clock = random.Random(7), [0.0]

    def measure(c, n, timeout, tag=""):
        clock[0] += 5
        rel = f"runs/{c.slug}-n{n}{tag}.jsonl"
        if c.shape == CRASH.shape:
            return Trial(requests=n, status="crashed", reason="did not start: the worker exited (SIGSEGV) while it "
                         "loaded", seconds=1.25, records=rel)
        g = {ONE.key: 10.0, TWO.key: 10.0}.get(c.key, 3.0 + c.b) * (1 + rng.gauss(0, 0.03))
        return Trial(requests=n, status="ok", seconds=4.5, records=rel, goodput_tps=g, goodput_rps=g / 8,
                     slo_attainment=1.0, output_throughput=g * 1.1, p99_ttft_ms=120.0 + c.k, median_ttft_ms=80.0,
                     median_tpot_ms=9.5, completed=n, errors=0, achieved_concurrency=1.9, binding="cores",
                     load_s=3.5)

    def predict(c):
        if c.mode == "servers":
            return None
        tps = 8.0 * c.concurrency / (1 if c.engine == "llama" else 2)
        return Predicted(tps, 0.1 * c.k, 0.011, tps if c.b < 4 else 0.0, "bandwidth")

    def refuse(c):
        return ("refused: 9.1 GB needed, the budget is 8.6 GB" if c.b >= 2 and c.mode == "slots" and c.threads == 1
                else None)

    tune = Tune(s, candidates(s.engines, 2, 2), measure, predict, refuse, say=lambda m: None, clock=lambda: clock[0])
    tune.search()
    res = tune.result("/models/m.gguf", s.ctx, "Apple M2", "llama-server")
    knee = Knee(sentence="the knee was not searched: 12 s of the budget left (tune --resume OUT --find rate with more)")
    return s, dataclasses.replace(res, winner=dataclasses.replace(res.winner, knee=knee))


def test_the_planted_tune_writes_what_main_wrote(tmp_path):
    _, res = _planted_result()
    assert write_result(tmp_path, res).read_bytes() == (MAIN / "planted.json").read_bytes()


def test_resume_reads_main_s_runs_back(tmp_path):
    s, _ = _planted_result()
    done, spent = load_done(MAIN / "planted.json", s, "/models/m.gguf")
    assert spent > 0 and all(isinstance(t, Trial) for t in done.values())
    assert done[(ONE.key, s.requests)].ok and done[(CRASH.key, s.requests)].status == "crashed"


def test_keys_this_version_does_not_name_are_kept_after_the_rest(tmp_path):
    d = json.loads((MAIN / "planted.json").read_text())
    d["from_a_later_version"] = {"x": 1}
    d["candidates"][0]["trials"][0]["p95_ttft_ms"] = 99.0
    res = TuneResult.from_json(d)
    assert res.extra == {"from_a_later_version": {"x": 1}}
    back = json.loads(write_result(tmp_path, res).read_text())
    assert list(back)[-1] == "from_a_later_version" and list(back["candidates"][0]["trials"][0])[-1] == "p95_ttft_ms"
    assert back == d


@pytest.mark.parametrize("edit, says", [
    (lambda d: d.update(candidates={"a": 1}), "candidates: a list was expected, not dict"),
    (lambda d: d["settings"].pop("users"), "SettingsRecord"),
    (lambda d: d["candidates"][0]["trials"].append(7), "Trial: an object was expected, not int"),
])
def test_a_tune_json_that_is_not_one_is_refused_in_one_line(edit, says, tmp_path):
    d = json.loads((MAIN / "planted.json").read_text())
    edit(d)
    with pytest.raises(RecordError, match=says):
        TuneResult.from_json(d)
    (tmp_path / "tune.json").write_text(json.dumps(d))
    s, _ = _planted_result()
    with pytest.raises(TuneError, match="is not a tune.json this version reads") as e:
        load_done(tmp_path, s, "/models/m.gguf")
    assert "\n" not in str(e.value)


def test_report_draws_the_front_of_main_s_tune_json(tmp_path):
    """`report OUT` reads tune.json through the same records: main's real tune is drawn and listed."""
    pytest.importorskip("matplotlib")
    from measure.control.reports import report

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "tune.json").write_text((MAIN / "cli.json").read_text())
    res = TuneResult.from_json(json.loads((MAIN / "cli.json").read_text()))
    files, md, _ = report([str(tmp_path / "t")], tmp_path / "r")
    text = md.read_text()
    assert files[0].stat().st_size > 0 and f"Winner: **{res.winner.key}**" in text
    assert res.winner.serve_command in text and text.count("| llama ") + text.count("| ★ llama ") == len(
        [c for c in res.candidates if c.last])

"""The bench cell's JSON, kept exactly: records from real runs (tests/data/cells: null servers over HTTP, the
embedded model in instances and batch mode, two --find searches) go through the sweep, the knee, the report
and `report --combine` again, and every summary.json, summary.csv, bench table and report.md must come out
as it did when tests/data/cells/golden.json was written (before the cell became a dataclass).

    python tests/contract/test_cells.py --write      (re-records golden.json: only for a change meant to alter them)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from measure.control.bench.knee import KneeResult
from measure.core.lines import RunHeader, Sample

DATA = Path(__file__).parents[1] / "data" / "cells"
GOLDEN = DATA / "golden.json"
RUNS = ("http2", "httpeos", "httpctx", "local", "batch")
KV_BYTES = 1000.0  # the batch run's KV bytes per token, fixed here (its model's real figure does not matter)


def _j(c) -> dict:
    """A cell as its JSON holds it (tuples become lists)."""
    return json.loads(json.dumps(c.to_json() if hasattr(c, "to_json") else dict(c)))


def _read(name: str):
    from measure.machine.recorder import read_jsonl

    headers, records, _ = read_jsonl(DATA / f"{name}.jsonl")
    return headers[0].line, records  # the header as written: the harness builds its sweep from its keys


class FixedPower:
    """A power meter that reads the --watts figure and nothing else (the machine's RAPL would vary)."""

    def __init__(self, fixed_watts=None, *a, **kw):
        self.fixed, self.n = fixed_watts, 0
        self.source = f"--watts {fixed_watts:g}" if fixed_watts else "none"

    def sample(self):
        self.n += 1
        return None if self.n == 1 or not self.fixed else self.fixed


class FixedRoofline:
    """A roofline that predicts the same level everywhere (the machine's probe would vary)."""

    attainable_gbps = 40.0
    work = None  # no model of the work: the bandwidth product keeps W = the model file, as these cells were written

    def level(self, mode, k, b, threads, prompt_tokens, output_tokens):
        if mode == "http":
            return None
        return SimpleNamespace(tpot_s=0.02 * k, aggregate_tps=50.0 * b, binding="bandwidth", oversubscribed=False)


class Replay:
    """A load source that gives back a recorded run's records in the order they were recorded: each load
    takes as many as its arrivals' total."""

    def __init__(self, header: dict, records: list, local: bool):
        from measure.core.records import RunMeta

        self.meta = RunMeta(engine=header.get("engine", "?"), model=header.get("model") or "?",
                            model_bytes=header.get("model_bytes") or 0)
        self.records = list(records)
        self.local = local
        self.eps = header.get("endpoints") or [{}]
        self.oom_killed: list = []
        self.rep, self.target_k, self.b, self.mode = 0, 1, 1, header.get("mode", "instances")
        self.users = []

    def capabilities(self):
        from measure.sources.base import Capabilities

        modes = ("http",) if self.mode == "http" else ("instances", "batch")
        return Capabilities(self.meta.engine, self.meta.model_bytes, modes, scales_k=True, local=self.local,
                            batch_capacity=16, server_view=False, simulated=False)

    def scale_to(self, k):
        self.target_k = k

    def set_batch(self, mode, b, b_cap=None, seq_ctx=None):
        self.mode, self.b = mode, b

    def wait_ready(self, timeout=600.0):
        pass

    def set_users(self, users):
        self.users.append(users)

    def workers(self):
        from measure.sources.base import WorkerInfo

        n = len(self.eps) if self.mode == "http" else self.target_k
        return [WorkerInfo(i, ready_ns=1, bandwidth_gbps=(self.eps[i] if i < len(self.eps) else {}).get(
            "bandwidth_gbps")) for i in range(n)]

    def run_requests(self, load, timeout=None, should_stop=None):
        n = load.arrivals.total
        out, self.records = self.records[:n], self.records[n:]
        return out

    def close(self, grace=1.0):
        pass


def _sweep_config(name: str, header: dict):
    import presets
    from measure.control.bench.sweep import SweepConfig
    from measure.core.arrivals import parse_arrivals
    from measure.core.cost import Cost

    cost = {"http2": Cost(price_per_hour=1.5, watts=40.0), "local": Cost(price_per_hour=2.0, watts=30.0)}.get(name)
    arrivals = parse_arrivals("constant", header["rate"]) if header.get("arrivals") else None
    return SweepConfig(ks=header["ks"], bs=header["bs"], mode=header["mode"], requests=header["requests"],
                       reps=header["reps"], max_tokens=header["max_tokens"], ignore_eos=header["ignore_eos"],
                       rate=header.get("rate"), arrivals=arrivals, contexts=header.get("contexts"),
                       bandwidth_gbps=header.get("bandwidth_gbps"), cost=cost,
                       slo=presets.slo(header["slo"].split(":")[0]) if header.get("slo") else None,
                       roofline=FixedRoofline() if header["mode"] != "http" else None, threads=1,
                       kv_bytes_per_token=KV_BYTES if header["mode"] == "batch" else None)


def _periods(records) -> list:
    """A recording's samples for these records: each level from its first scheduled request until the next
    level's, then a pause."""
    firsts: dict = {}
    for r in records:
        key = (r.k, r.b, r.mode)
        firsts[key] = min(firsts.get(key, r.t_scheduled_ns), r.t_scheduled_ns)
    samples = [Sample(t_ns=t, k=k, b=b, mode=m, system={})
               for (k, b, m), t in sorted(firsts.items(), key=lambda x: x[1])]
    samples.append(Sample(t_ns=max(r.t_done_ns for r in records) + 1, paused=True, system={}))
    return samples


def outputs(tmp: Path) -> dict:
    """Every cell figure and text this harness checks, from the recorded records."""
    import presets
    from measure.control.bench import knee as KN
    from measure.control.bench import report as R, runs as RU
    from measure.control.bench.sweep import SweepConfig, format_table, run_sweep, write_summary

    out: dict = {}
    for name in RUNS:
        header, records = _read(name)
        src = Replay(header, records, local=header["engine"] != "http")
        cells, recs, _ = run_sweep(src, presets.workload("default"), _sweep_config(name, header), lambda m: None)
        folder = tmp / name
        folder.mkdir()
        write_summary(folder, cells)
        # a bench folder as report reads it: its records (header first) and the summary just written
        (folder / "records.jsonl").write_text((DATA / f"{name}.jsonl").read_text())
        run = RU.load_run(folder)
        out[name] = {
            "summary.json": (folder / "summary.json").read_text(),
            "summary.csv": (folder / "summary.csv").read_text(),
            "table": format_table(cells),
            "report.md": R.markdown([run], []),
            "from_records": [_j(c) for c in RU.cells_from_records(records, RunHeader.of(header), _periods(records))],
        }
    runs = [RU.load_run(tmp / "http2"), RU.load_run(tmp / "http2")]
    out["combined"] = [_j(c) for c in RU.combine(runs).cells]
    for name, what, levels in (("knee_users", "users", (1, 2, 4, 8, 16)), ("knee_rate", "rate", (4.0,))):
        header, records = _read(name)
        src = Replay(header, records, local=False)
        cfg = SweepConfig(mode="http", bs=[1], requests=header["requests"], max_tokens=header["max_tokens"],
                          slo=presets.slo("interactive"), cell_timeout_s=300.0)
        level = KN.measure_levels(src, presets.workload("default"), what, cfg, lambda m: None, k=1)
        cells = KN.Knee(what, None, None, [level(lv) for lv in levels]).cells()  # as bench/start.py run_find writes
        out[name] = {"summary.json": json.dumps([c.to_json() for c in cells], indent=2), "table": format_table(cells)}
    return out


def same(a, b, path="") -> None:
    """a and b hold the same JSON: the same keys in the same order, the same strings, integers and flags, and
    numbers equal to 1e-12 (one formula for a figure computed two ways before may round its last bit
    differently: HTTP's W ÷ TPOT)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), (path, list(a), list(b))
        for k in a:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-300), (path, a, b)
    else:
        assert type(a) is type(b) and a == b, (path, a, b)


def same_csv(a: str, b: str) -> None:
    import csv
    import io

    def cell(v):
        try:
            return float(v) if "." in v or "e" in v else v
        except ValueError:
            return v
    same([[cell(v) for v in row] for row in csv.reader(io.StringIO(a))],
         [[cell(v) for v in row] for row in csv.reader(io.StringIO(b))])


@pytest.fixture(scope="module")
def made(tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setattr("measure.machine.power.PowerMeter", FixedPower)
    # no thermal reading, whatever sensors the machine running the tests has (a cell's `thermal`: test_mac.py)
    from measure.machine import host
    monkeypatch_module.setattr(host.ThermalReader, "read", lambda self: host.UNKNOWN_THERMAL)
    return outputs(tmp_path_factory.mktemp("cells"))


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.mark.parametrize("name", RUNS + ("knee_users", "knee_rate"))
def test_summary_json_is_what_it_was(made, name):
    golden = json.loads(GOLDEN.read_text())
    same(json.loads(made[name]["summary.json"]), json.loads(golden[name]["summary.json"]))
    assert made[name]["table"] == golden[name]["table"]


@pytest.mark.parametrize("name", RUNS)
def test_csv_report_and_recording_cells_are_what_they_were(made, name):
    golden = json.loads(GOLDEN.read_text())
    same_csv(made[name]["summary.csv"], golden[name]["summary.csv"])
    assert made[name]["report.md"] == golden[name]["report.md"]
    same(_by_key(made[name]["from_records"]), _by_key(golden[name]["from_records"]))


@pytest.mark.parametrize("name", RUNS + ("knee_users", "knee_rate"))
def test_a_summary_json_cell_read_back_is_written_the_same(made, name):
    """Cell.from_json reads every figure of summary.json into its part, and to_json writes it back: the same keys
    in the same order, the same values (what `report` of a bench folder reads)."""
    from measure.control.bench.cell import Cell

    for d in json.loads(made[name]["summary.json"]):
        again = Cell.from_json(d).to_json()
        assert list(again) == list(d) and again == d


def test_a_figure_this_version_does_not_name_is_kept():
    """A key from another version's summary.json is kept and written back (after the figures this one names)."""
    from measure.control.bench.cell import Cell

    c = Cell.from_json({"k": 1, "b": 2, "completed": 3, "status": "ok", "future_figure": [1, 2]})
    assert c.requests.completed == 3 and c.extra == {"future_figure": [1, 2]}
    assert list(c.to_json())[-1] == "future_figure"


def _by_key(cells: list[dict]) -> list[dict]:
    """A report's cells, compared without their key order (report.md is what is written of them)."""
    return [dict(sorted(c.items())) for c in cells]


def test_combined_cells_are_what_they_were(made):
    same(_by_key(made["combined"]), _by_key(json.loads(GOLDEN.read_text())["combined"]))


if __name__ == "__main__" and "--write" in sys.argv:
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as d:
        mp.setattr("measure.machine.power.PowerMeter", FixedPower)
        GOLDEN.write_text(json.dumps(outputs(Path(d)), indent=1) + "\n")
    print(f"wrote {GOLDEN}")


# ---- one home per rule: where two copies disagreed, each test below failed on the copies -------------------
def _rec(i, worker=0, tpot_ms=20.0, n=6, error=None, t0=0, mode="http", k=2, b=1, rep=0, together=1):
    """Request i of a closed loop whose `together` users start together, one round a second."""
    from measure.core.records import RequestRecord

    NS = 1_000_000_000
    start = t0 + i // together * NS
    toks = [] if error else [start + int(5e6) + int(j * tpot_ms * 1e6) for j in range(n)]
    return RequestRecord(run_id="r", request_id=i, mode=mode, engine="http", model="m", model_bytes=1_000_000_000,
                         k=k, b=b, prompt_id=f"default-{i}", prompt_tokens=16, t_scheduled_ns=start,
                         t_submitted_ns=start, t_started_ns=start, t_first_token_ns=toks[0] if toks else None,
                         t_done_ns=(toks[-1] if toks else start + 1000), token_ns=toks, output_tokens=len(toks),
                         finish_reason="error" if error else "length", error=error, worker=worker, rep=rep,
                         extra={"endpoint": "ab"[worker]})


def test_http_bandwidth_is_one_rule_for_the_bench_and_the_dashboard():
    """Two endpoints, one of them down for the whole cell (every request it took failed): the dashboard summed
    W ÷ TPOT p50 over the endpoints that decoded (50 GB/s: 1 GB each 20 ms step), the bench cell said None
    because one endpoint had no TPOT. One rule now (metrics.http_bandwidth), in both."""
    from measure.control.bench.cell import Cell, Spec
    from measure.core import metrics as M

    recs = [_rec(i, worker=i % 2, error="connection refused" if i % 2 else None) for i in range(8)]
    cell = Cell.measure(recs, Spec(2, 1, 1_000_000_000, mode="http"))
    assert cell.bandwidth.gbps == pytest.approx(50.0)
    dashboard = M.http_bandwidth(1_000_000_000, [0.020, None])  # what a tick computes from its endpoints' TPOT p50
    assert cell.bandwidth.gbps == pytest.approx(dashboard.gbps)
    assert [e["bandwidth_gbps"] for e in cell.bandwidth.endpoints] == [pytest.approx(50.0), None]


def test_the_dashboard_predicts_k_w_over_beta_in_batch_mode_as_the_bench_does():
    """K·W/β was the dashboard's prediction in instances mode only, the bench's in every mode: the same K=2,
    batch, W = 253 MB, β = 100 GB/s read 'no prediction' live and 5.06 ms in the bench's cell."""
    from sim import run_for, sim_controller

    from measure.control.bench.cell import Cell, Spec

    c, fleet, clock = sim_controller(k=2, bandwidth=100.0)
    assert c.toggle_mode() is None and c.mode == "batch"
    run_for(c, fleet, clock, 6)
    n = c.snapshot().numbers
    W = fleet.meta.model_bytes
    bench = Cell.measure([_rec(i, mode="batch") for i in range(4)], Spec(2, 1, W, 100.0, "batch"))
    assert bench.prediction.by == "K·W/β" and bench.prediction.tpot_ms == pytest.approx(2 * W / 100e9 * 1e3)
    assert n.predicted_by == "K·W/β" and n.predicted_tpot * 1e3 == pytest.approx(bench.prediction.tpot_ms)


def test_the_report_draws_the_k_w_over_beta_its_cells_hold(tmp_path, monkeypatch):
    """HTTP over two endpoints (β 400 and 200 GB/s, W = 1 GB): a cell at K=1 predicts W ÷ 400 GB/s = 2.5 ms
    (the endpoint in use); the report's TPOT chart drew K·W ÷ the header's Σβ (600 GB/s): 1.67 ms at K=1."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    from measure.control.bench import report as R, runs as RU

    header, records = _read("http2")
    drawn: dict = {}
    plot = Axes.plot

    def spy(ax, *args, **kw):
        drawn.setdefault(kw.get("label") or "", []).append(args)
        return plot(ax, *args, **kw)

    monkeypatch.setattr(Axes, "plot", spy)
    run = RU.Run("http2", RunHeader.of(header), RU.cells_from_records(records, RunHeader.of(header), []))
    R.render([run], tmp_path)
    line = next(v for label, v in drawn.items() if label.startswith("predicted K·W/β"))[0]
    cells = {c.k: c.prediction.tpot_ms for c in run.cells}
    assert cells[1] == pytest.approx(2.5) and cells[2] == pytest.approx(2 * 1e3 / 600)
    assert list(line[0]) == [1, 2] and list(line[1]) == [pytest.approx(cells[1]), pytest.approx(cells[2])]


def test_the_reports_knee_uses_the_searchs_target(tmp_path):
    """bench --find --target 0.95 found no level within it (92 % at best): the report's goodput chart still
    marked a knee at the last cell ≥ 0.9 (its own literal), beside knee.json saying there is none."""
    from measure.control.bench import report as R, runs as RU

    cells = [{"k": 1, "b": b, "level": b, "slo_attainment": 0.92, "achieved_concurrency": b, "status": "ok"}
             for b in (1, 2)]
    run = RU.Run("find", RunHeader(), cells, knee=KneeResult("users", "interactive", 0.95, "none", None, 1, []))
    assert R._knee(run, run.cells) is None


def test_bench_runs_the_users_it_is_given(tmp_path):
    """bench --users 2 --b 4: the help says closed-loop users (default K × B); the sweep ran K × B = 4."""
    from conftest import NullServerProcess

    from measure.control.bench.knee import peak_in_flight
    from measure.machine.recorder import read_jsonl

    srv = NullServerProcess(ttft_ms=5.0, itl_ms=20.0)
    try:
        out = tmp_path / "o"
        p = subprocess_run(["bench", "--engine", "http", "--url", srv.url, "--tokenizer", "none", "--b", "4",
                            "--users", "2", "--requests", "8", "--max-tokens", "4", "--out", str(out)])
    finally:
        srv.kill()
    assert p.returncode == 0, p.stderr
    _, recs, _ = read_jsonl(out / "records.jsonl")
    assert "closed loop, 2 users" in p.stdout
    assert peak_in_flight(recs) == 2


def subprocess_run(args):
    import os
    import subprocess

    return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


class Killing(Replay):
    """The replay, local, whose worker the kernel's OOM killer ends while it serves `kill_at` users."""

    def __init__(self, header, records, kill_at):
        super().__init__(header, records, local=True)
        self.kill_at, self.ran = kill_at, []

    def run_requests(self, load, timeout=None, should_stop=None):
        self.ran.append(self.b)
        if self.b == self.kill_at:
            self.oom_killed.append((1, self.b, self.mode))
        return [_rec(i, mode=self.mode, k=1, b=self.b, tpot_ms=5.0, together=load.arrivals.users)
                for i in range(load.arrivals.total)]


def test_the_knee_learns_from_an_oom_kill_as_the_sweep_does():
    """--find users on a local engine: the OOM killer ended a worker at 4 users (the level still met the SLO).
    The sweep refuses every larger cell of that mode from then on; the knee ran 8 and 16 regardless."""
    import presets
    from measure.control.bench import knee as KN
    from measure.control.bench.sweep import SweepConfig

    header, _ = _read("local")
    src = Killing(header, [], kill_at=4)
    cfg = SweepConfig(mode="batch", requests=4, max_tokens=6, slo=presets.slo("server"), cell_timeout_s=60.0)
    said: list[str] = []
    knee = KN.find_knee(KN.measure_levels(src, presets.workload("default"), "users", cfg, said.append), "users",
                        limit=16)
    assert src.ran == [1, 2, 4]
    assert knee.levels[2].cell.machine.oom_killed and knee.failed.stop == "refused" and knee.failed.level == 8
    assert "OOM killer" in knee.failed.why and any("OOM killer ended a worker" in s for s in said)


def test_a_knee_level_has_the_figures_of_a_bench_cell():
    """The knee summarised its levels with its own call: no K·W/β where β was known, no power or $/Mtok where a
    cost was given, no stopped_early with EOS ignored. The same records as a sweep cell and as a knee level now
    give the same figures."""
    import presets
    from measure.control.bench import knee as KN
    from measure.control.bench.sweep import SweepConfig, run_sweep
    from measure.core.cost import Cost

    header, records = _read("local")
    cfg = dict(mode="instances", requests=4, max_tokens=8, slo=presets.slo("interactive"), bandwidth_gbps=50.0,
               cost=Cost(price_per_hour=2.0, watts=30.0), threads=1)
    mine = [r for r in records if r.k == 1 and r.rep == 0]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("measure.machine.power.PowerMeter", FixedPower)
        cells, _, _ = run_sweep(Replay(header, mine, local=False), presets.workload("default"),
                                SweepConfig(ks=[1], bs=[1], **cfg), lambda m: None)
        st = KN.measure_levels(Replay(header, mine, local=False), presets.workload("default"), "b",
                               SweepConfig(**cfg), lambda m: None)(1)
    bench, level = _j(cells[0]), _j(st.cell)
    for key in ("predicted_tpot_ms", "predicted_by", "stopped_early", "watts", "joules_per_token", "usd_per_mtok"):
        assert key in level and level[key] == bench[key], key
    assert {k: v for k, v in level.items() if k in bench} == {k: v for k, v in bench.items() if k in level}


def test_the_table_of_a_sweep_whose_first_cell_was_refused():
    """The table's BW legend read cells[0]'s formula: a sweep whose first cell the memory guard refused (no
    figures) ended in KeyError 'bandwidth_formula' after every cell had run."""
    from measure.control.bench.cell import Cell, Spec
    from measure.control.bench.sweep import format_table, skipped_cell

    refused = skipped_cell(1, 64, None, "refused", "K=1 B=64 needs ≈ 9 GiB of 8 GiB budget")
    ok = Cell.measure([_rec(i, mode="batch", k=1) for i in range(4)], Spec(1, 1, 1_000_000_000, mode="batch"))
    table = format_table([refused, ok])
    assert "REFUSED" in table and f"BW = {ok.bandwidth.formula};" in table

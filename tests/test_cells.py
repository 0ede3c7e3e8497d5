"""The bench cell's JSON, kept exactly: records from real runs (tests/data/cells: null servers over HTTP, the
embedded model in instances and batch mode, two --find searches) go through the sweep, the knee, the report
and `report --combine` again, and every summary.json, summary.csv, bench table and report.md must come out
as it did when tests/data/cells/golden.json was written (before the cell became a dataclass).

    python tests/test_cells.py --write      (re-records golden.json: only for a change meant to alter them)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

DATA = Path(__file__).parent / "data" / "cells"
GOLDEN = DATA / "golden.json"
RUNS = ("http2", "httpeos", "httpctx", "local", "batch")
KV_BYTES = 1000.0  # the batch run's KV bytes per token, fixed here (its model's real figure does not matter)


def _j(c) -> dict:
    """A cell as its JSON holds it (tuples become lists)."""
    return json.loads(json.dumps(c.to_dict() if hasattr(c, "to_dict") else dict(c)))


def _read(name: str):
    from measure.core.recorder import read_jsonl

    headers, records, _ = read_jsonl(DATA / f"{name}.jsonl")
    return headers[0], records


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

    def level(self, mode, k, b, threads, prompt_tokens, output_tokens):
        if mode == "http":
            return None
        return SimpleNamespace(tpot_s=0.02 * k, aggregate_tps=50.0 * b, binding="bandwidth")


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
        return SimpleNamespace(local=self.local, batch_capacity=16)

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
    from measure.control.sweep import SweepConfig
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


def _periods(records) -> list[dict]:
    """A recording's samples for these records: each level from its first scheduled request until the next
    level's, then a pause."""
    firsts: dict = {}
    for r in records:
        key = (r.k, r.b, r.mode)
        firsts[key] = min(firsts.get(key, r.t_scheduled_ns), r.t_scheduled_ns)
    samples = [{"t_ns": t, "k": k, "b": b, "mode": m} for (k, b, m), t in sorted(firsts.items(), key=lambda x: x[1])]
    samples.append({"t_ns": max(r.t_done_ns for r in records) + 1, "paused": True})
    return samples


def outputs(tmp: Path) -> dict:
    """Every cell figure and text this harness checks, from the recorded records."""
    import presets
    from measure.control import knee as KN
    from measure.control import report as R
    from measure.control.sweep import SweepConfig, format_table, run_sweep, write_summary

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
        run = R.load_run(folder)
        out[name] = {
            "summary.json": (folder / "summary.json").read_text(),
            "summary.csv": (folder / "summary.csv").read_text(),
            "table": format_table(cells),
            "report.md": R.markdown([run], []),
            "from_records": [_j(c) for c in R.cells_from_records(records, header, _periods(records))],
        }
    runs = [R.load_run(tmp / "http2"), R.load_run(tmp / "http2")]
    out["combined"] = [_j(c) for c in R.combine(runs).cells]
    for name, what, levels in (("knee_users", "users", (1, 2, 4, 8, 16)), ("knee_rate", "rate", (4.0,))):
        header, records = _read(name)
        src = Replay(header, records, local=False)
        cfg = SweepConfig(mode="http", bs=[1], requests=header["requests"], max_tokens=header["max_tokens"],
                          slo=presets.slo("interactive"), cell_timeout_s=300.0)
        level = KN.measure_levels(src, presets.workload("default"), what, cfg, lambda m: None, k=1)
        steps = [level(lv) for lv in levels]
        cells = knee_summary(steps)
        out[name] = {"summary.json": json.dumps(cells, indent=2), "table": format_table(cells)}
    return out


def knee_summary(steps) -> list[dict]:
    """bench --find's summary.json cells: each measured level's cell with its verdict (tui/cli.py find_main)."""
    return [dict(_j(st.cell), level=st.level, within_slo=st.ok, verdict=st.why) for st in steps if st.cell]


@pytest.fixture(scope="module")
def made(tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setattr("measure.core.cost.PowerMeter", FixedPower)
    return outputs(tmp_path_factory.mktemp("cells"))


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.mark.parametrize("name", RUNS + ("knee_users", "knee_rate"))
def test_summary_json_is_what_it_was(made, name):
    golden = json.loads(GOLDEN.read_text())
    assert made[name]["summary.json"] == golden[name]["summary.json"]
    assert made[name]["table"] == golden[name]["table"]


@pytest.mark.parametrize("name", RUNS)
def test_csv_report_and_recording_cells_are_what_they_were(made, name):
    golden = json.loads(GOLDEN.read_text())
    for part in ("summary.csv", "report.md", "from_records"):
        assert made[name][part] == golden[name][part], part


def test_combined_cells_are_what_they_were(made):
    assert made["combined"] == json.loads(GOLDEN.read_text())["combined"]


if __name__ == "__main__" and "--write" in sys.argv:
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as d:
        mp.setattr("measure.core.cost.PowerMeter", FixedPower)
        GOLDEN.write_text(json.dumps(outputs(Path(d)), indent=1) + "\n")
    print(f"wrote {GOLDEN}")

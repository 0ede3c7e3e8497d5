"""How much of a number is the harness's own? The null engine emits tokens on a fixed schedule (TTFT, then
one every ITL; no model), so whatever inference-top measures beyond that schedule is its own overhead.

Process fleet: K = 1, 2, 4, 8 workers running engines/null.py, closed loop with K users, through the same
Fleet, records and metrics as any run. HTTP: B = 1, 8, 64 (and 256 with --streams) concurrent streams of
inference-top's HTTP source against engines/null_server.py, a separate process on loopback.

Per level: measured ÷ scheduled aggregate tok/s (scheduled = streams × N ÷ (TTFT + (N − 1) · ITL), i.e.
zero gap between a stream's requests), and the TTFT bias = measured queue-inclusive TTFT − the set TTFT
(median and p99). Goals (issue 13): ratio ≥ 0.99 and median bias ≤ 1 ms at every level. Each HTTP level
also splits the bias (bias_split): dispatch, request, server, response, from the records and the null
server's own times of each request (its `timings`), so a level that misses says where its time went, and
counts the CPU the client and the null server used per token and the cores busy (cpu), so a level that
misses says whether the machine ran out of cores.

Closed loop with B users against a fixed schedule keeps the streams in lockstep: all B start together,
end together and start again, so the loop pays B request starts in one burst (the last waits for the rest).
--open-loop adds, per stream level, Poisson arrivals at the rate that holds B streams on average (B ÷ the
request's scheduled duration), with slots for B + 4√B: the same concurrency, the starts spread as users'
are. Its ratio is measured ÷ the schedule's own tok/s: its tokens ÷ (first arrival → last arrival + one
request's scheduled duration), what a client with no overhead would measure over the same span (rate ×
tokens, `offered_tps`, is beside it; a short run's ramp up and down keeps a perfect client below that).

Every level records its requests as a run does (core/recorder.Recorder, one JSONL per level in a temporary
folder, fed from the source's on_record on the thread that dispatches the next request), so the figures include
what recording costs the client.

Client processes (issue 24: 5): --client-procs 1,auto runs each HTTP level with the streams in one asyncio
loop (1) and spread over P worker processes (sources/http_pool.py; auto = http_pool.auto_procs(B)), one
shared schedule from one start.

Placement: a level run in one client process (and GuideLLM's) runs with the null server on one CPU and the client
on the others (Linux; `apart`), as a client of a real server has it; each level's `placed` says so, and
--no-pin leaves both where the kernel puts them. Left there, the kernel ran the two on one CPU most of the
moments both had work (the wakee pulled beside its waker on loopback), and a level's ratio moved by ± 0.3 %
from run to run with it (docs/measurements.md §11). A pool's processes are not placed: they share the cores.

GuideLLM beside it: where a `guidellm` (0.8.x) is installed (on PATH, beside this Python, or --guidellm EXE;
pip install 'inference-top[bench]'), each stream level is also run through GuideLLM's own client (its
concurrent profile, B streams, the same requests per level, the same null server, /v1/completions), and
its JSON report is read: its output tok/s ÷ the same scheduled tok/s, its TTFT p50 − the set TTFT. Its
synthetic prompts need a tokenizer and no model hub may be reachable: a word-level tokenizer is written to a
temporary folder for it (the null server's answers do not depend on the prompt). GuideLLM's TTFT counts
from when it sent the request; ours from when the request was due (queue-inclusive).

    python benchmarks/harness_overhead.py [--tokens 64] [--ttft-ms 20] [--itl-ms 10] [--streams 1,8,64]
                                          [--open-loop] [--k 1,2,4,8 | --k 0 (no process levels)]
                                          [--client-procs 1,auto] [--guidellm EXE | --no-guidellm]

The last line is one JSON object: {"min_ratio": …, "max_median_ttft_bias_ms": …, "streams_256_ratio": …,
"streams_256_median_bias_ms": …, "guidellm_streams_256_ratio": …, …, "levels": [...]}: streams_B_* are
the closed loop at B streams with the most client processes run (streams_B_one_loop_*: one process;
streams_B_open_*: the open loop), guidellm_streams_B_* GuideLLM's at B.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import presets  # noqa: E402
from engines.base import EngineSpec  # noqa: E402
from measure.core import metrics as M  # noqa: E402
from measure.machine.recorder import Recorder  # noqa: E402
from measure.core.records import RunMeta  # noqa: E402
from measure.core.workload import ClosedLoop, Load, Poisson  # noqa: E402
from measure.sources.fleet import Fleet  # noqa: E402
from measure.sources.http import HttpSource  # noqa: E402
from measure.sources.http_pool import HttpPool, auto_procs  # noqa: E402

META = RunMeta(engine="null (scheduled tokens, no model)", model="none", model_bytes=0, simulated=True)


def recorder(name: str) -> Recorder:
    """A level's recording, as a run writes one (its records go to it as each ends)."""
    folder = os.environ["INFERENCE_TOP_LOGS"]
    safe = "".join(c if c.isalnum() else "-" for c in name)
    return Recorder(os.path.join(folder, f"{safe}.jsonl"), {"command": "harness_overhead", "level": name})


def level(name: str, streams: int, recs, a, offered_tps: float | None = None) -> dict:
    good = M.ok(recs)
    measured = M.output_throughput(good)
    per_request_s = a.ttft_ms / 1e3 + (a.tokens - 1) * a.itl_ms / 1e3
    scheduled = streams * a.tokens / per_request_s
    if offered_tps and recs:  # open loop: what a client with no overhead measures on this very schedule (its
        # tokens ÷ (first arrival → last arrival + one request), as output_throughput spans a run), not rate ×
        # tokens: 256 Poisson arrivals at ~64 streams read 0.82 of that from the ramp up and down alone
        span_s = (max(r.t_scheduled_ns for r in recs) - min(r.t_scheduled_ns for r in recs)) / 1e9 + per_request_s
        scheduled = len(recs) * a.tokens / span_s
    bias = [(M.ttft(r) - a.ttft_ms / 1e3) * 1e3 for r in good]
    out = {"level": name, "streams": streams, "requests": len(recs), "errors": len(recs) - len(good),
           "tokens": sum(r.output_tokens for r in good), "measured_tps": measured, "scheduled_tps": scheduled,
           "ratio": measured / scheduled if measured else 0.0,
           "achieved_concurrency": M.achieved_concurrency(good, *M.run_span_ns(good)) if good else None,
           "ttft_bias_median_ms": M.percentile(bias, 50), "ttft_bias_p99_ms": M.percentile(bias, 99),
           "tpot_median_ms": (M.percentile([t for t in map(M.tpot, good) if t], 50) or 0) * 1e3}
    split = bias_split(good)
    if split:
        out["bias_split_median_ms"] = split
    return out


SPLIT = ("dispatch", "request", "server", "response")


def bias_split(recs) -> dict[str, float] | None:
    """Where each TTFT's bias went, from the client's records and the null server's own times (its last
    event's `timings`, the same clock on one machine): dispatch = due → the client took it up (t_started);
    request = → the server had read it (the client's request CPU, the kernel, the server's read); server = the
    first chunk's send − its due time (arrival + TTFT: the server's lateness); response = → the client
    stamped the first token (the kernel, the client's wake and parse). The four add up to the bias of each
    request; their medians (returned, in ms) need not add up to the bias's."""
    parts: dict[str, list[float]] = {k: [] for k in SPLIT}
    for r in recs:
        t = (r.server_view or {}).get("timings") or {}
        if "null_arrival_ns" not in t or r.t_started_ns is None or r.t_first_token_ns is None:
            continue
        for k, v in zip(SPLIT, (r.t_started_ns - r.t_scheduled_ns, t["null_arrival_ns"] - r.t_started_ns,
                                t["null_first_sent_ns"] - t["null_first_due_ns"],
                                r.t_first_token_ns - t["null_first_sent_ns"])):
            parts[k].append(v / 1e6)
    if not parts["dispatch"]:
        return None
    return {k: round(M.percentile(v, 50), 3) for k, v in parts.items()}


def fleet_levels(a) -> list[dict]:
    wl = presets.workload("synthetic:16")
    out = []
    for k in a.k:
        spec = EngineSpec("null", "", threads=1, ctx=4096,
                          options={"ttft_s": a.ttft_ms / 1e3, "itl_s": a.itl_ms / 1e3})
        rec = recorder(f"K={k}")
        fleet = Fleet(spec, META, k=k, threads=1, events=False, on_record=rec.record)
        try:
            fleet.start(timeout=120)
            n = max(a.min_requests, a.per_stream * k)
            recs = fleet.run_requests(Load(wl, ClosedLoop(k, total=n), a.tokens), timeout=600)
        finally:
            fleet.close()
            rec.close()
        out.append(level(f"K={k} processes", k, recs, a))
        print(_row(out[-1]), flush=True)
    return out


def _place(pid: int, cpus: set[int]) -> None:
    """Every thread of process `pid` (0: this one) allowed only `cpus` (Linux: an affinity is a thread's own)."""
    pid = pid or os.getpid()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, ValueError):
            pass  # a thread that ended meanwhile


@contextlib.contextmanager
def apart(server_pid: int, on: bool):
    """The null server on one CPU and this client (its threads, and the client it starts meanwhile: GuideLLM's) on
    the others, for a level run in one client process; put back after. Yields where it placed them ("" where
    it did not: asked not to, fewer than 2 CPUs, or no sched_setaffinity).

    On loopback the kernel wakes a process on the CPU of the one that woke it (the wakee is pulled beside its
    waker): on this 2-core VM the client's loop and the null server, each waking the other thousands of times a
    second, were on the same CPU in 58–75 % of the moments both had work, one waiting for the other, and B = 64
    read anywhere from 0.987 to 0.994 from run to run (docs/measurements.md §11). A server of its own core is
    what a client of a real server has."""
    cpus = sorted(os.sched_getaffinity(0)) if on and hasattr(os, "sched_setaffinity") else []
    if len(cpus) < 2:
        yield ""
        return
    server_cpu, client_cpus = {cpus[-1]}, set(cpus[:-1])
    _place(server_pid, server_cpu)
    _place(0, client_cpus)
    try:
        yield f"server on CPU {cpus[-1]}, client on {','.join(map(str, sorted(client_cpus)))}"
    finally:
        _place(0, set(cpus))
        try:
            _place(server_pid, set(cpus))
        except FileNotFoundError:
            pass


def http_levels(a) -> list[dict]:
    from engines.null_server import spawn

    server, url = spawn(a.ttft_ms, a.itl_ms)
    out = []

    def run(p: int, *args, **kw) -> None:
        with apart(server.pid, a.pin and p == 1) as placed:  # a pool's processes share the cores as they will
            out.append(http_level(url, *args, procs=p, server_pid=server.pid, **kw))
        out[-1]["placed"] = placed
        print(_row(out[-1]), flush=True)

    try:
        wl = presets.workload("synthetic:16")
        for b in a.streams:
            n = max(a.min_requests, a.per_stream * b)
            for p in procs_for(a, b):
                tag = f" ×{p} procs" if p > 1 else ""
                run(p, f"B={b} HTTP{tag}", b, b, Load(wl, ClosedLoop(b, total=n), a.tokens), a)
                if a.open_loop:  # B streams on average, Poisson arrivals: rate = B ÷ the scheduled request duration
                    rate = b / (a.ttft_ms / 1e3 + (a.tokens - 1) * a.itl_ms / 1e3)
                    run(p, f"~{b} open loop{tag}", b, b + int(4 * b ** 0.5) + 4,
                        Load(wl, Poisson(rate, total=n, seed=1), a.tokens), a)
            if a.guidellm:
                with apart(server.pid, a.pin) as placed:
                    gl = guidellm_level(a, url, b, n)
                gl["placed"] = placed
                out.append(gl)
                print(_row(gl) if "ratio" in gl else f"{gl['level']:<20} {gl['error']}", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
    return out


def procs_for(a, b: int) -> list[int]:
    """The client-process counts to run at B streams: --client-procs, auto = http_pool.auto_procs(B)."""
    out: list[int] = []
    for p in a.client_procs:
        p = auto_procs(b) if p == "auto" else min(int(p), b)
        if p not in out:
            out.append(p)
    return out


def _cpu_s(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def http_level(url: str, name: str, streams: int, slots: int, load: Load, a, procs: int = 1,
               server_pid: int | None = None) -> dict:
    """One level through inference-top's HTTP source with `slots` streams open (over `procs` processes);
    an open loop's (Poisson: its rate) ratio is measured ÷ the schedule's own tok/s (level()). The CPU the
    client (this process, or the pool's processes) and the null server used over the run, per token, and the
    cores busy."""
    rate = load.arrivals.rate if isinstance(load.arrivals, Poisson) else None
    meta = RunMeta("http", "null", 0, simulated=True)
    rec = recorder(name)
    src = (HttpPool(url, meta, b=slots, procs=procs, events=False, on_record=rec.record) if procs > 1
           else HttpSource(url, meta, b=slots, events=False, on_record=rec.record))
    try:
        src.start()
        src.wait_ready(60)
        clients = [os.getpid(), *(src.pids() if isinstance(src, HttpPool) else [])]
        servers = [server_pid] if server_pid else []
        c0, s0, w0 = _cpu_s(clients), _cpu_s(servers), time.monotonic()
        recs = src.run_requests(load, timeout=600)
        c1, s1, w1 = _cpu_s(clients), _cpu_s(servers), time.monotonic()
    finally:
        src.close()
        rec.close()
    lv = level(name, streams, recs, a, offered_tps=rate * a.tokens if rate else None)
    if lv["tokens"]:
        lv["cpu"] = {"client_us_per_token": round((c1 - c0) / lv["tokens"] * 1e6, 1),
                     "server_us_per_token": round((s1 - s0) / lv["tokens"] * 1e6, 1) if servers else None,
                     "cores_busy": round((c1 - c0 + s1 - s0) / (w1 - w0), 2), "cores": os.cpu_count()}
    lv["client_procs"] = procs
    lv["loop"] = "open" if rate else "closed"
    if rate:
        lv["rate"] = rate
        lv["offered_tps"] = rate * a.tokens
    late = _server_late(url)
    if late is not None:
        lv["server_late_median_ms"] = late
    return lv


def _server_late(url: str) -> float | None:
    """The null server's own median lateness (send − due), which the client sees as bias it did not add."""
    from prometheus_client.parser import text_string_to_metric_families

    from engines import http_sync

    try:
        text = http_sync.get(url[:-3] + "/metrics", 2).text
    except http_sync.HTTPError:
        return None
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if smp.name == "null:chunk_late_seconds" and smp.labels.get("quantile") == "0.5":
                return smp.value * 1e3
    return None


# ---- GuideLLM's own client on the same server ----------------------------------------------------------
TOKENIZER_SCRIPT = """
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
# every whitespace-separated word is one token, an unknown word the plain word "w0" (not a special token,
# so a decoded prompt keeps one word per token: the null server counts words)
words = ["w0", "<s>", "</s>"] + [f"w{i}" for i in range(1, 1000)]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##")
PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>").save_pretrained(sys.argv[1])
"""


def find_guidellm(given: str | None) -> str | None:
    """GuideLLM's command: --guidellm, else `guidellm` beside this Python, else on PATH."""
    if given:
        return given if os.path.exists(given) or shutil.which(given) else None
    here = os.path.join(os.path.dirname(sys.executable), "guidellm")
    return here if os.path.exists(here) else shutil.which("guidellm")


def _guidellm_python(exe: str) -> str:
    """The interpreter GuideLLM is installed in (its script's #! line)."""
    path = shutil.which(exe) or exe
    try:
        with open(path, "rb") as f:
            first = f.readline().decode().strip()
    except OSError:
        return sys.executable
    return first[2:].split()[0] if first.startswith("#!") else sys.executable


def guidellm_level(a, url: str, b: int, n: int) -> dict:
    """GuideLLM 0.8.x's concurrent profile at B streams, n requests, against the same null server; its JSON
    report's output tok/s (its mean over the benchmark) and TTFT p50."""
    name = f"B={b} GuideLLM"
    work = tempfile.mkdtemp(prefix="it-guidellm-")
    tok = os.path.join(work, "tokenizer")
    made = subprocess.run([_guidellm_python(a.guidellm), "-c", TOKENIZER_SCRIPT, tok], capture_output=True, text=True)
    if made.returncode:
        return {"level": name, "streams": b, "error": "no tokenizer for GuideLLM: " + made.stderr.strip()[-200:]}
    report = os.path.join(work, "report.json")
    cmd = [a.guidellm, "run", "--backend", f"kind=openai_http,target={url[:-3]},request_format=/v1/completions",
           "--profile", f"kind=concurrent,streams={b}", "--constraint", f"kind=max_requests,count={n}",
           "--data", f"kind=synthetic_text,prompt_tokens=16,output_tokens={a.tokens}",
           "--tokenizer", f"kind=huggingface_auto,model={tok}", "--output", f"kind=json,path={report}",
           "--disable-console"]
    t0 = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=900)
    if run.returncode or not os.path.exists(report):
        tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"level": name, "streams": b, "error": f"GuideLLM failed ({run.returncode}): {tail[0][:200]}"}
    with open(report) as f:
        rep = json.load(f)
    bench, m = rep["benchmarks"][0], rep["benchmarks"][0]["metrics"]
    per_request_s = a.ttft_ms / 1e3 + (a.tokens - 1) * a.itl_ms / 1e3
    scheduled = b * a.tokens / per_request_s
    measured = m["output_tokens_per_second"]["successful"]["mean"]
    ttft = m["time_to_first_token_ms"]["successful"]
    totals = m["request_totals"]
    del bench
    return {"level": name, "streams": b, "requests": totals["total"], "errors": totals["errored"],
            "tokens": int(m["output_token_count"]["successful"]["total_sum"]), "measured_tps": measured,
            "scheduled_tps": scheduled, "ratio": measured / scheduled,
            "achieved_concurrency": m["request_concurrency"]["successful"]["mean"],
            "ttft_bias_median_ms": ttft["median"] - a.ttft_ms, "ttft_bias_p99_ms": ttft["percentiles"]["p99"] - a.ttft_ms,
            "tpot_median_ms": m["time_per_output_token_ms"]["successful"]["median"],
            "client": f"guidellm {rep.get('metadata', {}).get('guidellm_version', '?')}",
            "wall_s": round(time.monotonic() - t0, 1), "server_late_median_ms": _server_late(url),
            "ttft_counted_from": "GuideLLM's request start (not queue-inclusive)"}


def summary(levels: list[dict]) -> dict:
    """streams_B_{ratio, median_bias_ms, p99_bias_ms, server_late_ms, client_procs}: the closed loop at B with
    the most client processes; streams_B_one_loop_*: with one; streams_B_open_*: the open loop (--open-loop);
    guidellm_streams_B_*: GuideLLM's (its concurrent profile: a closed loop)."""
    out: dict = {}
    for b, loop in sorted({(lv["streams"], lv["loop"]) for lv in levels if lv.get("loop")}):
        mine = [lv for lv in levels if lv.get("loop") == loop and lv["streams"] == b]
        for key, lv in (("", max(mine, key=lambda x: x["client_procs"])),
                        ("_one_loop", next((x for x in mine if x["client_procs"] == 1), None))):
            if lv is None or (key == "_one_loop" and len(mine) == 1):
                continue
            pre = f"streams_{b}" + ("_open" if loop == "open" else "") + key
            out.update({f"{pre}_ratio": round(lv["ratio"], 4),
                        f"{pre}_median_bias_ms": round(lv["ttft_bias_median_ms"] or 0, 3),
                        f"{pre}_p99_bias_ms": round(lv["ttft_bias_p99_ms"] or 0, 3),
                        f"{pre}_server_late_ms": (None if lv.get("server_late_median_ms") is None
                                                  else round(lv["server_late_median_ms"], 3)),
                        f"{pre}_bias_split_median_ms": lv.get("bias_split_median_ms"),
                        f"{pre}_cpu": lv.get("cpu"),
                        f"{pre}_client_procs": lv["client_procs"]})
        gl = next((lv for lv in levels if lv["level"] == f"B={b} GuideLLM"), None) if loop == "closed" else None
        if gl is not None and "ratio" in gl:
            out.update({f"guidellm_streams_{b}_ratio": round(gl["ratio"], 4),
                        f"guidellm_streams_{b}_median_bias_ms": round(gl["ttft_bias_median_ms"], 3),
                        f"guidellm_streams_{b}_p99_bias_ms": round(gl["ttft_bias_p99_ms"], 3)})
        elif gl is not None:
            out[f"guidellm_streams_{b}_error"] = gl["error"]
    return out


HEAD = (f"{'level':<20} {'streams':>7} {'req':>5} {'tokens':>7} {'sched tok/s':>11} {'meas tok/s':>10} "
        f"{'ratio':>6} {'conc':>5} {'TTFT bias p50':>13} {'p99':>7} {'TPOT p50':>8}")


def _row(lv: dict) -> str:
    return (f"{lv['level']:<20} {lv['streams']:>7} {lv['requests']:>5} {lv['tokens']:>7} {lv['scheduled_tps']:>11.1f} "
            f"{lv['measured_tps'] or 0:>10.1f} {lv['ratio']:>6.3f} {lv['achieved_concurrency'] or 0:>5.2f} "
            f"{lv['ttft_bias_median_ms'] or 0:>10.2f} ms {lv['ttft_bias_p99_ms'] or 0:>5.1f}ms "
            f"{lv['tpot_median_ms']:>6.2f}ms" + (f"  (server late p50 {lv['server_late_median_ms']:.2f} ms)"
                                                if "server_late_median_ms" in lv else "")
            + ("\n" + " " * 22 + "bias split p50: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                            lv["bias_split_median_ms"].items()) + " ms"
               if lv.get("bias_split_median_ms") else "")
            + (f"; CPU per token: client {lv['cpu']['client_us_per_token']:.0f} µs, server "
               f"{lv['cpu']['server_us_per_token'] or 0:.0f} µs; {lv['cpu']['cores_busy']:.2f} of "
               f"{lv['cpu']['cores']} cores busy" if lv.get("cpu") else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=64, help="tokens per request (default 64)")
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--k", type=lambda t: [int(x) for x in t.split(",")], default=[1, 2, 4, 8])
    ap.add_argument("--streams", type=lambda t: [int(x) for x in t.split(",")], default=[1, 8, 64])
    ap.add_argument("--per-stream", type=int, default=4, help="requests per stream and level (default 4)")
    ap.add_argument("--min-requests", type=int, default=16, help="at least this many per level (default 16)")
    ap.add_argument("--open-loop", action="store_true", help="also Poisson arrivals holding B streams on average")
    ap.add_argument("--client-procs", type=lambda t: t.split(","), default=["1", "auto"],
                    help="client processes per HTTP level, comma-separated; auto: http_pool.auto_procs(B) "
                         "(default 1,auto)")
    ap.add_argument("--guidellm", default=None, help="GuideLLM's command (default: beside this Python, or on PATH)")
    ap.add_argument("--no-guidellm", action="store_true", help="do not run GuideLLM")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="leave the client and the null server where the kernel puts them (default: a one-process "
                         "level runs the null server on one CPU and the client on the others, Linux)")
    a = ap.parse_args()
    a.k = [k for k in a.k if k > 0]
    a.guidellm = None if a.no_guidellm else find_guidellm(a.guidellm)
    if a.guidellm is None and not a.no_guidellm:
        print("GuideLLM is not installed (pip install 'inference-top[bench]', or --guidellm EXE): its figures are "
              "left out")
    os.environ.setdefault("INFERENCE_TOP_LOGS", tempfile.mkdtemp(prefix="it-harness-"))
    print(f"null engine: TTFT {a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms, {a.tokens} tokens per request; "
          f"{os.cpu_count()} CPUs")
    print(HEAD)
    levels = fleet_levels(a) + http_levels(a)
    ours = [lv for lv in levels if "ratio" in lv and "client" not in lv]
    worst = min(ours, key=lambda lv: lv["ratio"])
    bias = max(ours, key=lambda lv: lv["ttft_bias_median_ms"] or 0)
    print(f"\nlowest measured ÷ scheduled: {worst['ratio']:.4f} at {worst['level']}; largest median TTFT bias "
          f"{bias['ttft_bias_median_ms']:.2f} ms at {bias['level']} (goals: ≥ 0.99, ≤ 1 ms)")
    summ = summary(levels)
    for k, v in summ.items():
        if k.endswith(("_ratio", "_median_bias_ms")):
            print(f"  {k}: {v}")
    placed = sorted({lv["placed"] for lv in levels if lv.get("placed")})
    print(f"  one-process HTTP levels: {placed[0] if placed else 'client and null server where the kernel put them'}")
    print(json.dumps({"min_ratio": round(worst["ratio"], 4),
                      "max_median_ttft_bias_ms": round(bias["ttft_bias_median_ms"], 3), **summ, "placed": placed,
                      "levels": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in lv.items()}
                                 for lv in levels]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

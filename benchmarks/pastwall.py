"""Past the memory wall, for real (issue 57; docs/residency.md): a swap file and a cgroup v1 memory group made
here, llama.cpp decoding the embedded Gemma 3 270M and a larger self-made GGUF (engines/gguf_synth.py) inside the
group at three limits around its working set, the weights mmap'ed and loaded into memory (use_mmap=False). For each
limit: the residency roofline's tok/s (core/residency.residency_step: the step measured with no limit, the bytes
that no longer fit, this machine's storage rates measured first by machine/storage.py) beside the measured tok/s,
the major faults a token and the swap-in and file read-in MB/s read live (machine/residency.py).

Needs root, Linux with cgroup v1's memory controller at /sys/fs/cgroup/memory and swapon. Everything it makes is
removed at the end, on an error, on Ctrl-C and on SIGTERM: the decoding process killed, the group removed, the
swap turned off and its file deleted (the JSON line says what was left: swap_left_bytes, cgroups_left).

    python benchmarks/pastwall.py [--swap-gib 4] [--tokens 32] [--seconds 8] [--quick]

Ends with one JSON line: worst_error (max |predicted ÷ measured − 1| over the limits), each run's figures.
Goal: every limit within 30 %, the whole under 10 minutes. A run the kernel's OOM killer ends (loaded weights a
little past the limit, now and then) is measured by the tokens it decoded before, if there were 3, and marked
oom_killed in its row; one ended sooner is tried again, up to 3 tries.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measure.core.residency import StorageRates, residency, residency_step  # noqa: E402
from measure.machine.residency import ResidencyProbe, mincore_resident  # noqa: E402
from measure.machine.storage import remove_group  # noqa: E402

CG_ROOT = Path("/sys/fs/cgroup/memory")
CG_NAME = "inference-top-pastwall"
SHARES = (1.10, 0.70, 0.60)  # limits, as a share of the working set measured with no limit
# Tries at a limit: the kernel's OOM killer ends some runs of loaded weights in a cgroup v1 group past its limit
# though every page is clean swap cache (the inactive list empty; at 0.68-0.70 of the embedded model's working set,
# 3 of 4 tries, docs/measurements.md §21): each ended try is counted in its row and said, not hidden.
TRIES = 3
# A try the OOM killer ends after this many tokens at the limit is measured by them (their rate, the counters read
# at the last of them, the row marked oom_killed); one ended sooner is tried again
MIN_TOKENS = 3
CTX = 256
CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from engines.base import EngineSpec, Prompt
from engines.registry import make_engine
e = make_engine(EngineSpec("llama", sys.argv[2], threads=int(sys.argv[3]), ctx=int(sys.argv[4]),
                           options={"use_mmap": sys.argv[5] == "mmap"}))
e.load()
toks = e.tokenize(Prompt("pastwall", text="The history of the printing press begins"))
for _ in e.generate(toks, 6, True):  # warm: the step's pages as the limit lets them be
    pass
print("ready", flush=True)
sys.stdin.readline()
n, limit_s, ts = int(sys.argv[6]), float(sys.argv[7]), []
for _, t in e.generate(toks, n, True):
    ts.append(t)
    print(f"t {t}", flush=True)  # each token as it comes: a run the OOM killer ends keeps the tokens it made
    if len(ts) >= 4 and (t - ts[0]) / 1e9 > limit_s:
        break
print("end", flush=True)
sys.stdin.readline()
"""


class Cleanup:
    """What this run made, undone in reverse order whatever happens (a signal becomes SystemExit: finally runs)."""

    def __init__(self) -> None:
        self.swap: Path | None = None
        self.group: Path | None = None
        self.child: subprocess.Popen[str] | None = None
        self.tmp: Path | None = None

    def kill_child(self) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.kill()
            self.child.wait(timeout=30)
        self.child = None

    def __call__(self) -> None:
        self.kill_child()
        if self.group is not None:
            remove_group(self.group)
        if self.swap is not None:
            subprocess.run(["swapoff", str(self.swap)], capture_output=True)
            self.swap.unlink(missing_ok=True)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


def swap_left(path: Path | None) -> int:
    """Bytes of our swap file still in /proc/swaps' table (its size, in KiB there), 0 when gone."""
    if path is None:
        return 0
    for line in Path("/proc/swaps").read_text().splitlines()[1:]:
        f = line.split()
        if f and f[0] == str(path):
            return int(f[2]) * 1024
    return 0


def make_swap(where: Path, gib: float, undo: Cleanup) -> Path:
    path = where / "pastwall.swap"
    undo.swap = path
    subprocess.run(["fallocate", "-l", str(int(gib * 2**30)), str(path)], check=True)
    path.chmod(0o600)
    subprocess.run(["mkswap", str(path)], check=True, capture_output=True)
    subprocess.run(["swapon", str(path)], check=True)
    return path


def set_limit(group: Path, limit: int) -> None:
    """The group's memory.limit_in_bytes (-1: none)."""
    (group / "memory.limit_in_bytes").write_text(str(limit))


def working_set(group: Path) -> int:
    """What the group holds that a decode step uses: its anonymous memory and its mapped file pages (the model's
    mapping, the interpreter's and llama.cpp's code), not the page cache of files read once (the model read at load
    with use_mmap off), which is reclaimed first."""
    from measure.core.residency import parse_counters

    st = parse_counters((group / "memory.stat").read_text())
    return st.get("total_rss", st.get("rss", 0)) + st.get("total_mapped_file", st.get("mapped_file", 0))


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@dataclass
class Run:
    model: str
    how: str  # mmap | loaded
    limit: int | None
    tps: float
    tokens: int
    res: dict[str, Any]
    usage: int
    seconds: float
    killed: bool = False  # the OOM killer ended it after `tokens` tokens: tps is theirs


def decode_in(group: Path, model: Path, how: str, args: argparse.Namespace, undo: Cleanup,
              weights: int, limit: int = -1, ended: list[int] | None = None) -> Run | None:
    """One child decoding inside `group`: loaded and warmed with no limit, then the group brought down to `limit`
    (the kernel reclaims the excess: swapped or dropped, as where other work takes the memory), then read, timed and
    read again. Loading below the limit was the OOM killer's, now and then, at any of the three limits (llama.cpp
    reading the file into memory through a page cache the group also holds): not the step past the wall."""
    set_limit(group, -1)
    drop_cache(model)
    cg_procs = str(group / "cgroup.procs")

    def enter() -> None:  # in the child, before exec: the interpreter and llama.cpp both live in the group
        with open(cg_procs, "w") as f:
            f.write(str(os.getpid()))

    t0 = time.perf_counter()
    env = dict(os.environ, INFERENCE_TOP_CACHE=str(undo.tmp), INFERENCE_TOP_LOGS=str(undo.tmp))
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(ROOT), str(model), str(args.threads), str(CTX), how,
                          str(args.tokens), str(args.seconds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, preexec_fn=enter, env=env)
    undo.child = p
    assert p.stdin is not None and p.stdout is not None
    if p.stdout.readline().strip() != "ready":
        if p.wait() == -signal.SIGKILL:  # the OOM killer, with no limit: the machine itself is short
            return None
        raise RuntimeError(f"the decoding process ended before it was ready ({model.name}, {how}, exit {p.wait()})")
    try:
        set_limit(group, limit)
    except OSError:  # EBUSY: the kernel could not reclaim down to it (nothing left to swap or drop)
        return None
    probe = ResidencyProbe(str(model.resolve()) if how == "mmap" else None, weights, mincore=False)
    before = probe.read([p.pid], 0)
    p.stdin.write("go\n")
    p.stdin.flush()
    ts: list[int] = []  # each token's time (ns), as the child wrote it
    after, read_at, killed = None, 0.0, True
    while (line := p.stdout.readline()):
        if line.strip() == "end":
            killed = False
            break
        ts.append(int(line[2:]))
        if time.monotonic() - read_at > 0.25:  # the counters as of this token, for a run that ends here
            reading = probe.read([p.pid], len(ts))
            if reading.procs:
                after, read_at = reading, time.monotonic()
    if killed:  # the OOM killer: what it decoded before is a measurement at this limit if there are 3 tokens
        p.wait()
        if len(ts) < MIN_TOKENS or after is None:
            if ended is not None:
                ended.append(len(ts))  # the tokens it made at the limit before the kill
            return None
    else:
        after = probe.read([p.pid], len(ts))
    tps = (len(ts) - 1) / ((ts[-1] - ts[0]) / 1e9)  # the decode steps between the first token and the last
    mc = mincore_resident(model) if how == "mmap" else None
    res = residency(before, after).fields()
    res["weights_in_page_cache"] = mc
    usage = working_set(group)
    if not killed:
        p.stdin.write("bye\n")
        p.stdin.flush()
    undo.kill_child()
    limit = after.sys.cgroup_limit
    return Run(model.name, how, limit, tps, len(ts), res, usage, time.perf_counter() - t0, killed)


def predict(base: Run, limit: int, touched: float, other: float, rates: StorageRates, how: str) -> tuple[float, Any]:
    """The residency roofline's tok/s at `limit`: the step measured with no limit, the room left for the weights
    once the rest of the working set (`other`: runtime, KV, the interpreter, code) is in."""
    t_res = 1.0 / base.tps
    step = residency_step(t_res, touched, limit - other, rates, how == "mmap")
    return 1.0 / step.t_step_s, step


def one_model(name: str, path: Path, group: Path, args: argparse.Namespace, rates: StorageRates, undo: Cleanup
              ) -> list[dict[str, Any]]:
    from engines.gguf_file import inspect_gguf
    from measure.core.work import from_gguf

    info = inspect_gguf(path)
    work = from_gguf(info)
    weights = info.file_bytes
    touched = work.read_bytes(1)
    rows = []
    for how in ("mmap", "loaded"):
        for share in args.shares:
            base = decode_in(group, path, how, args, undo, weights)  # with no limit, just before (the box drifts)
            if base is None:
                raise RuntimeError(f"{name} {how} was killed with no limit")
            ws = base.usage  # the working set: anonymous memory and mapped file pages while decoding with no limit
            other = ws - (min(weights, base.res["weights_resident_bytes"]) if how == "mmap" else weights)
            limit = int(ws * share)
            run, ended, made = None, 0, []
            while run is None and ended < TRIES:
                run = decode_in(group, path, how, args, undo, weights, limit, made)
                ended += run is None
            if ended:
                print(f"{name} {how} at {share:.2f}: {ended} of {ended + (run is not None)} tries ended before a "
                      f"measurement (the kernel's OOM killer; tokens made at the limit: {made or 'none'})", flush=True)
            rows.append(_row(name, how, share, limit, ws, other, base, run,
                             predict(base, limit, touched if how == "mmap" else weights, other, rates, how))
                        | {"tries_ended_early": ended, "ended_tries_tokens": made})
    return rows


def _row(name: str, how: str, share: float, limit: int, ws: int, other: int, base: Run, run: Run | None,
         pred: tuple[float, Any]) -> dict[str, Any]:
    tps, step = pred
    head = (f"{name} {how} limit {limit / 2**20:4.0f} MiB ({share:.2f} × working set {ws / 2**20:.0f} MiB): "
            f"no limit {base.tps:5.2f} tok/s, predicted {tps:6.2f}")
    row: dict[str, Any] = {"model": name, "weights": how, "limit_bytes": limit, "share_of_working_set": share,
                           "working_set_bytes": ws, "room_bytes": limit - other, "predicted_tps": round(tps, 3),
                           "no_limit_tps": round(base.tps, 3), "collapse_predicted": round(tps / base.tps, 3),
                           "nonresident_bytes_per_step": round(step.nonresident_bytes), "via": step.via}
    if run is None:
        print(f"{head}, measured: none (the OOM killer ended it, or the group could not reclaim down to the "
              "limit)", flush=True)
        return row | {"measured_tps": None, "error": None, "oom_killed": True}
    r = run.res
    back = (r["swap_in_mbps"] if how == "loaded" else r["file_read_mbps"]) * 1e6 / run.tps
    err = tps / run.tps - 1
    killed = f" over its {run.tokens} tokens before the OOM killer ended it" if run.killed else ""
    print(f"{head}, measured {run.tps:6.2f} ({err:+.0%}){killed}; back a step: predicted "
          f"{step.nonresident_bytes / 2**20:.0f} MiB, measured {back / 2**20:.0f}; {r['major_faults_per_token']} major "
          f"faults/token, swap-in {r['swap_in_mbps']:.1f} MB/s, read-in {r['file_read_mbps']:.1f} MB/s", flush=True)
    return row | {"measured_tps": round(run.tps, 3), "error": round(err, 4),
                  "collapse_measured": round(run.tps / base.tps, 3), "measured_back_bytes_per_token": round(back),
                  "major_faults_per_token": r["major_faults_per_token"], "swap_in_mbps": r["swap_in_mbps"],
                  "file_read_mbps": r["file_read_mbps"], "residency": r, "seconds": round(run.seconds, 1),
                  "tokens": run.tokens, "oom_killed": run.killed}


def models(tmp: Path, quick: bool) -> list[tuple[str, Path]]:
    """The embedded model, copied here so its pages are charged to the group (a page is charged to the group that
    first read it), and a larger self-made one."""
    from engines.embedded import embedded_model_path
    from engines.gguf_synth import SynthShape, write_model

    emb = tmp / "gemma-3-270m.gguf"
    shutil.copyfile(embedded_model_path(lambda m: None), emb)
    out = [("gemma-3-270m-q4_k_m", emb)]
    if not quick:
        shape = SynthShape(hidden=2048, layers=10, heads=16, kv_heads=4, ffn=5632, experts=0, vocab=2048, ctx=1024)
        out.append(("synthetic dense 10L h2048", write_model(tmp / "synth.gguf", shape)))
    return out


def refuse() -> str | None:
    if sys.platform != "linux":
        return "pastwall: needs Linux (cgroup v1 memory controller, swapon)"
    if os.geteuid() != 0:
        return "pastwall: needs root (it makes a swap file and a memory cgroup)"
    if not (CG_ROOT / "memory.limit_in_bytes").exists():
        return f"pastwall: no cgroup v1 memory controller at {CG_ROOT}"
    if shutil.which("swapon") is None or shutil.which("mkswap") is None:
        return "pastwall: swapon/mkswap not found"
    if (CG_ROOT / CG_NAME).exists():
        return f"pastwall: {CG_ROOT / CG_NAME} exists (another run?); remove it first"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--swap-gib", type=float, default=4.0)
    ap.add_argument("--tokens", type=int, default=32, help="tokens decoded a run at most")
    ap.add_argument("--seconds", type=float, default=8.0, help="a run stops after this many seconds of decode")
    ap.add_argument("--threads", type=int, default=1, help="one: a spinning barrier of two threads on a shared 2-core box times the other work, not the memory")
    ap.add_argument("--quick", action="store_true", help="the embedded model only")
    ap.add_argument("--swappiness", type=int, default=60, help="the group's memory.swappiness (the kernel's default)")
    ap.add_argument("--shares", default=",".join(f"{s:.2f}" for s in SHARES),
                    help="the limits, as shares of the working set measured with no limit, comma-separated")
    args = ap.parse_args(argv)
    given = args.shares
    try:
        args.shares = tuple(float(s) for s in given.split(","))
    except ValueError:
        ap.error(f"--shares {given!r}: give shares of the working set such as 1.10,0.70,0.60")
    if any(not 0.1 <= s <= 4 for s in args.shares):
        ap.error(f"--shares {given!r}: each share between 0.1 and 4 (1.0 = the working set with no limit)")
    why = refuse()
    if why:
        print(why, file=sys.stderr)
        return 2
    undo = Cleanup()

    def on_signal(sig: int, _frame: object) -> None:
        raise SystemExit(f"pastwall: {signal.Signals(sig).name}: cleaning up")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    t0, load0 = time.time(), os.getloadavg()
    rows: list[dict[str, Any]] = []
    rates: StorageRates | None = None
    try:
        undo.tmp = Path(tempfile.mkdtemp(prefix="pastwall-", dir="/var/tmp"))
        from measure.machine.storage import memcg_rates, probe_storage

        make_swap(undo.tmp, args.swap_gib, undo)
        rates = memcg_rates(probe_storage(undo.tmp), undo.tmp)  # with the swap on: its rates too
        print(rates.describe(), flush=True)
        undo.group = CG_ROOT / CG_NAME
        undo.group.mkdir()
        (undo.group / "memory.swappiness").write_text(str(args.swappiness))
        for name, path in models(undo.tmp, args.quick):
            rows += one_model(name, path, undo.group, args, rates, undo)
    finally:
        swap_path = undo.swap
        undo()
    left_swap = swap_left(swap_path)
    left_groups = [d.name for d in CG_ROOT.iterdir() if d.is_dir() and d.name.startswith(CG_NAME)]
    errors = [abs(r["error"]) for r in rows if r["error"] is not None]
    worst = max(errors) if errors else None  # over the limits measured; one ended early (the OOM killer) fails
    unmeasured = len(rows) - len(errors)  # the goal, and is counted apart
    met = worst is not None and worst <= 0.30 and not unmeasured
    ended = sum(r.get("tries_ended_early", 0) for r in rows)
    print(f"worst error {worst:.0%} over {len(errors)} of {len(rows)} limits measured ({unmeasured} ended before a "
          f"measurement; {ended} tries ended early and were tried again); swap left {left_swap} B, cgroups left "
          f"{left_groups}; {time.time() - t0:.0f} s; load "
          f"average {load0[0]:.2f} → {os.getloadavg()[0]:.2f}" if worst is not None else "no limit measured")
    print(json.dumps({"worst_error": worst, "goal": 0.30, "met": met, "unmeasured": unmeasured,
                      "swap_left_bytes": left_swap, "cgroups_left": len(left_groups), "swappiness": args.swappiness,
                      "tries_ended_early": ended, "seconds": round(time.time() - t0),
                      "load_before": round(load0[0], 2), "load_after": round(os.getloadavg()[0], 2),
                      "storage": rates.__dict__ if rates else None, "runs": rows}))
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())

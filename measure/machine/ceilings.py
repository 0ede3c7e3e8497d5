"""The machine's measured ceilings (`inference-top probe`): what this machine attains, beside the chip's
spec figure. Run once, cached per machine, re-run on request; a few seconds.

- Memory read bandwidth, 1 … all cores: each process sums its own 256 MB float32 array (larger than any
  cache) for 0.6 s; GB/s = bytes read ÷ time. Processes, not threads: numpy holds the GIL in a sum.
- The engine's data path: llama.cpp decoding the embedded model (or --model) at 1 … all threads, tokens
  per second of one stream, and its prefill rate with all threads: what a core does with these weights,
  and how threads scale inside one process. The roofline predictor (roofline.py) starts from these.
- Cores, memory, swap, and the chip's name as the OS reports it.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import queue
import statistics
import time
from dataclasses import asdict, replace
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from measure.core.readings import BUSY_LIMIT, PROBE_VERSION, Ceilings, other_work_cores
from measure.machine.probes import machine_key as machine_key  # (the cache's key: here before, where tests and callers find it)

if TYPE_CHECKING:
    import multiprocessing.queues

    from measure.machine.model_choice import ModelChoice

READ_BYTES = 64 * 1024 * 1024 * 4  # per process
READ_S = 0.6
MIN_READ_BYTES = 32 * 1024 * 1024  # a reader's buffer at the least (past a core's share of most last-level caches)
DECODE_TOKENS = 40
DECODE_RUNS = 3  # one run of 40 tokens at 2 threads read 59.7 tok/s where the engine's own runs that hour spread
# over 48–63: the probe takes the median of three, the thread counts in turn
PREFILL_TOKENS = 128
BATCH_TEXTS = ("The quick brown fox", "Once upon a time", "In the beginning", "Dear Sir or Madam",
               "The results show that", "To install the package", "My favourite recipe is", "Yesterday the market")
BATCH_BS = (2, 8)  # llama.cpp's CPU path for a batch of one (matrix × vector) is not its path for more
BATCH_RUNS = 3  # the batches in turn, each rate the median of its runs: one run of B = 8 read 54.3 ms a step
# on an EPYC VM where the engine alone's median was 47–50 (runs 43–77 ms), and the line through it priced B = 16
# 18–30 % slow and B = 2, 4 12–17 % fast after calibration (docs/measurements.md §31)
LOGITS_RUNS = 3  # a prompt with every row's logits at each of LOGITS_WIDTHS: the median of each, the widths in turn,
# after one unmeasured run (the first is 15 % slower here); one each where that run took LOGITS_LONG_S or more (a large
# model on a CPU: 8 widths × 3 runs of up to ~10 s would add minutes to its probe)
LOGITS_LONG_S = 1.0
# a batch step of B sequences runs the matmuls a prompt of B tokens with every row's logits runs (llama_decode alone,
# 2 threads: B = 2, 3, 4, 8, 16, the batch 0–9 % dearer), and a further column's price depends on the width it is
# added at (8 → 16: 2.9–3.4 ms, 16 → 32: 3.6–4.3, here; a third column in a tile of 4 columns 3.9–5.0, the fourth
# 2.3–2.4; docs/measurements.md §30): the probe times a prompt at each width
LOGITS_WIDTHS = (2, 3, 4, 8, 16, 32, 64, 128)
# a prompt asking every row's logits holds each row twice while it runs, in llama.cpp's output buffer and in the
# graph's result tensor: 128 rows of Gemma 3's 262,144-token vocabulary added 256.5 MiB of anonymous memory to the
# probe's engine (2 × 4 B × n_vocab a row); in a 400 MiB memory cgroup those rows and the batch stage after them
# took the engine past the limit (OOM-killed in its batch stage after 2 min 40 s of paging), so the widths are the
# ones whose rows fit the room the group has left, less LOGITS_SPARE for the graph's other buffers
LOGITS_ROW_COPIES = 2
LOGITS_SPARE = 32 << 20


def medians_in_turn(keys: Sequence[int], runs: int, measure: Callable[[int], float]) -> dict[str, float]:
    """{str(key): the median of `runs` measures of it}, the keys measured in turn in each run (a machine that slows
    for a while slows every key's run alike, not one key's every run)."""
    got: dict[int, list[float]] = {k: [] for k in keys}
    for _ in range(runs):
        for k in keys:
            got[k].append(measure(k))
    return {str(k): statistics.median(v) for k, v in got.items()}


def logits_widths(room: int | None, row_bytes: int) -> tuple[int, ...]:
    """The LOGITS_WIDTHS whose rows of logits (`row_bytes` each, LOGITS_ROW_COPIES included) fit `room` bytes of
    memory less LOGITS_SPARE; every width where the room is unknown (None)."""
    if room is None:
        return LOGITS_WIDTHS
    return tuple(w for w in LOGITS_WIDTHS if w * row_bytes <= room - LOGITS_SPARE)


def logits_times(e: Any, prompt: list[int], room: int | None = None) -> dict[str, float] | None:
    """Seconds a prompt of each of LOGITS_WIDTHS tokens (the first of `prompt`) takes with every row's logits
    asked, all threads: a batch step of as many columns, whose further columns' price at each width the roofline
    reads from the differences (docs/design/kernels.md, "The CPU"); None for an engine that cannot ask for them,
    or where fewer than two widths' rows fit `room` (bytes of memory left to the engine: logits_widths)."""
    row = LOGITS_ROW_COPIES * 4 * int(getattr(e, "n_vocab", 0))
    widths = [w for w in logits_widths(room, row) if w <= len(prompt)]
    if not hasattr(e, "prompt_logits_s") or len(widths) < 2:
        return None
    runs = LOGITS_RUNS if e.prompt_logits_s(prompt[: widths[-1]]) < LOGITS_LONG_S else 1
    return medians_in_turn(widths, runs, lambda w: e.prompt_logits_s(prompt[:w]))


def room_bytes() -> int:
    """Memory this process may still take: the machine's available memory, and its memory cgroup's limit less
    the group's use where it has one (page cache included: the model's mmap'ed pages are the group's to keep)."""
    from measure.machine.residency import sys_memory

    room = psutil.virtual_memory().available
    m = sys_memory()
    if m.cgroup_limit is not None and m.cgroup_usage is not None:
        room = min(room, m.cgroup_limit - m.cgroup_usage)
    return max(0, room)


def batch_rates(e: Any, seq_toks: list[list[int]]) -> dict[str, float]:
    """Steps a second of each of BATCH_BS sequences decoded together in one context (each its own prompt, past
    the prompts' steps), the batches in turn, each the median of BATCH_RUNS runs."""
    b = e.batch(max(BATCH_BS), 256)

    def rate(n: int) -> float:
        for i in range(n):
            b.add(i, seq_toks[i % len(seq_toks)], DECODE_TOKENS // 2 + 4, True)
        steps: list[int] = []
        while b.active():
            steps.append(b.step()[0])
        steady = steps[4:]  # past the prompts
        return (len(steady) - 1) / ((steady[-1] - steady[0]) / 1e9)

    return medians_in_turn(BATCH_BS, BATCH_RUNS, rate)


def _cache() -> Path:
    return Path(os.environ.get("INFERENCE_TOP_CACHE", Path.home() / ".cache" / "inference-top")) / "probe.json"


def _key(model: ModelChoice | None, within: bool = True) -> str:
    """The cache's key: this machine (machine_key), and the model whose engine rates were measured where it is
    not the embedded one (a model's own probe: its kernels, its experts; docs/design/model-reads.md)."""
    if model is None or model.embedded:
        return machine_key(within)
    st = Path(model.path).stat()
    return f"{machine_key(within)}|{Path(model.path).resolve()}|{st.st_size}|{st.st_mtime_ns}"


def cached(model: ModelChoice | None = None, disturbed: bool = False, within: bool = True) -> Ceilings | None:
    """The probe cached for this machine (and model). One taken while other work used the machine (Ceilings.busy)
    is not this machine's figure: it is returned only when asked for (`disturbed`), for get() to weigh (issue 55:
    a probe cached while the test suite ran read 5.7 tok/s where 39 were measured). `within` False: the one taken
    outside any memory limit (machine_key)."""
    try:
        d = json.loads(_cache().read_text()).get(_key(model, within))
    except (OSError, ValueError):
        return None
    if not d or d.get("version") != PROBE_VERSION:
        return None
    c = Ceilings(**d)
    return c if disturbed or not c.busy else None


def _save(c: Ceilings, model: ModelChoice | None = None) -> None:
    from measure.machine.storage import put_entry

    put_entry(_cache(), _key(model), asdict(c))


def _cpu_times() -> tuple[float, float]:
    """(the whole machine's busy CPU seconds, hypervisor steal included; this process's and its reaped
    children's)."""
    from measure.machine.probes import busy_cpu_seconds

    me = psutil.Process().cpu_times()
    return busy_cpu_seconds(), me.user + me.system + me.children_user + me.children_system


def others_cores(before: tuple[float, float], after: tuple[float, float], wall_s: float) -> float:
    """Other work's CPU between two _cpu_times() readings, in cores: the machine's busy time less ours."""
    if wall_s <= 0:
        return 0.0
    return other_work_cores((after[0] - before[0]) / wall_s, (after[1] - before[1]) / wall_s)


def _read_worker(q: multiprocessing.queues.Queue[float], size: int = READ_BYTES) -> None:
    import numpy as np

    _expendable("self")  # (and by its parent as it starts: before this process's imports)

    a = np.ones(size // 4, dtype=np.float32)
    a.sum()  # touch every page before timing
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < READ_S:
        a.sum()
        n += 1
    q.put(n * size / (time.perf_counter() - t0) / 1e9)


def _expendable(pid: str) -> None:
    """The OOM killer's first choice (Linux: oom_score_adj 1000), so that in a container it ends a probe's reader
    (said in one line) and not the dashboard that spawned it."""
    try:
        Path(f"/proc/{pid}/oom_score_adj").write_text("1000")
    except OSError:
        pass


class ProbeError(RuntimeError):
    """The probe could not measure: one line saying why and what to do."""


def read_bytes_within(limit: int, processes: int) -> int:
    """Each reader's buffer: READ_BYTES, or less where the tightest memory limit (a container's) would not hold
    every reader's buffer with room to spare (a quarter of the limit between them; at least MIN_READ_BYTES). In a
    400 MiB cgroup two 256 MiB readers were OOM-killed and the dashboard ended on a traceback."""
    return max(MIN_READ_BYTES, min(READ_BYTES, limit // 4 // max(1, processes)) // (1 << 20) * (1 << 20))


def probe_read_gbps(processes: int, timeout_s: float = 60.0, within: tuple[int, str] | None = None) -> float:
    """GB/s of `processes` readers summing their own buffers at once, each sized to the tightest memory limit
    (`within`: probes.effective_memory's (bytes, name), read here where not given). ProbeError, one line, for a
    reader that ended without its figure (the OOM killer in a container) or took over `timeout_s`."""
    from measure.machine.probes import effective_memory

    limit, limit_name = within or effective_memory()
    size = read_bytes_within(limit, processes)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_read_worker, args=(q, size), daemon=True) for _ in range(processes)]
    for p in ps:
        p.start()
        _expendable(str(p.pid))
    got: list[float] = []
    end = time.monotonic() + timeout_s
    try:
        while len(got) < len(ps):
            try:
                got.append(q.get(timeout=0.2))
                continue
            except queue.Empty:
                pass
            dead = [p for p in ps if p.exitcode not in (None, 0)]
            if dead and q.empty():
                code = dead[0].exitcode or 0
                how = f"signal {-code}" if code < 0 else f"exit {code}"
                raise ProbeError(f"the memory bandwidth probe's reader ended ({how}) with {size >> 20} MiB to read "
                                 f"under {limit_name} = {limit / 2**30:.2f} GiB: the OOM killer? Give --bandwidth "
                                 "GB/s, or run where the limit leaves more room")
            if time.monotonic() > end:
                raise ProbeError(f"the memory bandwidth probe's readers gave no figure in {timeout_s:.0f} s "
                                 f"({processes} readers of {size >> 20} MiB); give --bandwidth GB/s")
    finally:
        for p in ps:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return sum(got)


def _major_faults() -> int:
    try:
        import resource
    except ImportError:  # (Windows)
        return 0
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_majflt)


def stage_faults(conn: Connection, stage: str, faults: dict[str, int]) -> None:
    """Send the stage now begun (`stage`; "" at the end) and close the one before in `faults`: its major page
    faults, the pages it waited for from the disk (the model's file, swap) rather than memory."""
    now = _major_faults()
    if faults:
        last = next(reversed(faults))
        faults[last] = now - faults[last]
    if stage:
        faults[stage] = now
        conn.send(("stage", stage))


def _engine_worker(spec_dict: dict[str, Any], cores: int, conn: Connection) -> None:
    """The engine's rates, measured in this (spawned) process. Before each stage it sends ("stage", name)
    to the parent, so that a parent whose child dies (a segfault in the engine's C code, an OOM kill) can
    name the stage it died in; at the end it sends the rates, or {"error": …} for an engine that raised."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # llama.cpp's C code prints its load log to fds 1 and 2
    os.dup2(null, 2)
    faults: dict[str, int] = {}  # each stage's major page faults (stage_faults)
    try:
        from engines.base import EngineSpec, Prompt
        from engines.registry import make_engine

        stage_faults(conn, "load", faults)
        e = make_engine(EngineSpec(**spec_dict))
        e.load()
        stage_faults(conn, "warmup", faults)
        e.warmup()
        stage_faults(conn, "decode", faults)
        toks = e.tokenize(Prompt("probe", text="The quick brown fox"))
        # a batch's sequences each get a prompt of their own: identical sequences would route every token of a step
        # to the same experts of a mixture of experts, which no real load does
        seq_toks = [e.tokenize(Prompt("probe", text=f"Request {i}: {t}")) for i, t in enumerate(BATCH_TEXTS)]

        def decode_rate(threads: int) -> float:
            e.set_threads(threads)
            ts = [t_ns for _, t_ns in e.generate(toks, DECODE_TOKENS, True)]
            return (len(ts) - 1) / ((ts[-1] - ts[0]) / 1e9)

        decode = medians_in_turn(range(1, cores + 1), DECODE_RUNS, decode_rate)  # thread counts in turn
        stage_faults(conn, "prefill", faults)
        e.set_threads(cores)
        prompt = e.tokenize(Prompt("probe", synthetic_tokens=PREFILL_TOKENS))
        t0 = time.perf_counter_ns()
        first = next(iter(e.generate(prompt, 1, True)))[1]
        prefill = PREFILL_TOKENS / ((first - t0) / 1e9)
        # B sequences decoded together in one context: a step's fixed cost and each sequence's
        stage_faults(conn, "batch", faults)
        batch = batch_rates(e, seq_toks)
        stage_faults(conn, "logits", faults)  # last, its rows in the room the rest leaves (LOGITS_ROW_COPIES)
        room = room_bytes()
        logits = logits_times(e, prompt, room)
        feats = e.cpu_features() if hasattr(e, "cpu_features") else []  # the batch path's code (kernels.toml [cpu])
        stage_faults(conn, "", faults)
        conn.send({"decode_tps": decode, "prefill_tps": prefill, "batch_steps_per_s": batch, "cpu_features": feats,
                   **({"logits_s": logits} if logits else {}), "logits_room_bytes": room, "major_faults": faults})
        e.close()
    except Exception as exc:  # noqa: BLE001 - the probe reports what it could not measure
        conn.send({"error": f"{type(exc).__name__}: {exc}"})


def _exit_text(code: int | None) -> str:
    """How a child process ended, in words: 'killed by SIGSEGV', 'exit code 3'."""
    import signal

    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def engine_rates(model_path: str, cores: int, engine: str = "llama", options: dict[str, Any] | None = None,
                 stage_timeout_s: float = 300.0) -> dict[str, Any]:
    """The engine's own rates on this model, in a process of its own (the caller loads no engine).

    Never waits on a dead child: its messages come over a pipe (a send is written at once, unlike a
    multiprocessing.Queue's feeder thread, so a stage sent just before a crash is not lost), read in
    short slices with the child's liveness checked between them. An engine that dies (a crash in its
    C code, an OOM kill) is reported within a fraction of a second as {"error": "… died in its <stage>
    stage (killed by SIGSEGV)", "stage": …}; a stage that runs past stage_timeout_s is ended and
    reported the same way."""
    from engines.base import EngineSpec

    spec = EngineSpec(engine, model_path, threads=cores, ctx=512, options=dict(options or {}))
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_engine_worker, args=(spec.to_dict(), cores, send), daemon=True)
    p.start()
    send.close()  # the child holds the only write end: its death reads as EOF here
    stage, since = "start", time.monotonic()
    try:
        while True:
            if recv.poll(0.2):
                try:
                    msg = recv.recv()
                except (EOFError, OSError):
                    p.join(timeout=2)
                    return {"error": f"the {engine} engine process died in its {stage} stage "
                                     f"({_exit_text(p.exitcode)})", "stage": stage}
                if isinstance(msg, tuple) and msg[0] == "stage":
                    stage, since = msg[1], time.monotonic()
                    continue
                rates: dict[str, Any] = msg
                return rates
            if time.monotonic() - since > stage_timeout_s:
                p.kill()
                return {"error": f"the {engine} engine's {stage} stage ran past {stage_timeout_s:.0f} s "
                                 "and was ended", "stage": stage}
    finally:
        recv.close()
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
            p.join(timeout=2)


PAGED_FAULTS = 50  # a probe stage with more major faults than this waited on the disk: a resident engine took 0 in
# every measured stage on this VM, one paging in a 400 MiB memory cgroup 3,347 in its batch stage (5.6 steps/s for
# the 44 and 23.5 outside) and none in its decode and prefill (docs/residency.md)
PAGED_KEYS = {"decode": ("decode_tps", "prefill_tps"), "prefill": ("decode_tps", "prefill_tps"),
              "batch": ("batch_steps_per_s",), "logits": ("logits_s",)}  # what a stage's rates are; one stage's
# paging leaves the others' rates standing, except that decode and prefill stand or fall together (the roofline
# has no engine without both)


def paged_stages(engine: dict[str, Any]) -> list[str]:
    """The probe's stages (PAGED_KEYS' order) whose major faults were past PAGED_FAULTS."""
    faults = engine.get("major_faults") or {}
    return [stage for stage in PAGED_KEYS if faults.get(stage, 0) > PAGED_FAULTS]


def drop_paged(engine: dict[str, Any], within: str) -> tuple[dict[str, Any], list[str]]:
    """(the engine's rates less those of stages that paged, paged_stages; a line for each stage dropped): a rate
    measured while the engine waited for its pages is the memory limit's (`within`, in words), not the chip's."""
    faults = engine.get("major_faults") or {}
    out, said = dict(engine), []
    for stage in paged_stages(engine):
        for k in PAGED_KEYS[stage]:
            out.pop(k, None)
        said.append(f"the engine's {stage} stage paged against {within} ({faults[stage]} major faults): its "
                    f"rates are not kept (measure them outside the limit once: `inference-top probe`)")
    return (out if "decode_tps" in out else {}), said


def logits_note(engine: dict[str, Any]) -> str:
    """What a probe whose prompts with every row's logits did not fit every width (logits_widths) says."""
    widths = sorted(int(w) for w in engine.get("logits_s") or ())
    room = engine.get("logits_room_bytes")
    where = f" in the {room / 2**20:.0f} MiB of memory left to it" if room is not None else ""
    if len(widths) < 2:
        return (f"a prompt with every row's logits was not timed{where}: a batch past B = "
                f"{max(BATCH_BS)} is priced by the probe's batches' line")
    return (f"a prompt with every row's logits timed at {', '.join(map(str, widths))} tokens{where}, not "
            f"{LOGITS_WIDTHS[-1]}: a batch's columns past {widths[-1]} take the price of the last width")


def probe(model: ModelChoice | None = None, say: Callable[[str], None] = print) -> Ceilings:
    """Measure now (and cache). `model`: a ModelChoice for the engine rates (default: the embedded model)."""
    from measure.machine.model_choice import resolve_model
    from measure.machine.probes import detect_chip, effective_memory
    from measure.core.work import from_gguf

    t0 = time.perf_counter()
    cpu0 = _cpu_times()  # how busy the rest of the machine is while this measures (its workers are reaped)
    cores = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    name, _ = detect_chip()
    within = effective_memory()  # read once: every reader count's buffer is sized from it
    limit, limit_name = within
    size = read_bytes_within(limit, cores)
    small = "" if size >= READ_BYTES else (f" (readers of {size >> 20} MiB, not {READ_BYTES >> 20}: {limit_name} "
                                          f"{limit / 2**30:.2f} GiB; a buffer near the last-level cache reads high)")
    say(f"probing {name} ({cores} cores): memory read bandwidth{small} …")
    read = {str(n): probe_read_gbps(n, within=within) for n in range(1, cores + 1)}
    engine = {}
    try:
        choice = model or resolve_model("llama", None, lambda m: None)
        outside = cached(model, within=False) if limit < psutil.virtual_memory().total else None
        if outside is not None and outside.engine:
            # inside a memory limit the engine's stages page against it (a 400 MiB group: 2 min 40 s, then OOM-killed)
            engine = outside.engine
            say(f"the engine's rates: this machine's probe of {outside.measured_at}, taken outside the {limit_name} of "
                f"{limit / 2**30:.2f} GiB (a memory limit changes what stays resident, not what a core does)")
        elif choice.info is not None and choice.info.tensor_bytes is not None and str(choice.path).endswith(".gguf"):
            say(f"probing llama.cpp on {choice.name}: decode at 1 … {cores} threads, prefill …")
            rates = engine_rates(str(choice.path), cores)
            if "error" in rates:
                say(f"the engine could not be probed: {rates['error']}")
            else:
                engine, paged = drop_paged({"model": choice.name, "path": str(choice.path),
                                            "weight_bytes": from_gguf(choice.info).read_bytes(1), **rates},
                                           f"the {limit_name} of {limit / 2**30:.2f} GiB")
                for line in paged:
                    say(line)
                cut = len(engine.get("logits_s") or ()) < len(LOGITS_WIDTHS)  # by the room, not by paging
                if engine and cut and "logits" not in paged_stages(rates):
                    say(logits_note(engine))
    except Exception as exc:  # noqa: BLE001 - bandwidth alone is still a ceiling
        say(f"the engine could not be probed: {type(exc).__name__}: {exc}")
    _storage(model, say)  # the storage's read rates, cached beside (docs/residency.md)
    vm, sw = psutil.virtual_memory(), psutil.swap_memory()
    seconds = time.perf_counter() - t0
    c = Ceilings(machine=platform.node(), chip=name, cores=cores, memory_bytes=vm.total, swap_bytes=sw.total,
                 read_gbps=read, engine=engine, measured_at=_now(),
                 seconds=seconds, busy_cores=round(others_cores(cpu0, _cpu_times(), seconds), 3))
    return c


DISTURBED_REUSE_S = 900.0  # a disturbed probe stands in this long before get() measures again
AGAIN = "measuring it again …"  # the end of the line get() says where a check found the probe stale
CHECK_AFTER_S = 1800.0  # a quiet probe this old (and as long since its last check) is checked before it is used


def _storage(model: ModelChoice | None, say: Callable[[str], None]) -> None:
    """The read rates of the file system holding the model (else the cache's), measured and cached in storage.json
    (machine/storage.py) for the residency roofline."""
    from measure.machine import storage

    where = Path(model.path).parent if model is not None and not model.embedded else _cache().parent
    say(f"probing the storage under {where}: sequential, random 4 KiB, swap-cluster and mmap'ed reads …")
    rates = storage.measured_rates(machine_key(), where)  # once per machine: `probe --rerun` does not redo it
    if rates is not None:
        say(rates.describe())


def get(rerun: bool = False, say: Callable[[str], None] = print, model: ModelChoice | None = None) -> Ceilings:
    """The cached ceilings of this machine, measured first if there are none (or when asked); `model`: the engine
    rates of this model (a GGUF other than the embedded one), cached apart.

    A probe that other work disturbed (Ceilings.busy: more than BUSY_LIMIT cores of others' work while it ran) is
    cached marked as such and said wherever its rates are used (describe(), the Machine's notes, RunPlan.roofline);
    it stands in for at most DISTURBED_REUSE_S, then the machine is measured again and the quieter of the two kept.
    A quiet probe is never replaced by a disturbed one: `probe --rerun` on a busy machine keeps the quiet figure
    and says so. A quiet probe older than CHECK_AFTER_S is checked first (still_current()): where the machine has
    changed under it (a VM's host busier than when it was measured), it is measured again."""
    old = None if rerun else cached(model, disturbed=True)
    why = still_current(old, model) if old is not None and not old.busy else None
    if old is not None and why is None and (not old.busy or _age_s(old) < DISTURBED_REUSE_S):
        return old
    if why:
        say(f"{why}: {AGAIN}")
    if old is None and rerun:
        old = cached(model, disturbed=True)
    new = probe(model, say=say)
    if old is not None and (new.busy_cores or 0.0) > (old.busy_cores or 0.0) and new.busy:
        say(f"the probe ran while other work used {new.busy_cores:.1f} of {new.cores} cores: the cached one of "
            f"{old.measured_at} ({old.busy_cores or 0.0:.1f} cores of others' work) is kept")
        if why:  # not checked again before CHECK_AFTER_S: a busy machine is not probed at every start
            _save(replace(old, checked_at=_now()), model)
        return old
    _save(new, model)
    return new


def still_current(c: Ceilings, model: ModelChoice | None = None) -> str | None:
    """Whether a cached quiet probe is still this machine's: past CHECK_AFTER_S since it was measured or last
    checked, the memory read at every core is measured again (about a second) and compared (Ceilings.stale). Why
    it is not, in words; None where it is (the check's time and figure then cached with it), where it is too new
    to check, or where the check could not judge (other work used the machine meanwhile, or the read failed)."""
    if min(_age_s(c), _age_s(c, c.checked_at)) < CHECK_AFTER_S:
        return None
    cpu0, t0 = _cpu_times(), time.perf_counter()
    try:
        gbps = probe_read_gbps(c.cores)
    except ProbeError:
        return None
    if others_cores(cpu0, _cpu_times(), time.perf_counter() - t0) > BUSY_LIMIT:
        return None
    why = c.stale(gbps)
    if why is None:
        _save(replace(c, checked_at=_now(), checked_gbps=round(gbps, 2)), model)
    return why


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def _age_s(c: Ceilings, at: str | None = None) -> float:
    """Seconds since the probe was measured (its measured_at, local time; or since `at`); unknown: as old as can
    be."""
    try:
        return time.time() - time.mktime(time.strptime(c.measured_at if at is None else at, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return float("inf")

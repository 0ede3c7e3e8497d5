"""The answer of `inference-top tune` in words: the table of candidates, the winner and the command lines that
serve it and reproduce it."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from measure.control.tune.record import CandidateRecord, TuneResult
from measure.control.tune.space import Candidate, Settings

if TYPE_CHECKING:
    from presets import SLO


@dataclass(frozen=True)
class Serving:
    """How an engine's winner is served: the model it reads (an mlx folder for mlx_lm.server, where the tune's
    model is the GGUF it came from) and the environment its server ran in ({threads}: the candidate's), e.g.
    mlx_lm.server's OpenBLAS on Linux (engines/mlx_blas.py)."""

    model: str
    env: tuple[str, ...] = ()


def serve_command(c: Candidate, model: str, ctx: int, server_bin: str = "llama-server",
                  serving: Serving | None = None) -> str:
    """The copy-pasteable command line that serves this candidate (`serving`: its engine's model and environment,
    where not the tune's model)."""
    d = c.decl
    if serving is not None:
        model = serving.model
    if d.starts_server:  # K servers of its own, one port each; `server_bin` is llama-server's program
        program = server_bin if Path(server_bin).name == d.serve_argv[0] else None
        env = [w.format(threads=c.threads) for w in (serving.env if serving else ())]
        return " & ".join(shlex.join([*env, *d.serve(model, 8080 + i, program), *c.server_flags(ctx)])
                          for i in range(c.k))
    if d.serve_argv and c.mode == "instances" and c.k == 1:  # one engine of one request: its own server
        return shlex.join(d.serve(model, 8080))
    return shlex.join(["inference-top", *_local_flags(c, model, ctx)])


def _local_flags(c: Candidate, model: str, ctx: int) -> list[str]:
    out = ["--engine", c.engine, "--model", model, "--k", str(c.k)]
    if c.mode == "batch":
        out += ["--b", str(c.b), "--max-b", str(c.b)]
    out += ["--threads", str(c.threads), "--ctx", str(ctx)]
    if c.decl.flash_attn and not c.flash_attn:
        out.append("--no-flash-attn")
    return out


def bench_command(c: Candidate, model: str, s: Settings, requests: int) -> str:
    """`inference-top bench` at the candidate's settings and the tune's load: its goodput is the tune's, again.
    For llama-server: against the server `serve_command` started."""
    load = ["--users", str(s.users), "--requests", str(requests), "--max-tokens", str(s.max_tokens),
            "--workload", s.workload.key, "--seed", str(s.seed), "--slo", _slo_arg(s.slo)]
    if not s.ignore_eos:
        load.append("--stop-at-eos")
    if c.decl.starts_server:
        urls = [a for i in range(c.k) for a in ("--url", f"http://127.0.0.1:{8080 + i}/v1")]
        tok = ["--tokenizer", model] if c.decl.gguf_tokenizer else []  # prompts as ids where tune sent them so
        return shlex.join(["inference-top", "bench", "--engine", "http", *urls,
                           *tok, "--b", str(s.users), *load])  # one stream a user, as tune ran it
    return shlex.join(["inference-top", "bench", *_local_flags(c, model, s.ctx), *load])


def _slo_arg(slo: SLO) -> str:
    if slo.key in ("interactive", "server"):
        return slo.key
    parts = []
    for name, v in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s), ("e2e", getattr(slo, "e2e_s", None))):
        if v is not None:
            parts.append(f"{name}={v * 1e3:g}ms")
    return ",".join(parts)


def format_result(res: TuneResult) -> str:
    """The answer in one screen: every candidate measured (its longest run) with the prediction's error, the
    front, the winner and the command lines, and how many were not tried and why."""
    rows = [c for c in res.candidates if c.trials]
    n0 = res.settings.requests
    head = (f"{'candidate':<52} {'runs':>4} {f'@n={n0}':>7} {'goodput':>8} {'tok/s':>7} {'in SLO':>6} {'TTFT p99':>9} "
            f"{'TPOT p50':>9} {'pred tok/s':>10} {'err':>6}  note")
    lines = [head, "-" * len(head)]
    won = res.winner.key if res.winner else None

    def order(c: CandidateRecord) -> tuple[bool, int, float, float]:
        """The winner, then by how far the halving took each (its longest run), then goodput there."""
        t = c.last
        if t is None:
            return (won == c.key, 0, -1.0, -1.0)
        return (won == c.key, t.requests, t.goodput_tps or -1.0, t.output_throughput or -1.0)

    lines += [_candidate_line(c, res) for c in sorted(rows, key=order, reverse=True)]
    lines.append(f"@n={n0}: goodput in the first round, where every candidate ran the same {n0} requests; the other "
                 "figures are from its longest run (n), goodput = output tok/s of the requests within the SLO;")
    lines.append("err: (predicted − measured) ÷ measured tok/s (the roofline); ★ winner, ◆ on the Pareto front "
                 "(goodput, TTFT p99"
                 + (", $/Mtok or J/token" if any(t.usd_per_mtok is not None or t.joules_per_token is not None
                                                 for c in rows for t in c.trials) else "") + ")")
    return "\n".join(lines + _result_footer(res))


def _candidate_line(c: CandidateRecord, res: TuneResult) -> str:
    """One candidate's line of format_result's table: its longest run, or why it has none."""
    n0 = res.settings.requests
    p = c.predicted
    pred = f"{p.output_throughput:.1f}" if p is not None and p.output_throughput is not None else "—"
    err = c.error_output_throughput
    errs = f"{err:+.0%}" if err is not None else "—"
    mark = ("★ " if res.winner and res.winner.key == c.key else "◆ " if c.key in set(res.front) else "  ")
    t = c.last
    if t is None:
        return f"{mark}{c.key:<50} {len(c.trials):>4} {c.status.upper()}: {c.reason[:90]}"
    first = next((x.goodput_tps or 0.0 for x in c.trials if x.ok and x.requests == n0), None)
    note = f"n={t.requests}" + (f"; {c.reason}" if c.reason else "")
    return (f"{mark}{c.key:<50} {len(c.trials):>4} {'—' if first is None else f'{first:.1f}':>7} "
            f"{t.goodput_tps or 0:>8.1f} "
            f"{t.output_throughput or 0:>7.1f} {t.slo_attainment or 0:>6.0%} "
            f"{t.p99_ttft_ms or 0:>7.0f}ms {t.median_tpot_ms or 0:>7.1f}ms {pred:>10} "
            f"{errs:>6}  {note[:70]}")


def _result_footer(res: TuneResult) -> list[str]:
    """Under format_result's table: the candidates not measured, the time spent, the winner and its commands."""
    lines = []
    by: dict[str, int] = {}
    for c in res.candidates:
        if c.status in ("refused", "pruned", "not tried", "pending"):
            by[c.status] = by.get(c.status, 0) + 1
    if by:
        lines.append("not measured: " + ", ".join(f"{n} {k}" for k, n in by.items())
                     + " (tune.json's candidates say why, each)")
    lines += [f"skipped: --engine {e}: {why}" for e, why in res.skipped_engines.items()]
    lines.append(f"{res.elapsed_s:.0f} s of the {res.settings.budget_s:.0f} s budget" +
                 ("; the budget stopped it: tune --resume OUT goes on" if res.stopped == "budget" else
                  "; stopped by q: tune --resume OUT goes on" if res.stopped == "stopped" else ""))
    lines += [f"note: {x}" for x in res.notes]
    w = res.winner
    if w:
        t = w.trial
        lines.append(f"winner: {w.key}: goodput {t.goodput_tps or 0:.1f} tok/s at {t.requests} "
                     f"requests ({t.slo_attainment or 0:.0%} within {res.settings.slo})")
        if not t.goodput_tps:
            lines.append("  no candidate met the SLO for these users: the winner is the fastest; try fewer --users "
                         "or a looser --slo")
        if w.knee:
            lines.append(f"knee (--find rate): {w.knee.sentence}")
        lines.append(f"serve it:      {w.serve_command}")
        lines.append(f"reproduce it:  {w.bench_command}")
    else:
        lines.append("no candidate was measured: nothing to recommend (see each candidate's reason)")
    return lines

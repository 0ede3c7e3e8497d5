"""`inference-top report PATH…`: bench outputs and recordings (control/bench/report.py) and, beside them, a tune's
Pareto front (its tune.json read back through tune/record.py). It stands above both bench and tune, which never
import it. matplotlib is an optional extra (`pip install 'inference-top[report]'`), imported only where drawn."""
from __future__ import annotations

from pathlib import Path

from measure.control.bench.cell import fmt
from measure.control.bench.report import report_runs
from measure.control.bench.runs import ReportError
from measure.control.tune.record import RecordError, TuneResult, load_result


def tune_file(path: str) -> Path | None:
    """The tune.json of a `tune --out` folder (or the file itself); None for anything else."""
    p = Path(path)
    f = p / "tune.json" if p.is_dir() else p
    return f if f.name == "tune.json" and f.is_file() else None


def _read_tune(f: Path) -> TuneResult:
    """tune.json read back (tune/record.load_result); ReportError, one line, where it is not one."""
    try:
        return load_result(f)
    except RecordError as exc:
        raise ReportError(str(exc)) from None


def render_tune(f: Path, out: Path) -> tuple[Path, str]:
    """A tune's Pareto front: goodput vs TTFT p99 of every measured candidate (its run at the length the front
    compares, front_requests; its longest in a tune.json from before it), the front joined,
    the winner starred, colour by J/token or $/Mtok where every candidate has it; and its Markdown section."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = _read_tune(f)
    pts = []
    at = res.front_requests
    for c in res.candidates:
        ok = [t for t in c.trials if t.ok]
        if ok:
            t = next((t for t in ok if t.requests == at), None) or max(ok, key=lambda t: t.requests)
            pts.append((c.key, t.p99_ttft_ms or 0.0, t.goodput_tps or 0.0, t))
    front = res.front
    win = res.winner.key if res.winner else None
    third = next((k for k in ("usd_per_mtok", "joules_per_token") if pts and all(p[3].figure(k) is not None
                                                                               for p in pts)), None)
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 5))
    sc = ax.scatter([p[1] for p in pts], [p[2] for p in pts], c=[p[3].figure(third) or 0.0 for p in pts] if third else None,
                    cmap="viridis" if third else None, s=30)
    if third:
        fig.colorbar(sc, ax=ax, label={"usd_per_mtok": "$/Mtok", "joules_per_token": "J/token"}[third])
    fr = sorted((p for p in pts if p[0] in front), key=lambda p: p[1])
    ax.plot([p[1] for p in fr], [p[2] for p in fr], "r-", lw=1, label="Pareto front")
    for key, x, y, _ in pts:
        if key in front:  # the front named; the rest are points (the table below lists every one)
            ax.annotate(key, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        if key == win:
            ax.plot([x], [y], "r*", ms=14, label=f"winner: {key}")
    slo = res.settings.slo
    ax.set_xlabel("TTFT p99 (ms, queue included)")
    ax.set_ylabel("goodput (tok/s within the SLO)")
    ax.set_title(f"tune: {len(pts)} candidates measured, {slo}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / f"tune_front_{f.parent.name or 'tune'}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    lines = [f"## tune: {f.parent}", "", f"{len(pts)} candidates measured under {slo}; front: {', '.join(front)}.",
             "", "| candidate | requests | goodput tok/s | tok/s | TTFT p99 ms | front |", "|---|---|---|---|---|---|"]
    for key, x, y, t in sorted(pts, key=lambda p: -p[2]):
        lines.append(f"| {'★ ' if key == win else ''}{key} | {t.requests} | {y:.1f} | "
                     f"{fmt(t.output_throughput)} | {x:.0f} | {'yes' if key in front else ''} |")
    if w := res.winner:
        lines += ["", f"Winner: **{w.key}**. Serve it:", "", f"    {w.serve_command}", "", "Reproduce it:", "",
                  f"    {w.bench_command}"]
    lines += ["", f"Note: {n}"] if (n := next((x for x in res.notes if x.startswith("within noise")), None)) else []
    return path, "\n".join(lines + ["", f"![front]({path.name})", ""])


def report(paths: list[str], out: Path, crossover_of_two: bool = False,
           combined: bool = False) -> tuple[list[Path], Path, list[str]]:
    tunes = [f for f in map(tune_file, paths) if f is not None]
    paths = [p for p in paths if tune_file(p) is None]
    if tunes:  # a tune's front, beside any runs given with it
        if combined or crossover_of_two:
            raise ReportError("--combine and --crossover take bench outputs, not a tune's")
        drawn = [render_tune(f, out) for f in tunes]
        files = [d[0] for d in drawn]
        if paths:
            more, md0, warns = report(paths, out)
            text = md0.read_text() + "\n" + "\n".join(d[1] for d in drawn)
            files = more + files
        else:
            text, warns = "# inference-top report\n\n" + "\n".join(d[1] for d in drawn), []
        md = out / "report.md"
        md.write_text(text)
        return files, md, warns
    return report_runs(paths, out, crossover_of_two, combined)


__all__ = ["report", "render_tune", "tune_file"]

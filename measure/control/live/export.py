"""`e` in the dashboard: the current statistics as JSON, and the three charts as a PNG where matplotlib is
installed (an optional extra, imported only here)."""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from measure.control.live.snapshot import RunInfo, Snapshot
from measure.core import metrics as M
from measure.core.records import RequestRecord


def export(snap: Snapshot, info: RunInfo, records: list[RequestRecord], window_s: float,
           path: str | Path | None = None, levels: list[dict[str, Any]] | None = None) -> tuple[Path, Path | None]:
    path = Path(path or f"inference-top-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out = {
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "mode": snap.mode, "k": snap.k, "b": snap.b, "users": snap.users, "state": snap.state,
        "simulated": snap.simulated, "model": info.model, "model_bytes": info.weight_bytes, "engine": info.engine,
        "chip": info.chip, "bandwidth_gbps": info.bandwidth_gbps, "window_s": window_s,
        "numbers": asdict(snap.numbers), "summary_since_reset": M.summarize(records),
        "levels": levels or [],  # the K/B/mode levels visited, each with its own request figures
        "steps": [r.to_dict() for r in snap.steps],  # the step table: settled rows, best marked
        "workers": [asdict(w) for w in snap.workers],
        "history": [asdict(p) for p in snap.history],
        "markers": list(snap.markers),
    }
    path.write_text(json.dumps(out, indent=2, default=str))
    path.chmod(0o600)  # readable by its owner only
    return path, snapshot_png(snap, path.with_suffix(".png"), info.bandwidth_gbps)


def snapshot_png(snap: Snapshot, path: Path, beta: float | None = None) -> Path | None:
    """The dashboard's three charts, as they stand, into one PNG (None where matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    h = snap.history
    ts = [p.t for p in h]
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    fig.suptitle(f"inference-top at t={snap.t:.0f} s: mode {snap.mode}, K={snap.k}, B={snap.b}"
                 + (" (SIMULATED)" if snap.simulated else ""))
    axes[0].plot(ts, [p.agg_tps for p in h], label="aggregate tok/s (5 s window)")
    def ms(v: float | None) -> float:
        return float("nan") if v is None else v * 1e3

    axes[1].plot(ts, [ms(p.tpot_p50) for p in h], label="TPOT p50")
    axes[1].plot(ts, [ms(p.tpot_p90) for p in h], label="TPOT p90")
    by = snap.numbers.predicted_by or "K·W/β"  # what made the prediction now: the roofline, or K·W/β
    axes[1].plot(ts, [ms(p.predicted_tpot) for p in h], "--", label=f"predicted ({by})")
    axes[2].plot(ts, [p.bw_gbps if p.bw_gbps is not None else float("nan") for p in h], label="bandwidth product")
    if beta:
        axes[2].axhline(beta, color="red", ls="--", label=f"spec {beta:g} GB/s")
    for ax, unit in zip(axes, ("tok/s", "ms", "GB/s")):
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        for x, _label in snap.markers:
            ax.axvline(x, color="magenta", ls=":")
        ax.legend(fontsize=7)
    for x, label in snap.markers:
        axes[0].annotate(label, (x, 0), textcoords="offset points", xytext=(2, 2), fontsize=7, color="magenta")
    axes[2].set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

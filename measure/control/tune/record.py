"""tune.json: written whole after every run, read back by `tune --resume`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from measure.control.tune.space import Settings, TuneError

TUNE_VERSION = 1
SAME = ("engines", "users", "requests", "max_tokens", "ctx", "slo", "workload", "seed", "ignore_eos")
# runs that never gave an answer: cut by q (the live tune's stop) or an interrupt; --resume measures them again (a
# skip, s, is the user's answer for that run and is read back as one)
UNFINISHED = ("cut", "stopped")


def load_done(path: Path, s: Settings, model: str) -> tuple[dict[tuple[str, int], dict[str, Any]], float]:
    """The runs an earlier tune in `path` (its folder or tune.json) measured, by (candidate, requests), and the
    seconds it spent; TuneError where it was not the same tune (another model, load or SLO)."""
    f = path / "tune.json" if path.is_dir() else path
    try:
        old = json.loads(f.read_text())
    except (OSError, ValueError) as exc:
        raise TuneError(f"--resume {path}: cannot read {f.name} ({exc}); give the --out folder of an earlier "
                        "tune") from None
    if not isinstance(old, dict) or old.get("command") != "tune":
        raise TuneError(f"--resume {path}: {f.name} is not a tune's output")
    mine = s.describe()
    diff = [k for k in SAME if old.get("settings", {}).get(k) != mine.get(k)]
    if old.get("model") != model:
        diff.insert(0, "model")
    if diff:
        raise TuneError(f"--resume {path}: that tune ran another {', '.join(diff)} (e.g. {diff[0]} "
                        f"{old.get('settings', {}).get(diff[0], old.get('model'))!r}); resume it with the same "
                        "options, or start a new --out")
    done = {}
    for c in old.get("candidates", []):
        for t in c.get("trials", []):
            if t.get("status") not in UNFINISHED:
                done[(c["key"], t["requests"])] = t
    return done, float(old.get("elapsed_s") or 0.0)



def write_result(out: Path, res: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "tune.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(res, indent=2, default=str))
    tmp.replace(path)  # whole or not at all: a budget or Ctrl-C never leaves half a file to resume from
    return path

"""Mutation testing by a tool (issue 56; docs/design/truth-matrix.md): mutmut 3 plants every mutant its operators make in the
modules that make the figures users act on, one at a time, and runs the fast tests that reach the function mutated;
a mutant the tests do not fail is a survivor. benchmarks/mutants.py plants a list written by hand against the truth
matrix; this one is not a list: whatever bug its operators can write, in every line of these modules.

The modules (MODULES, also [tool.mutmut] only_mutate in pyproject.toml): the metrics, the records, the arrivals, the
cell and its window, the knee, the live statistics and the step table, the HTTP client's token counting and the
warmup; and the physics and the memory (round 19): the roofline, the work model and its readers (config.json, GGUF,
presets), the config's defaults and precisions, the residency roofline and plan's sizing; and the verdicts a user
acts on (round 22): how a server serves its streams, the memory guard, what a server says of its caches, the cost
of a token. The tests ([tool.mutmut]
pytest_add_cli_args_test_selection): fast unit tests, each figure worked by hand or recomputed with numpy
(tests/unit/test_figure_oracles*.py, tests/unit/test_metrics.py, tests/unit/test_*_oracle.py), and the fast
integration modules of the physics and the residency (test_physics, test_roofline, test_residency, test_configs,
test_guard: seconds each). A survivor is either killed by a new
check or listed in benchmarks/mutation_equivalents.toml with why no test can tell it from the code (an equivalent
mutant): the score is killed ÷ (mutants − equivalents); a mutant that hangs the tests (mutmut's timeout) is killed.
mutmut numbers a function's mutants in order, so an edit to the function renumbers them and a listed name then
points at another mutant: the file's [changed] table records what each listed mutant changes (the lines of its
function in the tree's mutants/<module> that differ from the original function's, stripped, joined by " ⏎ "; a line
only removed after "− "), and a listed mutant counts as equivalent only where its change now is the one recorded;
one whose change differs is stale, scored as what it is (a survivor where it survives) and named under
equivalents_stale; one with no [changed] line counts and is named under equivalents_unfingerprinted. After
judging survivors again, --fingerprint writes [changed] anew from the tree's mutants (for each module whose
mutants there are of this source: its copy there is the file here and mutmut's mutants file is newer; the others
are left as recorded), keeping what comes before [changed] byte for byte; it runs nothing.

    .venv/bin/pip install -e '.[mutation]'                         # once: mutmut 3.8.1 (not in the test extra: not run by CI)
    python benchmarks/mutation.py                                  # every module (long: see below)
    python benchmarks/mutation.py --module measure/core/metrics.py  # one module (repeatable)
    python benchmarks/mutation.py --report                         # the score of the last run, not run again
    python benchmarks/mutation.py --fingerprint                    # the equivalents' [changed] lines from --tree

mutmut copies the tree it runs in into its ./mutants/ and keeps its results there. This script runs it in a copy of
this tree of its own (--tree, default $TMPDIR/inference-top-mutation: the files git tracks and those it does not
ignore, copied with their times), so that nobody's tools working here (tests/counts.py, ruff, pytest) read the
mutants; the copy is kept, and with it mutmut's stats of which test reaches which function (collected again for
new tests only: after a function is renamed or added, --fresh-stats: a new function's mutants were scored
"survived" here, run only against the old tests that reached its caller). Every mutant of the modules named is tested again on
each run (they are named to mutmut by their globs); --report scores the last results without running. mutmut's
output goes to the tree's .mutation-home/mutmut.log (its end is printed where mutmut fails).

Measured on the shared 2-core machine: every module, 3734 mutants in SCOPE, 452 s (7 min 32 s) at load average
2.8–5.1 from the others' work, and 644 s at 4.2–6.0 (2026-12-06); one module at a time at load 5–10: metrics 215 s, records 31 s, arrivals
282 s, cell 212 s, knee 138 s, step table 125 s, the HTTP counter 51 s (mutmut's copy and its stats add ≈ 10–60 s
a run). The physics and the memory alone (roofline, work, residency, hf_config, sizing: 3946 mutants), 433 s at load
≈ 2; every module, 7669 mutants, 780 s (docs/measurements.md §22). The verdicts (serving, guard, server_cache,
cost: 1393 mutants) with work.py, 230 s (§25). Every module of round 23 (28, the load and the traces in), 13,578
mutants, 1494 s at load ≈ 2 (§26). The last line is one JSON object:
{"mutants", "killed", "survived", "equivalent", "no_tests", "timeout", "not_run", "score", "seconds",
 "modules": {path: {...}}, "survivors": [names not listed as equivalent, or listed and stale],
 "equivalents_unmatched": [listed, no mutant of that name], "equivalents_stale": [...],
 "equivalents_unfingerprinted": [...]}; --fingerprint's: {"fingerprinted": {path: n}, "not_current", "no_mutant"}.
(Run by hand here, `mutmut run` makes ./mutants/: .gitignore leaves it out.)
"""
from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "benchmarks" / "mutation_equivalents.toml"
MODULES = ["measure/core/metrics.py", "measure/core/records.py", "measure/core/arrivals.py",
           "measure/control/bench/cell.py", "measure/control/bench/knee.py", "measure/control/live/stats.py",
           "measure/control/live/steps.py", "engines/http_openai.py", "measure/sources/warmup.py",
           "measure/core/roofline.py", "measure/core/work.py", "measure/core/residency.py", "measure/core/hf_config.py",
           "measure/core/sizing.py", "measure/core/serving.py", "measure/core/guard.py",
           "measure/core/server_cache.py", "measure/core/cost.py", "measure/control/live/wall.py",
           "measure/core/readings.py", "measure/control/bench/compare.py",
           "measure/core/units.py", "measure/core/clients.py", "measure/control/tune/space.py",
           "measure/control/tune/search.py", "measure/core/sessions.py", "measure/core/workload.py",
           "measure/core/traces.py"]
# What of each module makes figures (mutmut's names: x_FUNCTION__mutmut_N, xǁCLASSǁMETHOD__mutmut_N): the mutants
# run and scored. The rest of a module is left out, each part said why: cell.py's summary.json names and its notes in
# words (text, not figures: tests/contract/test_cells.py); knee.py's measure_levels and its plan (they run a load source: the
# truth matrix's --find cells); arrivals.py's TraceSessions (a trace's follow-ups: tests/integration/test_traces.py); the HTTP
# client's transport, /metrics and /models reading (engines: tests/integration/test_http*.py); the warmup's run over a source.
SCOPE: dict[str, list[str]] = {
    "measure/core/metrics.py": ["*"],
    "measure/core/records.py": ["*"],
    "measure/core/arrivals.py": ["xǁArrivalSpecǁ*", "xǁScheduleǁ*", "x__cumulative__*", "x__scaled__*",
                                "x_parse_arrivals__*", "x_realised_rate__*", "x_lateness_figures__*",
                                "x_client_wait_figures__*"],
    "measure/control/bench/cell.py": ["xǁPerRepǁ*", "xǁPeriodsǁ*", "xǁClientsǁ*", "x__achieved__*", "x__measure__*",
                                      "x__requests__*", "x__bandwidth__*", "x_endpoint_figures__*",
                                      "x_ttft_by_class__*", "x_add_scaling__*", "x__s__*", "x_request_class__*"],
    "measure/control/bench/knee.py": ["x_rate_figures__*", "x_peak_in_flight__*", "x_find_knee__*", "x_judge__*",
                                      "x__why__*", "xǁExactPoissonǁ*", "x__p50__*"],
    "measure/control/live/stats.py": ["*"],
    "measure/control/live/steps.py": ["*"],
    "engines/http_openai.py": ["xǁ_Counterǁ*"],
    "measure/sources/warmup.py": ["xǁWarmupǁ*", "x_warmup_workload__*", "x__absolute_start__*"],
    # The physics (issue 55) and the residency roofline (issue 57): every function that makes a predicted figure, a
    # byte count or a verdict; left out, each a sentence in words: describe, format_predictions, _range_text,
    # Prediction.caveat and .wall, _reads, _tied_note, the gauge, GivesOut.line, format_fits, past_wall_note,
    # format_plan, StorageRates.describe, _mbps.
    "measure/core/roofline.py": ["x_name_wall__*", "xǁFamilyǁ*", "xǁMachineǁ*", "xǁPredictionǁbinds__*",
                                 "xǁPredictionǁoversubscribed__*", "x_step_reads__*", "x_window_cells__*",
                                 "x_kernel_time__*", "x_dequant_time__*", "x__tile__*", "x__compute_times__*",
                                 "x_predict__*", "x_predict_range__*", "x_calibrate__*", "x__bandwidth_at_most__*",
                                 "x_prediction_table__*", "xǁRooflineǁ*"],
    "measure/core/work.py": ["x__pad__*", "xǁExpertsǁ*", *(f"xǁWorkModelǁ{m}__*" for m in (
                                 "moe_layers", "attention_layers", "full_layers", "kv_layer_token_bytes",
                                 "kv_bytes_per_token", "kv_read_bytes", "window_cache_cells", "kv_alloc_bytes",
                                 "read_bytes", "resident_bytes", "bytes_per_step", "active_params", "flops_per_token",
                                 "flops_per_step", "prefill_flops", "matmul_weights")),
                             "x_quant_family__*", "x_from_gguf__*", "x_config_params__*", "x__n__*", "x__need__*",
                             "x_active_ffn__*", "x__ffn_widths__*",
                             "xǁConfigShapeǁ*", "x__layer_kinds__*", "x__config_shape__*", "x__part_bytes__*",
                             "x_from_config__*", "x_work_from_dict__*", "x__config_assumed__*", "x_from_preset__*"],
    "measure/core/residency.py": ["x_parse_*", "xǁResidencyǁweights_share__*", "xǁResidencyǁfields__*",
                                  "x_residency__*", "x_mac_vm__*", "x_mac_rates__*", "xǁResidencyStepǁ*",
                                  "x_nonresident_bytes__*", "x_reread_rate__*", "x_residency_step__*", "x_gives_out__*",
                                  "x__out__*", "xǁLevelFitǁ*", "x_level_fit__*", "x_first_past__*", "x_budget_skip__*",
                                  "x_to_storage__*"],
    "measure/core/hf_config.py": ["*"],
    "measure/core/sizing.py": ["x_plan__*", "x_chip_memory__*", "x_unified_memory__*", "x_size_for_users__*",
                               "x_chip_predictions__*"],
    # The verdicts a user acts on (round 22): how a server serves its streams (batches, serialises, interleaves,
    # from the token timing and its gauge; server-vs-engine's verdict over B) and the memory guard (a footprint,
    # a budget, a refusal, the wall seen live). All of both, the why-texts included: a verdict's reason is read.
    "measure/core/serving.py": ["*"],
    "measure/core/guard.py": ["*"],
    # what a server says of its caches (hit rate, draft acceptance, KV peak) and the cost of a token ($/Mtok, J/token)
    "measure/core/server_cache.py": ["*"],
    "measure/core/cost.py": ["*"],
    # the live wall: its name from measured figures, the memory wall's evidence and hold, the brake's one undo, when
    # the residency watch may read slowly; left out: ResidencyWatch's tick and _past (they read the workers' smaps:
    # tests/integration/test_residency.py) and residency_watch (a source's spec)
    "measure/control/live/wall.py": ["x_measured_wall__*", "xǁWallWatchǁ*", "x_calm__*", "xǁResidencyViewǁ*"],
    # what a machine says (a Mac's working set and memory, vm_stat, pressure, swap, thermal and power rails, the probe's
    # ceilings): the guard's budget and the gauges rest on these parsers; left out: is_mac (the platform)
    "measure/core/readings.py": ["x_default_working_set__*", "x_parse_*", "x_working_set__*", "xǁVmStatǁ*",
                                 "xǁThermalǁ*", "x_nvml_reasons__*", "xǁRailPowerǁ*", "x_rail_power__*",
                                 "x_rails_joules_per_token__*", "x_others_held__*", "x_other_work_cores__*",
                                 "xǁThermalLogǁ*", "xǁCeilingsǁ*"],
    # compare's statistics and verdicts (the t distribution, the paired and Welch intervals, the sequential looks, the
    # verdict and its caveats); left out: run_rounds and its helpers (they run sources), the runs on disk, LiveSides
    # (servers). mutmut leaves decorated functions alone (t_quantile's lru_cache, Interval's properties)
    "measure/control/bench/compare.py": ["x_metric__*", "x_parse_share__*", "x__betacf__*", "x__ibeta__*",
                                         "x_t_sf2__*", "x_t_quantile__*", "xǁIntervalǁ*", "x_look_alpha__*",
                                         "x_paired__*", "x_welch__*", "x_detectable__*", "x_look_at__*",
                                         "x_plan_line__*", "x_order__*", "xǁSequentialǁ*", "x_verdict__*",
                                         "x_error_line__*", "x_error_caveat__*", "xǁComparisonǁ*", "x__tally__*",
                                         "x__outcome__*", "x_failed_outcome__*", "x__cv__*", "x_figure__*"],
    # the units (the one size parser, the formats) and one load over client machines (--segment, --start-at, the
    # weighted deal, the clock check's offset); left out: perf_ns_at (reads the clocks), Segment and ClientShare
    # (arrivals over time: tests/integration/test_clients.py)
    "measure/core/units.py": ["*"],
    "measure/core/clients.py": ["x_parse_segment__*", "x_parse_start_at__*", "x_deal__*", "x_split__*", "x_shares__*",
                                "x_offset_from_ticks__*", "x_describe_clock__*", "x_start_lateness_ms__*"],
    # tune's candidate space (the shapes, their flags, the memory refusal, the roofline's prediction) and its search's
    # decisions (the first round's pruning, the knobs, the halving rounds, the budget's cut, the Pareto front, the
    # result); left out: Tune.run, _held, search, _final, _answers, _settle and view (they run the measure over
    # time: tests/unit/test_tune_budget.py, tests/integration/test_tune*.py). mutmut leaves Candidate's properties alone
    "measure/control/tune/space.py": ["x_parse_budget__*", "x_unavailable__*", "x_tuned__*", "xǁCandidateǁ*",
                                      "x__llama_server_flags__*", "x__mlx_server_flags__*", "x__vllm_flags__*",
                                      "x__no_flags__*", "x__powers__*", "x_candidates__*", "x__threads__*",
                                      "x__instances__*", "x__batch__*", "x__slots__*", "x__servers__*",
                                      "x_memory_refusal__*", "x_roofline_predictor__*"],
    "measure/control/tune/search.py": ["xǁTuneǁestimate__*", "xǁTuneǁ_budget_cut__*", "xǁTuneǁ_first_shapes__*",
                                       "xǁTuneǁ_knob_rows__*", "xǁTuneǁ_halve__*", "xǁTuneǁprediction_off__*",
                                       "xǁTuneǁfront_n__*", "xǁTuneǁfront_runs__*", "xǁTuneǁfront__*",
                                       "xǁTuneǁresult__*"],
    # the load itself (round 23): who sends what when — a closed loop's users, Poisson arrivals, the request maker's
    # numbering and its live load, the shared prefix's cache words, multi-turn sessions (think times, each user's
    # turns, the transcript sent) and their figures (TTFT by turn, the prefix cache's label, the turn note)
    "measure/core/sessions.py": ["*"],
    "measure/core/workload.py": ["*"],
    # public traces read as published (each format's columns, times, block ids, sessions; the streamed table and its
    # chunks; the block ids' words): a wrong parse silently changes every load replayed from a trace
    "measure/core/traces.py": ["*"],
}
# [tool.mutmut] source_paths: what mutmut copies into its mutants/ (read from pyproject.toml, not written twice)
SOURCE_PATHS = tuple(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["source_paths"])
# mutmut's statuses (its exit codes) as this score counts them: a timeout is a kill (the mutant hung the tests)
KILLED = {1, 3, 36, 24, -24, 152, 255, 37}
SURVIVED = {0}
NO_TESTS = {5, 33}
# [changed]: a mutant's changed lines are joined by CHANGE_JOIN; a line it only removes is written after CHANGE_GONE
CHANGE_JOIN = " ⏎ "
CHANGE_GONE = "− "
CHANGED_NOTE = ("# What each listed mutant changes (benchmarks/mutation.py --fingerprint, mutant_change): its line(s)\n"
                "# that differ from the original function's, stripped, joined by ' ⏎ '. A name whose mutant's change\n"
                "# is not this one now (mutmut renumbered it after an edit) is not counted as equivalent.\n")


def equivalents() -> dict[str, str]:
    """The mutants listed as equivalent, name → why (benchmarks/mutation_equivalents.toml: [equivalent] name =
    "reason"). A reason is required: an empty one is refused."""
    if not EQUIVALENTS.exists():
        return {}
    data = tomllib.loads(EQUIVALENTS.read_text())
    out = dict(data.get("equivalent", {}))
    empty = [k for k, v in out.items() if not str(v).strip()]
    if empty:
        raise SystemExit(f"mutation: {EQUIVALENTS.name} lists {empty[:3]} without a reason")
    return out


def recorded_changes() -> dict[str, str]:
    """What each listed equivalent's mutant changes, as recorded when it was judged (the [changed] table: name → its
    changed line(s), mutant_change's text; written by --fingerprint)."""
    if not EQUIVALENTS.exists():
        return {}
    return {k: str(v) for k, v in tomllib.loads(EQUIVALENTS.read_text()).get("changed", {}).items()}


def function_lines(text: str, names: set[str]) -> dict[str, list[str]]:
    """The source lines of these functions (mutmut's names less the module's: x_f__mutmut_3, xǁCǁm__mutmut_orig) in a
    mutants file's text, from the def line to the function's last line. Each is cut where the indentation returns
    to its def's and the cut parsed as that one function; where it is not (a string's line at column 0), the whole
    file is parsed."""
    lines = text.splitlines()
    out: dict[str, list[str]] = {}
    for i, line in enumerate(lines):
        s = line.lstrip()
        if not s.startswith("def ") or (name := s[4:].split("(", 1)[0]) not in names:
            continue
        indent, j = len(line) - len(s), i + 1
        while j < len(lines) and not ((t := lines[j].lstrip()) and len(lines[j]) - len(t) <= indent
                                      and t[0] not in ")]}#"):
            j += 1
        try:
            body = ast.parse(textwrap.dedent("\n".join(lines[i:j]))).body
        except SyntaxError:
            body = []
        if len(body) != 1 or not isinstance(body[0], ast.FunctionDef) or body[0].name != name:
            return _parsed_lines(lines, names)
        out[name] = lines[i:i + (body[0].end_lineno or 1)]
    return out


def _parsed_lines(lines: list[str], names: set[str]) -> dict[str, list[str]]:
    return {f.name: lines[f.lineno - 1:f.end_lineno] for f in ast.walk(ast.parse("\n".join(lines)))
            if isinstance(f, ast.FunctionDef) and f.name in names}


def mutant_change(orig: list[str], mutant: list[str]) -> str:
    """What a mutant changes: the lines of its function that differ from the original function's (difflib), each
    stripped of the whitespace at its ends, joined by CHANGE_JOIN; where a block of the original's lines is only
    removed, those lines, each after CHANGE_GONE. mutmut's suffix on the def line (__mutmut_orig, __mutmut_N) is
    taken off first, so a mutant's own name is not a change."""
    a, b = _unnamed(orig), _unnamed(mutant)
    parts: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            parts += [x.strip() for x in b[j1:j2]] or [CHANGE_GONE + x.strip() for x in a[i1:i2]]
    return CHANGE_JOIN.join(parts)


def _unnamed(lines: list[str]) -> list[str]:
    return [re.sub(r"__mutmut_\w+\(", "(", lines[0], count=1), *lines[1:]] if lines else []


def current_changes(tree: Path, module: str, names: list[str]) -> dict[str, str | None]:
    """Each named mutant's change (mutant_change) in tree's mutants/<module> now; None where the file, the mutant or
    its original function is not there."""
    path, prefix = tree / "mutants" / module, module_name(module) + "."
    fns = {n: n.removeprefix(prefix) for n in names}
    origs = {n: f.rsplit("__mutmut_", 1)[0] + "__mutmut_orig" for n, f in fns.items()}
    src = function_lines(path.read_text(), {*fns.values(), *origs.values()}) if path.exists() and names else {}
    return {n: mutant_change(src[origs[n]], src[f]) if f in src and origs[n] in src else None for n, f in fns.items()}


def vet(tree: Path, modules: list[str], equiv: dict[str, str],
        changed: dict[str, str]) -> tuple[dict[str, str], list[str], list[str]]:
    """The listed equivalents that count, and those that do not: a name mutmut renumbered after an edit points at
    another mutant, whose change is not the one recorded ([changed]): stale, scored as what it is (a survivor
    where it survives). A listed equivalent with no change recorded counts, and is named apart (unfingerprinted)."""
    stale: list[str] = []
    bare: list[str] = []
    for m in modules:
        listed = [n for n in _names(tree, m) if n in equiv and in_scope(m, n)]
        bare += [n for n in listed if n not in changed]
        now = current_changes(tree, m, [n for n in listed if n in changed])
        stale += [n for n, c in now.items() if c != changed[n]]
    return {k: v for k, v in equiv.items() if k not in stale}, stale, bare


def current(tree: Path, module: str) -> bool:
    """Whether tree's mutants of module are of this tree's source: its plain copy there is the source here, and
    mutmut wrote the mutants file after that copy (it writes them from the copy)."""
    copy, mutants = tree / module, tree / "mutants" / module
    return (copy.is_file() and mutants.is_file() and copy.read_bytes() == (ROOT / module).read_bytes()
            and mutants.stat().st_mtime > copy.stat().st_mtime)


def fingerprint(tree: Path, modules: list[str]) -> dict[str, object]:
    """--fingerprint: record in [changed] what each listed equivalent's mutant changes in tree now, for the modules
    whose mutants there are current (the others are left as they were and named); runs nothing."""
    equiv, changed = equivalents(), recorded_changes()
    done: dict[str, int] = {}
    missing: list[str] = []
    for m in modules:
        if current(tree, m):
            now = current_changes(tree, m, [n for n in equiv if n.startswith(module_name(m) + ".")])
            changed.update({n: c for n, c in now.items() if c is not None})
            done[m] = sum(c is not None for c in now.values())
            missing += [n for n, c in now.items() if c is None]
    write_changes({n: changed[n] for n in equiv if n in changed})
    return {"fingerprinted": done, "not_current": [m for m in modules if m not in done], "no_mutant": missing}


def write_changes(changed: dict[str, str]) -> None:
    """The [changed] table written anew at the end of the equivalents file; what comes before it (the [equivalent]
    table and its comments) kept byte for byte."""
    text = EQUIVALENTS.read_text()
    at = re.search(r"^\[changed\][ \t]*$", text, re.M)
    if at and re.search(r"^\[", text[at.end():], re.M):
        raise SystemExit(f"mutation: {EQUIVALENTS.name}: [changed] must be its last table")
    head = text[:at.start()] if at else text + ("\n" if text.endswith("\n") else "\n\n")
    body = "".join(f"{_toml_str(k)} = {_toml_str(v)}\n" for k, v in changed.items())
    new = head + "[changed]\n" + CHANGED_NOTE + body
    data = tomllib.loads(new)
    if data.get("changed") != changed or data.get("equivalent") != equivalents():
        raise SystemExit(f"mutation: {EQUIVALENTS.name} would not read back as written: left as it was")
    EQUIVALENTS.write_text(new)


def _toml_str(s: str) -> str:  # a TOML basic string: JSON's escapes are TOML's, DEL aside
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007F")


def in_scope(module: str, name: str) -> bool:
    import fnmatch

    return any(fnmatch.fnmatchcase(name, f"{module_name(module)}.{g}") for g in SCOPE[module])


def module_name(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def copy_tree(dst: Path) -> None:
    """The files git tracks and those it does not ignore, copied into dst with their times (a file unchanged since
    the last run keeps its mutants' results there); files gone from this tree are left (mutmut walks its sources)."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                         check=True).stdout.decode()
    # mutmut writes its mutants/ copy of a source path once and after that only the .py files it mutates or that
    # changed: a data file (presets/*.toml) changed here is copied there too, or its tests read the old one (a
    # kernels.toml of a day before failed mutmut's clean run)
    mutants = dst / "mutants" if (dst / "mutants").is_dir() else None
    for rel in filter(None, out.split("\0")):
        src, to = ROOT / rel, dst / rel
        if src.is_file() and not rel.startswith("mutants/"):
            targets = [to] + ([mutants / rel] if mutants and not rel.endswith(".py")
                              and rel.split("/", 1)[0] in SOURCE_PATHS else [])
            for t in targets:
                if t.exists() and t.stat().st_mtime == src.stat().st_mtime and t.stat().st_size == src.stat().st_size:
                    continue
                t.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, t)


def run_mutmut(tree: Path, modules: list[str], max_children: int) -> int:
    """mutmut run in `tree` over the mutants of these modules (their names' globs); its exit status. The caches and
    logs of anything the tests start go to a folder of the run's own."""
    globs = [f"{module_name(m)}.{g}" for m in modules for g in SCOPE[m]]
    home = tree / ".mutation-home"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", INFERENCE_TOP_CACHE=str(home / "cache"),
               INFERENCE_TOP_LOGS=str(home / "logs"))
    exe = Path(sys.executable).parent / "mutmut"
    if not exe.exists() and shutil.which("mutmut") is None:
        raise SystemExit("mutation.py: mutmut is not installed: .venv/bin/pip install -e '.[mutation]' (mutmut 3.8.1), "
                         "then run this again")
    cmd = [str(exe) if exe.exists() else "mutmut", "run", "--max-children", str(max_children), *globs]
    home.mkdir(exist_ok=True)
    log = home / "mutmut.log"  # its output (a spinner's, long): the end said where it stopped
    with log.open("w") as out:
        rc = subprocess.run(cmd, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail = log.read_text(errors="replace").replace("\r", "\n").splitlines()[-15:]
        print("\n".join(line for line in tail if line.strip()), file=sys.stderr)
    return rc


def score(tree: Path, modules: list[str], equiv: dict[str, str]) -> dict[str, object]:
    """The counts over the modules' results (mutants/<module>.meta, mutmut's own record of each mutant's exit)."""
    per: dict[str, dict[str, int]] = {}
    survivors: list[str] = []
    for m in modules:
        meta = tree / "mutants" / (m + ".meta")
        if not meta.exists():
            continue
        codes: dict[str, int | None] = {k: v for k, v in json.loads(meta.read_text())["exit_code_by_key"].items()
                                        if in_scope(m, k)}
        c = {"mutants": len(codes), "killed": 0, "survived": 0, "equivalent": 0, "no_tests": 0, "timeout": 0,
             "not_run": 0}
        for name, code in codes.items():
            if code is None:
                c["not_run"] += 1
            elif code in KILLED:
                c["killed"] += 1
                c["timeout"] += code in (36, 24, -24, 152, 255)
            elif name in equiv:
                c["equivalent"] += 1
            else:
                c["no_tests" if code in NO_TESTS else "survived"] += 1
                survivors.append(name)
        judged = c["mutants"] - c["equivalent"] - c["not_run"]
        c["score"] = round(c["killed"] / judged, 4) if judged else None  # type: ignore[assignment]
        per[m] = c
    tot = {k: sum(int(v[k] or 0) for v in per.values()) for k in
           ("mutants", "killed", "survived", "equivalent", "no_tests", "timeout", "not_run")}
    judged = tot["mutants"] - tot["equivalent"] - tot["not_run"]
    return {**tot, "score": round(tot["killed"] / judged, 4) if judged else None, "modules": per,
            "survivors": survivors}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", action="append", choices=MODULES, help="only this module (repeatable)")
    ap.add_argument("--max-children", type=int, default=2, help="mutants tested at once (default 2: the cores here)")
    ap.add_argument("--report", action="store_true", help="the score of mutmut's last results only, run nothing")
    ap.add_argument("--fresh-stats", action="store_true",
                    help="collect mutmut's stats of which test reaches which function again (after a rename or a "
                         "new function: it has none, and its mutants read 'no tests' or survive the old tests)")
    ap.add_argument("--fingerprint", action="store_true",
                    help="record in the equivalents' [changed] table what each listed mutant changes in --tree's "
                         "mutants now (the modules whose mutants there are of this source), run nothing")
    ap.add_argument("--tree", type=Path, default=Path(tempfile.gettempdir()) / "inference-top-mutation",
                    help="the copy of this tree mutmut runs in and keeps its results in (default %(default)s)")
    a = ap.parse_args(argv)
    modules = a.module or MODULES
    equiv = equivalents()
    t0 = time.monotonic()
    tree = a.tree.resolve()
    if tree == ROOT:
        ap.error("--tree must be another folder than this tree (its mutants would be everyone's)")
    if a.fingerprint:
        print(json.dumps(fingerprint(tree, modules)))
        return 0
    if not a.report:
        tree.mkdir(parents=True, exist_ok=True)
        copy_tree(tree)
        for m in modules:  # a module new to the scope: mutmut copied it plain before; without the copy it mutates it
            if not (tree / "mutants" / (m + ".meta")).exists():
                (tree / "mutants" / m).unlink(missing_ok=True)
        if a.fresh_stats:
            (tree / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
        rc = run_mutmut(tree, modules, a.max_children)
        if rc != 0:
            print(f"mutation: mutmut ended with status {rc}", file=sys.stderr)
    counted, stale, bare = vet(tree, modules, equiv, recorded_changes())
    out = score(tree, modules, counted)
    if out["no_tests"]:
        print(f"mutation: {out['no_tests']} mutants reached by no test: a function renamed since mutmut's stats? "
              "run again with --fresh-stats", file=sys.stderr)
    if not out["mutants"]:
        print(json.dumps({"error": "no mutmut results for these modules: run without --report first"}))
        return 2
    names = {n for m in modules for n in _names(tree, m)}  # an equivalent listed that no mutant is any more: stale
    unused = sorted(n for n in equiv if n not in names and any(n.startswith(module_name(m) + ".") for m in modules))
    print(json.dumps({**out, "seconds": round(time.monotonic() - t0, 1), "equivalents_unmatched": unused,
                      "equivalents_stale": stale, "equivalents_unfingerprinted": bare}))
    return 0


def _names(tree: Path, module: str) -> list[str]:
    meta = tree / "mutants" / (module + ".meta")
    return list(json.loads(meta.read_text())["exit_code_by_key"]) if meta.exists() else []


if __name__ == "__main__":
    sys.exit(main())

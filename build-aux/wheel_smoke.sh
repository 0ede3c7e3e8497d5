#!/usr/bin/env bash
# The wheel as people install it: build it, check it holds every module and data file, install it into a fresh
# virtual environment and run it from an empty folder with the source tree off the path:
#   inference-top --version; plan on a preset and on the embedded model; a short bench against the null server
#   (python -m engines.null_server, no model) and one on the embedded model; the dashboard started and quit in tmux.
# llama-cpp-python comes from pip's cache of the wheel `make` built (pip cache list): no second build. Without one
# in the cache pip builds it here (≈ 6 min) and says so.
# Usage: build-aux/wheel_smoke.sh   (PYTHON=python3.12 picks the interpreter; KEEP=1 keeps the work folder)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/it-wheel.XXXXXX")
VENV=$WORK/venv
T0=$(date +%s)
SERVER_PID=
TMUX_SOCK=it-wheel-smoke-$$

cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
    tmux -L "$TMUX_SOCK" kill-server 2>/dev/null || true
    if [ "${KEEP:-0}" = 1 ]; then echo "wheel smoke: kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

say() { echo "wheel smoke [$(( $(date +%s) - T0 )) s]: $*"; }
die() { echo "wheel smoke: FAILED: $*" >&2; exit 1; }
# every command from the installed package runs here: an empty folder, no PYTHONPATH
it() { (cd "$WORK/empty" && env -u PYTHONPATH "$VENV/bin/inference-top" "$@"); }

say "building the wheel"
# from a copy of the files git tracks or would track (a new module counts before its commit): setuptools writes
# build/ and *.egg-info beside the sources it builds, and the source tree stays as it was
mkdir -p "$WORK/src"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$WORK/src" 2>/dev/null \
    || true)
"$PYTHON" -m pip wheel --no-deps --quiet -w "$WORK/dist" "$WORK/src"
WHEEL=$(ls "$WORK"/dist/inference_top-*.whl)
say "built $(basename "$WHEEL")"

# every file git tracks under the package folders (modules, presets, samples, the stylesheet) must be in it
"$PYTHON" - "$WHEEL" "$ROOT" <<'EOF'
import os, subprocess, sys, zipfile
wheel, root = sys.argv[1], sys.argv[2]
held = set(zipfile.ZipFile(wheel).namelist())
tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "engines", "measure",
                          "presets", "tui"], cwd=root, check=True, capture_output=True, text=True).stdout.split()
tracked = [f for f in tracked if os.path.exists(os.path.join(root, f))]  # a file deleted, not yet committed
missing = sorted(set(tracked) - held)
if not tracked or missing:
    sys.exit(f"wheel smoke: FAILED: the wheel lacks {len(missing)} of {len(tracked)} files: {missing}")
print(f"wheel smoke: the wheel holds all {len(tracked)} files of engines/, measure/, presets/, tui/")
EOF

"$PYTHON" -m venv "$VENV"
mkdir -p "$WORK/empty" "$WORK/links"
# the llama-cpp-python wheel `make` built, from pip's cache, offered beside the index (a wheel beats the sdist)
CACHED=$("$VENV/bin/pip" cache list 'llama_cpp_python-0.3.36-*' --format=abspath 2>/dev/null | head -n 1 || true)
if [ -n "$CACHED" ]; then
    ln -s "$CACHED" "$WORK/links/"
    say "llama-cpp-python from pip's cache: $(basename "$CACHED")"
else
    say "no llama-cpp-python wheel in pip's cache ($("$VENV/bin/pip" cache dir)): pip builds it (≈ 6 min)"
fi
say "installing the wheel with its llama and http extras into a fresh venv (as the README says)"
env -u PYTHONPATH "$VENV/bin/pip" install --quiet --find-links "$WORK/links" "$WHEEL[llama,http]" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" | tee "$WORK/pip.log" || true
grep -q "Building wheel for llama-cpp-python" "$WORK/pip.log" && say "llama-cpp-python was built, not taken from the cache"
"$VENV/bin/python" -c "import llama_cpp, aiohttp" 2>/dev/null || die "the llama and http extras did not install"
LOCATION=$(cd "$WORK/empty" && env -u PYTHONPATH "$VENV/bin/python" -c "import tui; print(tui.__file__)")
case "$LOCATION" in "$VENV"/*) ;; *) die "tui imported from $LOCATION, not the venv" ;; esac
say "installed; tui imports from the venv ($LOCATION)"

VERSION=$(it --version)
WANT=$(basename "$WHEEL" | cut -d- -f2)
[ "$VERSION" = "inference-top $WANT" ] || die "--version said '$VERSION', the wheel is $WANT"
say "--version: $VERSION"

# the output is kept, then searched: `it … | grep -q` closes the pipe at the first match, and under pipefail the
# plan's exit on the broken pipe (141) would fail the line
PLAN=$(it plan --preset llama-3.1-8b) || die "plan --preset llama-3.1-8b exited $?"
grep -q "KV" <<<"$PLAN" || die "plan --preset llama-3.1-8b printed no KV figures"
MODEL=$(cd "$WORK/empty" && env -u PYTHONPATH "$VENV/bin/python" -c \
    "from engines.embedded import embedded_model_path; print(embedded_model_path())")
PLAN=$(it plan --model "$MODEL" --context 2048) || die "plan on the embedded model exited $?"
grep -q "KV" <<<"$PLAN" || die "plan on the embedded model printed no KV figures"
say "plan: llama-3.1-8b and the embedded model ($MODEL)"

PORT=$("$VENV/bin/python" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
(cd "$WORK/empty" && exec env -u PYTHONPATH "$VENV/bin/python" -m engines.null_server --port "$PORT") &
SERVER_PID=$!
it bench --engine http --url "http://127.0.0.1:$PORT/v1" --tokenizer none --requests 2 --max-tokens 8 \
    --out "$WORK/bench-null" >"$WORK/bench-null.log" 2>&1 || { cat "$WORK/bench-null.log"; die "bench on the null server"; }
kill "$SERVER_PID"; SERVER_PID=
grep -q '"completed": 2' "$WORK/bench-null/summary.json" || die "bench on the null server: not 2 requests completed"
say "bench against the null server: 2 requests"

it bench --k 1 --requests 2 --max-tokens 8 --out "$WORK/bench-llama" >"$WORK/bench-llama.log" 2>&1 \
    || { cat "$WORK/bench-llama.log"; die "bench on the embedded model"; }
grep -q '"completed": 2' "$WORK/bench-llama/summary.json" || die "bench on the embedded model: not 2 requests completed"
say "bench on the embedded model: 2 requests"

# the dashboard in a private tmux server: started, serving, quit with q, exit status 0
tmux -L "$TMUX_SOCK" new-session -d -x 160 -y 48 \
    "cd '$WORK/empty' && env -u PYTHONPATH '$VENV/bin/inference-top' --max-tokens 8; echo \$? > '$WORK/dash.rc'"
for _ in $(seq 120); do
    tmux -L "$TMUX_SOCK" capture-pane -p >"$WORK/dash.txt" 2>/dev/null || true
    grep -q "serving" "$WORK/dash.txt" && break
    sleep 0.5
done
grep -q "serving" "$WORK/dash.txt" || { cat "$WORK/dash.txt"; die "the dashboard showed no serving worker in 60 s"; }
tmux -L "$TMUX_SOCK" send-keys q
for _ in $(seq 60); do [ -s "$WORK/dash.rc" ] && break; sleep 0.5; done
[ "$(cat "$WORK/dash.rc" 2>/dev/null)" = 0 ] || die "the dashboard did not quit with status 0 within 30 s of q"
say "the dashboard started, served and quit on q"
say "passed in $(( $(date +%s) - T0 )) s"

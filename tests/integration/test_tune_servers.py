"""tune with the servers people tune (issue 58 item 4, docs/design/tune.md): mlx_lm.server batching B requests
(--decode-concurrency) with its prompts prefilled at once as a knob (--prompt-concurrency), started and stopped as
llama-server is, in the environment its BLAS needs, and served by the command it won with; vLLM, where it is not
installed, named skipped with why in the output and tune.json, never silently; and one real tune of
mlx_lm.server against llama-server on the embedded model within a small budget."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from measure.control.tune import (Candidate, Serving, Tune, TuneResult, bench_command, candidates, cell_measure,
                                  format_result, serve_command, server_opener, unavailable)
from measure.control.tune.runs import ServerRun
from measure.control.tune.search import Carried
from measure.core.records import RunMeta
from test_tune import fake, settings

ROOT = Path(__file__).resolve().parents[2]
VLLM_HERE = importlib.util.find_spec("vllm") is not None


def test_mlx_server_takes_b_requests_at_once_and_its_prompt_concurrency_is_a_knob():
    cands = candidates(["mlx-server"], cores=4, users=4)
    slots = [c for c in cands if c.mode == "slots"]
    assert [(c.b, c.threads) for c in slots] == [(1, 4), (2, 4), (4, 4)]  # no half threads declared
    assert {(c.k, c.b, c.threads) for c in cands if c.mode == "servers"} == {(2, 1, 2), (2, 2, 2), (4, 1, 1)}
    c = slots[-1]
    assert c.key == "mlx-server np=4 t=4 pc=8" and c.default_knobs
    assert c.server_flags(2048) == ["--decode-concurrency", "4", "--prompt-concurrency", "8"]
    (v,) = c.variants()
    assert v.key == "mlx-server np=4 t=4 pc=1" and not v.default_knobs
    env = Serving("/m/x.mlx", ("LD_PRELOAD=/c/shim.so", "OPENBLAS_NUM_THREADS={threads}"))
    assert serve_command(v, "/m/x.gguf", 2048, "/bin/llama-server", env) == (
        "LD_PRELOAD=/c/shim.so OPENBLAS_NUM_THREADS=4 mlx_lm.server --model /m/x.mlx --host 127.0.0.1 --port 8080 "
        "--decode-concurrency 4 --prompt-concurrency 1")  # its model folder, not the GGUF; not llama-server's program
    b = bench_command(c, "/m/x.mlx", settings(), 16)
    assert b.startswith("inference-top bench --engine http --url http://127.0.0.1:8080/v1 --b 2") and "--tokenizer" not in b
    two = Candidate("mlx-server", "servers", 2, 2, 2)
    assert serve_command(two, "/m/x.mlx", 512).count("mlx_lm.server --model /m/x.mlx") == 2
    ls = Candidate("llama-server", "slots", 1, 2, 2)  # llama-server's keeps its program and its flags
    assert serve_command(ls, "/m/x.gguf", 512, "/opt/bin/llama-server").startswith(
        "/opt/bin/llama-server -m /m/x.gguf --host 127.0.0.1 --port 8080 -np 2 -c 1024 -t 2")
    from measure.control.tune.record import CandidateRecord

    def rec(cand):
        return CandidateRecord(key=cand.key, candidate=cand, status="pending").to_json()

    assert rec(v)["prompt_concurrency"] == 1 and "prompt_concurrency" not in rec(ls)  # only where it is a knob
    assert CandidateRecord.from_json(rec(v)).candidate == v


STAND_IN = """import json, os, sys
sys.path.insert(0, {root!r})
from engines.null_server import main
args = sys.argv[1:]
with open({seen!r}, "a") as f:
    f.write(json.dumps({{"argv": args, "threads": os.environ.get("OPENBLAS_NUM_THREADS")}}) + "\\n")
sys.exit(main(["--port", args[args.index("--port") + 1], "--ttft-ms", "5", "--itl-ms", "2"]))
"""


def test_a_mlx_server_candidate_is_started_with_its_flags_and_environment_and_stopped(tmp_path):
    """A stand-in for mlx_lm.server (SIMULATED: it notes its argv and environment, then serves the null schedule on
    the --port given): tune starts it with the candidate's flags and {threads} in its environment, measures the
    closed loop over HTTP (prompts as text: no GGUF tokenizer), and stops it."""
    seen = tmp_path / "seen.jsonl"
    prog = tmp_path / "mlx_lm.server"
    prog.write_text("#!" + sys.executable + "\n" + STAND_IN.format(root=str(ROOT), seen=str(seen)))
    prog.chmod(0o755)
    c = Candidate("mlx-server", "slots", 1, 2, 3, prompt_concurrency=1)
    s = settings(engines=["mlx-server"], users=2, requests=6)
    meta = RunMeta("mlx_lm.server", "null", 0, mode="http", b=2, simulated=True)
    run = ServerRun(str(prog), "/m/x.mlx", 512, ready_s=30, env=("OPENBLAS_NUM_THREADS={threads}",))
    opener = server_opener(run, meta, 2, tmp_path / "runs")
    t = cell_measure(opener, s, tmp_path, {}, lambda m: None)(c, 6, 60)
    assert t.status == "ok" and t.completed == 6, t
    (run,) = [json.loads(x) for x in seen.read_text().splitlines()]
    assert run["threads"] == "3"
    assert run["argv"] == ["--model", "/m/x.mlx", "--host", "127.0.0.1", "--port", run["argv"][5],
                           "--decode-concurrency", "2", "--prompt-concurrency", "1"]  # no --metrics: llama-server's
    import socket

    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):  # stopped after its run
        sock.connect(("127.0.0.1", int(run["argv"][5])))


def test_an_engine_not_installed_here_is_named_skipped_in_the_output_and_tune_json(monkeypatch):
    from engines import registry
    from engines.spec import EngineDecl

    toy = EngineDecl("toy-server", "toy", "server", tune_modes=("slots",), needs="no_such_module_for_tune_58")
    monkeypatch.setitem(registry.ENGINES, "toy-server", toy)
    assert unavailable(["llama", "toy-server"]) == {
        "toy-server": "no_such_module_for_tune_58 is not installed here (pip install no_such_module_for_tune_58)"}
    if not VLLM_HERE:
        assert unavailable(["vllm"]) == {"vllm": "vllm is not installed here (pip install vllm)"}
    clock = [0.0]
    cands = candidates(["llama"], cores=2, users=2)
    why = unavailable(["toy-server"])
    tune = Tune(settings(), cands, fake({c.key: float(c.k * c.b + c.threads) for c in cands}, clock),
                say=lambda m: None, clock=lambda: clock[0], carried=Carried(skipped_engines=why))
    tune.search()
    res = tune.result("m.gguf", 512)
    back = TuneResult.from_json(json.loads(res.text()))
    assert back.skipped_engines == why and json.loads(res.text())["skipped_engines"] == why
    assert f"skipped: --engine toy-server: {why['toy-server']}" in format_result(back)
    assert "skipped_engines" not in Tune(settings(), cands, fake({}, clock), clock=lambda: clock[0]).result(
        "m.gguf", 512).to_json()  # none skipped: nothing written (a tune.json of main rewrites byte for byte)


@pytest.mark.skipif(VLLM_HERE, reason="vLLM is installed here: it is tuned, not skipped")
def test_cli_names_vllm_skipped_and_refuses_in_one_line_where_it_is_the_only_engine(tmp_path):
    p = subprocess.run([sys.executable, "-m", "tui.cli", "tune", "--engine", "vllm", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        "inference-top: error: no engine asked for can run here: vllm: vllm is not installed here (pip install vllm)"]


@pytest.mark.timeout(600)  # the machine's probe first (none is cached in the tests' cache), then the budget
def test_cli_tunes_mlx_server_against_llama_server_on_the_embedded_model(tmp_path):
    """Real servers (mlx_lm.server on the mlx folder made from the embedded GGUF, llama-server on the GGUF), a
    small budget: the tune ends within it (and the start-up of the run going on), names a winner with the command
    that serves it, and names vLLM skipped where it is not installed."""
    pytest.importorskip("mlx_lm")
    out = tmp_path / "t"
    engines = "mlx-server,llama-server" + ("" if VLLM_HERE else ",vllm")
    p = subprocess.run([sys.executable, "-m", "tui.cli", "tune", "--engine", engines, "--users", "2", "--requests",
                        "2", "--max-tokens", "4", "--ctx", "256", "--slo", "server", "--first-round", "2",
                        "--budget", "45", "--no-compare", "--out", str(out)],
                       capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    res = TuneResult.from_json(json.loads((out / "tune.json").read_text()))
    assert res.elapsed_s <= 45 + 30, res.elapsed_s
    assert {c.candidate.engine for c in res.candidates} == {"mlx-server", "llama-server"}
    assert res.winner is not None and f"serve it:      {res.winner.serve_command}" in p.stdout
    ran = [c for c in res.candidates if c.trials]
    assert ran and all((out / t.records).exists() for c in ran for t in c.trials)
    if res.winner.candidate.engine == "mlx-server":
        assert ".mlx --host 127.0.0.1 --port 8080 --decode-concurrency" in res.winner.serve_command
    if not VLLM_HERE:
        assert "vllm is not installed here" in res.skipped_engines["vllm"]
        assert "tune: --engine vllm skipped: vllm is not installed here" in p.stdout


def test_servers_sent_prompts_of_different_lengths_are_said_to_have_had_different_work(tmp_path):
    """mlx_lm.server takes text only: with the unique prefix before its prompt it prefills ≈ 2× the tokens a
    llama-server sent ids (the prompt's length kept) prefills (28.0 against 11.6 a request on the embedded model).
    The tune's note says so, from the runs' records; engines within 10 % of each other get no note."""
    from measure.control.tune.record import Trial
    from measure.control.tune.runs import _prompt_work
    from measure.core.records import RequestRecord
    from measure.machine.recorder import Recorder

    def run(c, prompt_tokens):
        rel = f"runs/{c.slug}-n4.jsonl"
        (tmp_path / rel).unlink(missing_ok=True)  # a recorder appends to a file already there
        rec = Recorder(tmp_path / rel, {"command": "tune", "candidate_key": c.key})
        for i, n in enumerate(prompt_tokens):
            rec.record(RequestRecord(run_id="r", request_id=i, mode="http", engine=c.engine, model="m",
                                     model_bytes=0, k=1, b=2, prompt_tokens=n, output_tokens=4))
        rec.close()
        return Trial(requests=4, status="ok", goodput_tps=1.0, output_throughput=2.0, records=rel)

    mlx, llama = Candidate("mlx-server", "slots", 1, 2, 2), Candidate("llama-server", "slots", 1, 2, 2)
    s = settings(engines=["mlx-server", "llama-server"], requests=4)
    tune = Tune(s, [mlx, llama], fake({}, [0.0]), say=lambda m: None)
    tune.rows[mlx.key].trials.append(run(mlx, [26, 28, 30, 28]))
    tune.rows[llama.key].trials.append(run(llama, [10, 12, 13, 11]))
    said = _prompt_work(tmp_path, tune)
    assert said is not None and "not sent the same prompt work: mlx-server 28.0, llama-server 11.5 prompt tokens" in said
    tune.rows[llama.key].trials[-1] = run(llama, [26, 28, 29, 28])
    assert _prompt_work(tmp_path, tune) is None

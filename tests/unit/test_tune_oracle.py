"""Oracles for `inference-top tune`'s candidate space and search (measure/control/tune/space.py, search.py;
docs/design/tune.md): every shape list, flag list, footprint, prediction, estimate, pruning, halving round and
Pareto front worked out by hand on a tiny case, each threshold tried on both sides (PRUNE of the best predicted,
the first round's cut, the budget's hold of a halving round, the roofline's OFF_BY), each refusal and reason read
for the figures it names. Pure: a planted `measure` and clock, a planted roofline; no engine, no timing."""
from __future__ import annotations

import importlib.util
import math
from types import SimpleNamespace

import pytest

import presets
from measure.control.tune import search as SE
from measure.control.tune import space as SP
from measure.control.tune.live import TuneControl
from measure.control.tune.record import Round, Trial
from measure.control.tune.rows import Row
from measure.control.tune.search import Carried, Tune
from measure.control.tune.space import Candidate, Predicted, Settings, TuneError
from measure.control.tune.text import Serving

MiB, GiB = 1 << 20, 1 << 30
LLAMA_ONLY = "tune takes llama, llama-server, mlx, mlx-server, vllm"  # ENGINES sorted: the ones with tune_modes


def settings(**kw) -> Settings:
    base = dict(engines=["llama"], users=2, requests=4, max_tokens=8, ctx=512, budget_s=600.0,
                slo=presets.slo("ttft=300ms,tpot=12ms"), workload=presets.workload("synthetic:8"))
    return Settings(**{**base, **kw})


def ok(n, goodput, tps=None, p99=100.0, seconds=1.0, load_s=None, **kw) -> Trial:
    return Trial(requests=n, status="ok", goodput_tps=goodput, output_throughput=goodput + 1 if tps is None else tps,
                 p99_ttft_ms=p99, seconds=seconds, load_s=load_s, **kw)


def failed(n, why="crashed: exit 1") -> Trial:
    return Trial(requests=n, status="crashed", reason=why)


def keys(rows):
    return [r.candidate.key for r in rows]


class Planted:
    """A measure of planted goodput by (candidate key, requests), each run `step` s on the tune's clock; a key
    missing from `scores` crashes."""

    def __init__(self, scores, step=1.0, load_s=None, on_run=None):
        self.scores, self.step, self.load_s, self.on_run = scores, step, load_s, on_run
        self.clock, self.runs = [0.0], []

    def __call__(self, c, n, timeout, *suffix):
        self.clock[0] += self.step
        self.runs.append((c.key, n))
        if self.on_run:
            self.on_run(c, n)
        g = self.scores.get((c.key, n))
        if g is None:
            return Trial(requests=n, status="crashed", reason="planted crash")
        return ok(n, g, load_s=self.load_s)


def tune_of(cands, measure=None, predict=None, refuse=None, carried=None, **kw):
    m = measure or Planted({})
    lines: list[str] = []
    t = Tune(settings(**kw), cands, m, predict=predict, refuse=refuse, say=lines.append,
             clock=lambda: m.clock[0], carried=carried or Carried())
    t.lines = lines  # type: ignore[attr-defined]
    return t


# --- --budget ------------------------------------------------------------------------------------------------

def test_parse_budget_reads_seconds_minutes_and_hours():
    assert SP.parse_budget("90") == 90.0
    assert SP.parse_budget("90s") == 90.0
    assert SP.parse_budget("5s") == 5.0  # s: × 1
    assert SP.parse_budget("10m") == 600.0  # 10 × 60
    assert SP.parse_budget("1.5h") == 5400.0  # 1.5 × 3600
    assert SP.parse_budget("2h") == 7200.0
    assert SP.parse_budget(" 2 m ") == 120.0  # spaces around and between
    assert SP.parse_budget("0.001") == 0.001  # the least over 0 is a budget


@pytest.mark.parametrize("text", ["0", "0.0", "0m", "-5", "", "10x", "1.5.2", "m", "10 mins", "1e3"])
def test_parse_budget_refuses_zero_and_what_is_not_a_time(text):
    with pytest.raises(TuneError) as e:
        SP.parse_budget(text)
    assert str(e.value) == f"--budget {text!r}: give a time such as 600, 600s, 10m or 1h"


def test_parse_budget_refuses_none():
    with pytest.raises(TuneError, match=r"^--budget None: give a time such as 600, 600s, 10m or 1h$"):
        SP.parse_budget(None)  # type: ignore[arg-type]


# --- the engines tune takes ------------------------------------------------------------------------------------

def test_engines_tune_takes_are_the_declared_ones_with_modes_sorted():
    assert SP.ENGINES == ("llama", "llama-server", "mlx", "mlx-server", "vllm")
    assert SP.tuned("llama").name == "llama" and SP.tuned("vllm").name == "vllm"
    for bad in ("http", "null", "nope"):  # declared without tune_modes, or not declared at all
        with pytest.raises(TuneError) as e:
            SP.tuned(bad)
        assert str(e.value) == f"--engine {bad}: {LLAMA_ONLY}"


def test_unavailable_names_only_declared_engines_whose_module_is_missing(monkeypatch):
    missing = {"vllm", "mlx_lm"}
    asked: list[str] = []

    def find_spec(name, *a, **kw):
        asked.append(name)
        return None if name in missing else SimpleNamespace(name=name)  # a module found

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    out = SP.unavailable(["llama", "vllm", "nope", "mlx-server", "llama-server"])
    assert out == {"vllm": "vllm is not installed here (pip install vllm)",
                   "mlx-server": "mlx_lm is not installed here (pip install mlx_lm)"}
    assert list(out) == ["vllm", "mlx-server"]  # in the order asked
    assert asked == ["vllm", "mlx_lm"]  # an engine with no `needs` is never looked up
    missing.clear()
    assert SP.unavailable(["llama", "vllm", "mlx-server"]) == {}
    assert SP.unavailable([]) == {}


# --- a candidate -------------------------------------------------------------------------------------------------

def test_a_candidate_is_named_by_its_engine_shape_and_declared_knobs():
    assert Candidate("llama", "instances", 2, 1, 4).key == "llama instances K=2 t=4 fa=on"
    assert Candidate("llama", "batch", 1, 4, 8, flash_attn=False).key == "llama batch K=1 B=4 t=8 fa=off"
    assert Candidate("llama-server", "slots", 1, 4, 8).key == "llama-server np=4 t=8 fa=on kv=f16 ub=512"
    c = Candidate("llama-server", "servers", 2, 4, 4, kv_type="q8_0", ubatch=128)
    assert c.key == "llama-server ×2 np=4 t=4 fa=on kv=q8_0 ub=128"
    assert c.slug == "llama-server_2_np=4_t=4_fa=on_kv=q8_0_ub=128"  # " ×" one run → one "_"
    assert Candidate("mlx-server", "slots", 1, 2, 1).key == "mlx-server np=2 t=1 pc=8"
    assert Candidate("mlx", "instances", 1, 1, 2, flash_attn=False).key == "mlx instances K=1 t=2"  # no knobs
    assert Candidate("vllm", "slots", 1, 4, 1).key == "vllm np=4 t=1"
    with pytest.raises(TuneError, match=LLAMA_ONLY):
        _ = Candidate("http", "slots").key


def test_a_candidate_holds_cores_engines_and_sequences():
    c = Candidate("llama", "batch", 2, 4, 3)
    assert c.shape == ("llama", "batch", 2, 4, 3)
    assert c.concurrency == 8 and c.holds == (6, 2, 8)  # K × B; K × threads, K, K × B
    i = Candidate("llama", "instances", 3, 5, 2)  # instances: B does not count
    assert i.concurrency == 3 and i.holds == (6, 3, 3)
    s = Candidate("llama-server", "servers", 2, 3, 4)
    assert s.concurrency == 6 and s.holds == (8, 2, 6)


def test_default_knobs_is_every_knob_at_its_default():
    assert Candidate("llama", "instances").default_knobs
    assert not Candidate("llama", "instances", flash_attn=False).default_knobs
    assert not Candidate("llama-server", "slots", kv_type="q8_0").default_knobs
    assert not Candidate("llama-server", "slots", ubatch=128).default_knobs
    assert not Candidate("llama-server", "slots", ubatch=513).default_knobs
    assert not Candidate("mlx-server", "slots", prompt_concurrency=1).default_knobs
    assert not Candidate("mlx-server", "slots", prompt_concurrency=9).default_knobs


def test_variants_change_each_declared_knob_once_in_the_declared_order():
    base = Candidate("llama-server", "slots", 1, 4, 8)
    assert keys_of(base.variants()) == ["llama-server np=4 t=8 fa=off kv=f16 ub=512",
                                        "llama-server np=4 t=8 fa=on kv=q8_0 ub=512",
                                        "llama-server np=4 t=8 fa=on kv=f16 ub=128"]
    assert keys_of(Candidate("llama", "batch", 1, 2, 2).variants()) == ["llama batch K=1 B=2 t=2 fa=off"]
    assert keys_of(Candidate("llama", "batch", 1, 2, 2, flash_attn=False).variants()) == [
        "llama batch K=1 B=2 t=2 fa=on"]  # flipped back
    assert keys_of(Candidate("mlx-server", "servers", 2, 2, 1).variants()) == ["mlx-server ×2 np=2 t=1 pc=1"]
    assert Candidate("mlx", "instances").variants() == [] and Candidate("vllm", "slots", 1, 2).variants() == []


def keys_of(cands):
    return [c.key for c in cands]


def test_server_flags_by_the_declaration():
    # llama-server: 4 slots of 512 tokens: -c 4 × 512 = 2048
    assert Candidate("llama-server", "slots", 1, 4, 8).server_flags(512) == [
        "-np", "4", "-c", "2048", "-t", "8", "-fa", "on", "-ctk", "f16", "-ctv", "f16", "-ub", "512"]
    c = Candidate("llama-server", "servers", 2, 3, 2, flash_attn=False, kv_type="q4_0", ubatch=128)
    assert c.server_flags(1000) == ["-np", "3", "-c", "3000", "-t", "2", "-fa", "off", "-ctk", "q4_0", "-ctv",
                                    "q4_0", "-ub", "128"]
    assert Candidate("mlx-server", "slots", 1, 4, 2).server_flags(512) == [
        "--decode-concurrency", "4", "--prompt-concurrency", "8"]
    assert Candidate("mlx-server", "slots", 1, 2, 2, prompt_concurrency=1).server_flags(512) == [
        "--decode-concurrency", "2", "--prompt-concurrency", "1"]
    assert Candidate("vllm", "slots", 1, 16).server_flags(768) == ["--max-num-seqs", "16", "--max-model-len", "768"]
    with pytest.raises(TuneError) as e:
        Candidate("llama", "batch", 1, 2).server_flags(512)
    assert str(e.value) == "--engine llama: not a server tune starts"
    with pytest.raises(TuneError, match=r"^--engine mlx: not a server tune starts$"):
        SP._no_flags(Candidate("mlx", "instances"), 512)
    # the flag functions themselves (server_flags dispatches on the declaration's name)
    assert SP._llama_server_flags(Candidate("llama-server", "slots", 1, 2, 1), 10)[:4] == ["-np", "2", "-c", "20"]
    assert SP._vllm_flags(Candidate("vllm", "slots", 1, 2), 10) == ["--max-num-seqs", "2", "--max-model-len", "10"]
    assert SP._mlx_server_flags(Candidate("mlx-server", "slots", 1, 3), 10) == [
        "--decode-concurrency", "3", "--prompt-concurrency", "8"]


# --- the shapes --------------------------------------------------------------------------------------------------

def test_powers_of_two_up_to_the_limit():
    assert SP._powers(0) == [] and SP._powers(-3) == []
    assert SP._powers(1) == [1]
    assert SP._powers(2) == [1, 2]
    assert SP._powers(7) == [1, 2, 4]
    assert SP._powers(8) == [1, 2, 4, 8]
    assert SP._powers(9) == [1, 2, 4, 8]


def test_threads_deal_the_cores_and_halve_them_where_asked():
    assert SP._threads(8, 1, False) == [8]
    assert SP._threads(8, 1, True) == [8, 4]
    assert SP._threads(8, 3, True) == [2, 1]  # 8 // 3 = 2, half 1
    assert SP._threads(3, 1, True) == [3, 1]  # 3 // 2 = 1
    assert SP._threads(8, 8, True) == [1]  # 1 and max(1, 0) = 1: one entry
    assert SP._threads(8, 16, False) == [1]  # 8 // 16 = 0 → 1
    assert SP._threads(8, 16, True) == [1]


def test_instances_shapes():
    # K 1 … min(4 cores, 3 users) = 3; threads 4 ÷ K and half: K=1 → 4, 2; K=2 → 2, 1; K=3 → 1
    assert SP._instances(4, 3, 16, True) == [(1, 1, 4), (1, 1, 2), (2, 1, 2), (2, 1, 1), (3, 1, 1)]
    assert SP._instances(4, 3, 16, False) == [(1, 1, 4), (2, 1, 2), (3, 1, 1)]
    assert SP._instances(2, 8, 16, False) == [(1, 1, 2), (2, 1, 1)]  # min(2 cores, 8 users) = 2
    assert SP._instances(3, 3, 1, False) == [(1, 1, 3), (2, 1, 1), (3, 1, 1)]  # K = users = cores: included


def test_batch_shapes():
    # K=1: B ∈ powers(min(16, 5)) = 1, 2, 4 less 1; K=2: powers(min(16, ⌈5/2⌉ = 3)) = 1, 2 less 1; threads 4 ÷ K
    assert SP._batch(4, 5, 16, True) == [(1, 2, 4), (1, 4, 4), (2, 2, 2)]
    assert SP._batch(2, 4, 16, False) == [(1, 2, 2), (1, 4, 2), (2, 2, 1)]  # 2 cores: K = 2 too
    assert SP._batch(1, 8, 4, False) == [(1, 2, 1), (1, 4, 1)]  # 1 core: K = 1 only; B up to max_b 4
    assert SP._batch(4, 16, 8, False) == [(1, 2, 4), (1, 4, 4), (1, 8, 4), (2, 2, 2), (2, 4, 2), (2, 8, 2)]
    assert SP._batch(4, 16, 4, False) == [(1, 2, 4), (1, 4, 4), (2, 2, 2), (2, 4, 2)]
    assert SP._batch(4, 1, 16, False) == []  # one user: no batch of 2
    assert SP._batch(4, 2, 16, False) == [(1, 2, 4)]  # ⌈2/2⌉ = 1: K=2 has none
    assert SP._batch(4, 3, 16, False) == [(1, 2, 4), (2, 2, 2)]  # ⌈3/2⌉ = 2 (not 1.5): K=2 batches 2


def test_slots_shapes():
    # powers(6) = 1, 2, 4 and the users 6; at 8 and 4 threads; max_b does not bound slots
    assert SP._slots(8, 6, 2, True) == [(1, 1, 8), (1, 1, 4), (1, 2, 8), (1, 2, 4), (1, 4, 8), (1, 4, 4),
                                        (1, 6, 8), (1, 6, 4)]
    assert SP._slots(2, 4, 16, False) == [(1, 1, 2), (1, 2, 2), (1, 4, 2)]  # 4 is a power: once
    assert SP._slots(2, 1, 16, False) == [(1, 1, 2)]


def test_servers_shapes():
    # K ∈ powers(min(8, 6))[1:] = 2, 4; N ∈ powers(⌈6/K⌉): K=2 → 1, 2 (⌈3⌉); K=4 → 1, 2 (⌈1.5⌉); threads 8 ÷ K
    assert SP._servers(8, 6, 16, True) == [(2, 1, 4), (2, 2, 4), (4, 1, 2), (4, 2, 2)]
    # K ∈ 2, 4 (4 cores); K=2 → ⌈8/2⌉ = 4 → 1, 2, 4; K=4 → 2 → 1, 2
    assert SP._servers(4, 8, 1, False) == [(2, 1, 2), (2, 2, 2), (2, 4, 2), (4, 1, 1), (4, 2, 1)]
    assert SP._servers(1, 8, 16, False) == []  # one core: one server only (slots)
    assert SP._servers(8, 1, 16, False) == []  # one user: one server
    assert SP._servers(3, 3, 16, False) == [(2, 1, 1), (2, 2, 1)]  # ⌈3/2⌉ = 2; 3 // 2 = 1 thread


def test_candidates_of_llama_on_two_cores_and_two_users():
    got = SP.candidates(["llama"], cores=2, users=2)
    # instances: K=1 at 2 and 1 threads, K=2 at 1; batch: K=1 B=2 at 2 (K=2: ⌈2/2⌉ = 1, no B ≥ 2)
    assert keys_of(got) == ["llama instances K=1 t=2 fa=on", "llama instances K=1 t=1 fa=on",
                            "llama instances K=2 t=1 fa=on", "llama batch K=1 B=2 t=2 fa=on"]
    assert all(c.default_knobs for c in got)
    assert SP.candidates(["llama", "llama"], cores=2, users=2) == got  # each once
    # no cores read (0): one core
    assert keys_of(SP.candidates(["llama"], cores=0, users=2)) == ["llama instances K=1 t=1 fa=on",
                                                                    "llama batch K=1 B=2 t=1 fa=on"]


def test_candidates_of_mlx_bound_batches_by_max_b():
    got = SP.candidates(["mlx"], cores=4, users=16, max_b=4)
    assert [c.shape[1:] for c in got] == [
        ("instances", 1, 1, 4), ("instances", 2, 1, 2), ("instances", 3, 1, 1), ("instances", 4, 1, 1),
        ("batch", 1, 2, 4), ("batch", 1, 4, 4), ("batch", 2, 2, 2), ("batch", 2, 4, 2)]
    default = SP.candidates(["mlx"], cores=1, users=32)  # max_b 16: B 2, 4, 8, 16 on one core
    assert [c.b for c in default if c.mode == "batch"] == [2, 4, 8, 16]


def test_candidates_of_the_servers():
    got = SP.candidates(["llama-server", "vllm"], cores=4, users=4)
    assert keys_of(got) == [
        "llama-server np=1 t=4 fa=on kv=f16 ub=512", "llama-server np=1 t=2 fa=on kv=f16 ub=512",
        "llama-server np=2 t=4 fa=on kv=f16 ub=512", "llama-server np=2 t=2 fa=on kv=f16 ub=512",
        "llama-server np=4 t=4 fa=on kv=f16 ub=512", "llama-server np=4 t=2 fa=on kv=f16 ub=512",
        "llama-server ×2 np=1 t=2 fa=on kv=f16 ub=512", "llama-server ×2 np=2 t=2 fa=on kv=f16 ub=512",
        "llama-server ×4 np=1 t=1 fa=on kv=f16 ub=512",
        "vllm np=1 t=4", "vllm np=2 t=4", "vllm np=4 t=4"]
    with pytest.raises(TuneError, match="--engine http: "):
        SP.candidates(["http"], cores=4, users=4)


# --- memory ------------------------------------------------------------------------------------------------------

def test_memory_refusal_prices_instances_with_their_single_stream_context():
    # K=2 instances, 1 GiB of weights, 1 MiB of f16 KV a token, ctx 1024: weights 2 × 1 GiB, runtime 2 × 512 MiB,
    # KV 2 × 1024 × 1 MiB = 2 GiB: 5 GiB
    c = Candidate("llama", "instances", 2, 1, 2)
    total = 5 * GiB
    assert SP.memory_refusal(c, 1024, GiB, MiB, total, overhead=512 * MiB) is None
    assert SP.memory_refusal(c, 1024, GiB, MiB, None, overhead=512 * MiB) is None  # no budget
    assert SP.memory_refusal(c, 1024, GiB, MiB, 0, overhead=512 * MiB) is None
    assert SP.memory_refusal(c, 1024, GiB, MiB, total - 1, overhead=512 * MiB) == (
        "K=2 B=1 needs ≈ 5.0 GiB of 5.0 GiB budget (weights 2.0 GiB + runtime 1.0 GiB + KV 2.0 GiB); refused "
        "(--force or --memory-budget to override)")
    # the default runtime: 100 MiB an engine: 4 GiB + 200 MiB
    assert SP.memory_refusal(c, 1024, GiB, MiB, 4 * GiB + 200 * MiB) is None
    assert SP.memory_refusal(c, 1024, GiB, MiB, 4 * GiB + 200 * MiB - 1) is not None


def test_memory_refusal_prices_slots_as_one_engine_batching_them_at_the_cache_type():
    # llama-server, 4 slots, q8_0: 1 MiB × (34/32) ÷ 2 = 17/32 MiB a token; KV (4 × 1024 + 1024) × 17/32 MiB
    # = 2720 MiB; + 1 GiB weights + 512 MiB runtime = 4256 MiB (4.15625 GiB)
    c = Candidate("llama-server", "slots", 1, 4, 8, kv_type="q8_0")
    assert SP.memory_refusal(c, 1024, GiB, MiB, 4256 * MiB, overhead=512 * MiB) is None
    assert SP.memory_refusal(c, 1024, GiB, MiB, 4256 * MiB - 1, overhead=512 * MiB) == (
        "K=1 B=4 needs ≈ 4.2 GiB of 4.2 GiB budget (weights 1.0 GiB + runtime 0.5 GiB + KV 2.7 GiB); refused "
        "(--force or --memory-budget to override)")
    # q4_0: 18/32 ÷ 2 = 9/32 MiB a token: 5120 × 9/32 = 1440 MiB; 1024 + 512 + 1440 = 2976 MiB
    q4 = Candidate("llama-server", "slots", 1, 4, 8, kv_type="q4_0")
    assert SP.memory_refusal(q4, 1024, GiB, MiB, 2976 * MiB, overhead=512 * MiB) is None
    assert SP.memory_refusal(q4, 1024, GiB, MiB, 2976 * MiB - 1, overhead=512 * MiB) is not None
    # f16, and a type the table does not know (priced as f16): 5120 MiB of KV; 1024 + 512 + 5120 = 6656 MiB
    for kv in ("f16", "bf16"):
        f = Candidate("llama-server", "slots", 1, 4, 8, kv_type=kv)
        assert SP.memory_refusal(f, 1024, GiB, MiB, 6656 * MiB, overhead=512 * MiB) is None, kv
        assert SP.memory_refusal(f, 1024, GiB, MiB, 6656 * MiB - 1, overhead=512 * MiB) is not None, kv


def test_memory_refusal_prices_k_servers_and_batches_as_k_engines():
    # 2 servers of 2 slots, f16: KV 2 × (2 × 1024 + 1024) × 1 MiB = 6144 MiB; weights 2048, runtime 2 × 256 MiB
    c = Candidate("llama-server", "servers", 2, 2, 2)
    assert SP.memory_refusal(c, 1024, GiB, MiB, 8704 * MiB, overhead=256 * MiB) is None
    refused = SP.memory_refusal(c, 1024, GiB, MiB, 8704 * MiB - 1, overhead=256 * MiB)
    assert refused is not None and refused.startswith("K=2 B=2 needs ≈ 8.5 GiB of 8.5 GiB budget (weights 2.0 GiB "
                                                      "+ runtime 0.5 GiB + KV 6.0 GiB)")
    b = Candidate("llama", "batch", 2, 2, 2)  # the same as two engines batching 2
    assert SP.memory_refusal(b, 1024, GiB, MiB, 8704 * MiB, overhead=256 * MiB) is None
    assert SP.memory_refusal(b, 1024, GiB, MiB, 8704 * MiB - 1, overhead=256 * MiB) == refused


# --- the roofline's prediction ------------------------------------------------------------------------------------

class Roof:
    """A planted roofline: predict and predict_range record their arguments and answer planted levels."""

    def __init__(self, monkeypatch, ttft=0.1, tpot=0.01, span=None, fails=False, range_fails=False):
        import measure.core.roofline as R

        self.calls: list[tuple] = []
        self.ttft, self.tpot, self.span, self.fails, self.range_fails = ttft, tpot, span, fails, range_fails
        monkeypatch.setattr(R, "predict", self.predict)
        monkeypatch.setattr(R, "predict_range", self.predict_range)

    def level(self, ttft, tpot, binding="bandwidth"):
        return SimpleNamespace(ttft_s=ttft, tpot_s=tpot, binding=binding)

    def predict(self, work, machine, mode, k, b, threads, at):
        self.calls.append((work, machine, mode, k, b, threads, at.prompt_tokens, at.output_tokens, at.context))
        if self.fails:
            raise ValueError("no such level")
        return self.level(self.ttft, self.tpot)

    def predict_range(self, work, machine, mode, k, b, threads, at):
        self.calls.append(("range", work, machine, mode, k, b, threads, at.prompt_tokens, at.output_tokens))
        if self.range_fails:
            raise ValueError("no family")
        if self.span is None:
            return None
        return tuple(self.level(*x) for x in self.span)


def slo(ttft=None, tpot=None):
    return SimpleNamespace(ttft_s=ttft, tpot_s=tpot)


def test_roofline_predictor_batch_serving_every_user(monkeypatch):
    roof = Roof(monkeypatch)
    s = settings(users=8, max_tokens=11, prompt_tokens=40, slo=slo(0.3, 0.012))
    run = SP.roofline_predictor("work", "machine", s)
    p = run(Candidate("llama", "batch", 2, 4, 3))
    # B_eff = min(4, ⌈8/2⌉ = 4) = 4; served min(8, 2 × 4) = 8; S = 0.1 + 10 × 0.01 = 0.2 s; tok/s = 8 × 11 ÷ 0.2
    assert roof.calls[0] == ("work", "machine", "batch", 2, 4, 3, 40, 11, None)
    assert p.tps == pytest.approx(440.0) and p.goodput_tps == p.tps
    assert p.ttft_s == pytest.approx(0.1) and p.tpot_s == 0.01 and p.binding == "bandwidth"
    assert p.tps_range is None


def test_roofline_predictor_instances_queue_the_users_they_do_not_serve(monkeypatch):
    roof = Roof(monkeypatch)
    s = settings(users=8, max_tokens=11, slo=slo(0.3, 0.012))
    p = SP.roofline_predictor("w", "m", s)(Candidate("llama", "instances", 2, 5, 1))
    # instances: B_eff 1 (its b of 5 ignored); served min(8, 2) = 2; tok/s = 2 × 11 ÷ 0.2 = 110; a request waits
    # (8 ÷ 2 − 1) × 0.2 = 0.6 s: TTFT 0.7 s over the SLO's 0.3: goodput 0
    assert roof.calls[0][2:6] == ("instances", 2, 1, 1)
    assert p.tps == pytest.approx(110.0) and p.ttft_s == pytest.approx(0.7) and p.goodput_tps == 0.0


def test_roofline_predictor_caps_b_at_the_users_each_engine_holds(monkeypatch):
    roof = Roof(monkeypatch)
    s = settings(users=5, max_tokens=11, slo=slo(None, None))
    p = SP.roofline_predictor("w", "m", s)(Candidate("llama", "batch", 2, 8, 1))
    # B_eff = min(8, ⌈5/2⌉ = 3) = 3; served min(5, 6) = 5; tok/s 5 × 11 ÷ 0.2 = 275; no wait: TTFT 0.1
    assert roof.calls[0][2:6] == ("batch", 2, 3, 1)
    assert p.tps == pytest.approx(275.0) and p.ttft_s == pytest.approx(0.1) and p.goodput_tps == p.tps
    # a server's slots are one engine batching them: 1 server of 4 slots, 6 users → B_eff 4, served 4; wait
    # (6 ÷ 4 − 1) × 0.2 = 0.1: TTFT 0.2
    s6 = settings(users=6, max_tokens=11, slo=slo(None, None))
    q = SP.roofline_predictor("w", "m", s6)(Candidate("llama-server", "slots", 1, 4, 2))
    assert roof.calls[-2][2:6] == ("batch", 1, 4, 2)
    assert q.tps == pytest.approx(4 * 11 / 0.2) and q.ttft_s == pytest.approx(0.2)


def test_roofline_predictor_goodput_meets_the_slo_at_its_edges(monkeypatch):
    # TTFT 0.25 s and TPOT 0.0625 s exactly (no queue: 2 users, 2 served): an SLO at those figures is met
    Roof(monkeypatch, ttft=0.25, tpot=0.0625)
    c = Candidate("llama", "batch", 1, 2, 1)

    def good(ttft, tpot):
        return SP.roofline_predictor("w", "m", settings(users=2, max_tokens=5, slo=slo(ttft, tpot)))(c).goodput_tps

    tps = 2 * 5 / (0.25 + 4 * 0.0625)  # 20 tok/s
    assert good(0.25, 0.0625) == pytest.approx(tps) == 20.0
    assert good(0.2499, 0.0625) == 0.0
    assert good(0.25, 0.0624) == 0.0
    assert good(None, 0.0625) == 20.0 and good(0.25, None) == 20.0 and good(None, 0.01) == 0.0
    assert good(0.1, None) == 0.0


def test_roofline_predictor_gives_a_chip_nobody_measured_its_range(monkeypatch):
    roof = Roof(monkeypatch, span=((0.2, 0.04), (0.05, 0.005)))
    s = settings(users=4, max_tokens=9, prompt_tokens=16, slo=slo(None, None))
    p = SP.roofline_predictor("w", "m", s)(Candidate("llama", "batch", 1, 4, 2))
    # served 4; slow S = 0.2 + 8 × 0.04 = 0.52 → 4 × 9 ÷ 0.52; fast S = 0.05 + 8 × 0.005 = 0.09 → 36 ÷ 0.09 = 400
    assert p.tps_range == pytest.approx((36 / 0.52, 400.0))
    assert roof.calls[1] == ("range", "w", "m", "batch", 1, 4, 2, 16, 9)


def test_roofline_predictor_has_nothing_for_a_level_it_cannot_predict(monkeypatch):
    Roof(monkeypatch, fails=True)
    assert SP.roofline_predictor("w", "m", settings())(Candidate("llama", "batch", 1, 2, 1)) is None
    Roof(monkeypatch, range_fails=True)
    assert SP.roofline_predictor("w", "m", settings())(Candidate("llama", "batch", 1, 2, 1)) is None


# --- the search: time -------------------------------------------------------------------------------------------

CANDS = SP.candidates(["llama"], cores=2, users=2)  # the four shapes above
A, B, C, D = CANDS


def pred(tps, goodput=None, rng=None):
    return Predicted(tps, 0.1, 0.01, tps if goodput is None else goodput, "bandwidth", rng)


def test_estimate_before_any_run_is_the_predicted_rate_plus_a_start():
    t = tune_of(CANDS)
    row = t.rows[A.key]
    # 4 requests × 8 tokens = 32 tokens at 20 tok/s assumed (no prediction) + START_S 8 s
    assert t.estimate(row, 4) == 8.0 + 32 / 20.0 == 9.6
    row.predicted = pred(16.0)
    assert t.estimate(row, 4) == 8.0 + 2.0  # 32 tokens ÷ 16 tok/s
    row.predicted = pred(0.0)  # a prediction of nothing: the 20 tok/s assumed
    assert t.estimate(row, 4) == 9.6
    row.predicted = pred(1.0)  # a slow one is a rate all the same: 32 tokens at 1 tok/s
    assert t.estimate(row, 4) == 8.0 + 32.0
    row.predicted = None
    t.start_s += [3.0, 5.0, 4.0]  # the longest start-up seen replaces START_S
    assert t.estimate(row, 4) == 5.0 + 1.6
    row.predicted = pred(64.0)
    assert t.estimate(row, 8) == 5.0 + 64 / 64.0  # 8 × 8 tokens


def test_estimate_after_a_run_scales_its_requests_and_keeps_its_start_whole():
    t = tune_of(CANDS)
    row = t.rows[A.key]
    row.predicted = pred(1000.0)
    row.trials.append(ok(4, 10.0, seconds=10.0, load_s=6.0))
    # 6 s of requests × 8 ÷ 4 = 12, + its own start-up 10 − 6 = 4
    assert t.estimate(row, 8) == 16.0
    row.trials.append(ok(8, 10.0, seconds=5.0, load_s=6.0))  # the last run counts; a start-up under 0 is 0
    assert t.estimate(row, 16) == 12.0
    row.trials.append(ok(16, 10.0, seconds=10.0))  # no load_s: the run scaled whole + the start-up assumed
    assert t.estimate(row, 32) == 10.0 * 32 / 16 + 8.0
    t.start_s.append(3.0)
    assert t.estimate(row, 32) == 20.0 + 3.0
    row.trials.append(failed(32))  # a failed run tells nothing of the time
    assert t.estimate(row, 32) == 23.0
    row.trials.append(Trial(requests=64, status="ok", seconds=99.0, output_throughput=0.0))  # no tok/s: not a rate
    assert t.estimate(row, 32) == 23.0


def test_estimate_without_any_measured_rate_falls_back_on_the_prediction():
    t = tune_of(CANDS)
    row = t.rows[A.key]
    row.predicted = pred(32.0)
    row.trials.append(Trial(requests=4, status="ok", seconds=50.0))  # ok, but no output_throughput
    assert t.estimate(row, 4) == 8.0 + 1.0


def test_budget_cut_is_said_unless_q_stopped_first():
    t = tune_of(CANDS)
    assert t.stopped == "done"
    t._budget_cut()
    assert t.stopped == "budget"
    t.stopped = "stopped"
    t._budget_cut()
    assert t.stopped == "stopped"


# --- the first round --------------------------------------------------------------------------------------------

def test_first_shapes_prune_under_half_the_best_predicted_goodput():
    fa_off = Candidate("llama", "instances", 1, 1, 2, flash_attn=False)
    plan = {A.key: pred(100.0), B.key: pred(120.0, goodput=0.0), C.key: pred(50.0), D.key: pred(49.0),
            fa_off.key: pred(7.0)}
    asked: list[str] = []

    def predict(c):
        asked.append(c.key)
        return plan[c.key]

    t = tune_of([*CANDS, fa_off], predict=predict)
    first = t._first_shapes()
    # ranked by (goodput, tok/s): A (100, 100), C (50, 50), B (0, 120), D (0, 49); the bar is 50 % of the best
    # predicted goodput 100 (never B's raw 120): C at 50.0 stays, D at 49.0 is pruned
    assert keys(first) == [A.key, C.key, B.key]
    assert t.rows[D.key].status == "pruned"
    assert t.rows[D.key].reason == "predicted 49.0 tok/s, under 50% of the best predicted goodput 100.0 tok/s"
    assert [t.rows[k].status for k in (A.key, B.key, C.key)] == ["pending"] * 3
    assert asked == [A.key, B.key, C.key, D.key, fa_off.key]  # every row is predicted, knobs too
    assert t.rows[fa_off.key].status == "pending" and t.rows[fa_off.key].predicted == plan[fa_off.key]
    assert t.rows[A.key].predicted == plan[A.key]


def test_first_shapes_bar_is_the_best_tok_s_where_none_is_predicted_within_the_slo():
    plan = {A.key: pred(100.0, 0.0), B.key: pred(50.0, 0.0), C.key: pred(49.9, 0.0), D.key: pred(70.0, 0.0)}
    t = tune_of(CANDS, predict=lambda c: plan[c.key])
    assert keys(t._first_shapes()) == [A.key, D.key, B.key]  # by tok/s: 100, 70, 50 (50 ≥ 0.5 × 100)
    assert t.rows[C.key].reason == ("predicted 49.9 tok/s, under 50% of the best predicted tok/s (none predicted "
                                    "within the SLO) 100.0 tok/s")


def test_first_shapes_prune_a_chip_nobody_measured_on_the_fast_end_of_its_range():
    plan = {A.key: pred(100.0), B.key: pred(10.0, rng=(10.0, 50.0)), C.key: pred(10.0, rng=(10.0, 49.0)),
            D.key: pred(60.0, rng=(40.0, 45.0))}
    t = tune_of(CANDS, predict=lambda c: plan[c.key])
    # the bar 50: B's fastest 50 stays; C's fastest 49 and D's 45 are pruned (D's own 60 is not what counts)
    assert keys(t._first_shapes()) == [A.key, B.key]
    assert t.rows[C.key].reason == ("predicted 10.0–49.0 tok/s (its backend family's range), under 50% of the best "
                                    "predicted goodput 100.0 tok/s")
    assert t.rows[D.key].status == "pruned" and t.rows[D.key].reason.startswith("predicted 40.0–45.0 tok/s")


def test_first_shapes_keep_the_first_round_best_and_say_why_the_rest_wait():
    # all within half the best (40 × 0.5 = 20): only the first round's cut prunes
    plan = {A.key: pred(25.0), B.key: pred(40.0), C.key: pred(30.0), D.key: pred(28.0)}
    t = tune_of(CANDS, predict=lambda c: plan[c.key], first_round=2)
    assert keys(t._first_shapes()) == [B.key, C.key]
    for k in (D.key, A.key):
        assert t.rows[k].status == "pruned"
        assert t.rows[k].reason == "the first round runs the 2 best predicted shapes; this one ranked below them"
    t3 = tune_of(CANDS, predict=lambda c: plan[c.key], first_round=4)  # exactly as many as there are: none cut
    assert keys(t3._first_shapes()) == [B.key, C.key, D.key, A.key]
    assert all(r.status == "pending" for r in t3.rows.values())


def test_first_shapes_without_a_roofline_keep_the_order_given():
    t = tune_of(CANDS, first_round=3)
    assert keys(t._first_shapes()) == [A.key, B.key, C.key]
    assert t.rows[D.key].status == "pruned" and t.rows[A.key].predicted is None


def test_first_shapes_refuse_before_they_predict_and_keep_the_unpredicted_last():
    plan = {A.key: pred(10.0), B.key: None, C.key: pred(30.0), D.key: pred(0.0)}
    asked: list[str] = []

    def predict(c):
        asked.append(c.key)
        return plan[c.key]

    t = tune_of(CANDS, predict=predict, refuse=lambda c: "over the budget" if c.key == C.key else None)
    # C refused (never predicted): the best is A's 10; B has no prediction: ranked (0, 0), never pruned
    # D predicted 0 tok/s is under 0.5 × 10: pruned
    assert keys(t._first_shapes()) == [A.key, B.key] and t.rows[D.key].status == "pruned"
    assert t.rows[C.key].status == "refused" and t.rows[C.key].reason == "over the budget"
    assert t.rows[C.key].predicted is None and C.key not in asked
    t2 = tune_of(CANDS, predict=predict, refuse=lambda c: None)
    first = t2._first_shapes()
    # the bar 0.5 × 30 = 15: A's 10 and D's 0 pruned; B (no prediction) stays, last
    assert keys(first) == [C.key, B.key] and t2.rows[D.key].status == t2.rows[A.key].status == "pruned"


def test_first_shapes_prune_nothing_where_the_best_prediction_is_zero():
    t = tune_of(CANDS, predict=lambda c: pred(0.0))
    assert keys(t._first_shapes()) == keys_of(CANDS)
    # D unpredicted ranks as (0, 0): with the others at (0, 0) it keeps its place, last
    t = tune_of(CANDS, predict=lambda c: None if c.key == D.key else pred(0.0))
    assert keys(t._first_shapes()) == keys_of(CANDS)


# --- the knobs ---------------------------------------------------------------------------------------------------

def measured(row, *trials):
    row.trials += trials
    row.status = "measured"
    return row


def test_knob_rows_run_each_engines_best_measured_shape_with_each_knob_changed():
    s1 = Candidate("llama-server", "slots", 1, 2, 2)
    s2 = Candidate("llama-server", "slots", 1, 1, 2)
    kv = Candidate("llama-server", "slots", 1, 2, 2, kv_type="q8_0")
    cands = [*CANDS, s1, s2]
    t = tune_of(cands, engines=["mlx", "llama", "llama-server"],
                refuse=lambda c: "q8_0 over the budget" if c.key == kv.key else None)
    r = t.rows
    r[A.key].predicted, r[s1.key].predicted = pred(11.0), pred(22.0)
    first = [measured(r[A.key], ok(4, 5.0, tps=9.0)), measured(r[B.key], ok(4, 5.0, tps=8.0)),
             measured(r[C.key], ok(4, 3.0)), r[D.key], measured(r[s2.key], ok(4, 1.0)),
             measured(r[s1.key], ok(4, 2.0))]
    r[D.key].status = "crashed"
    # llama: A and B tie on goodput 5, A's tok/s 9 wins; D crashed; llama-server: s1's 2 over s2's 1; mlx: none
    extra = t._knob_rows(first)
    assert keys(extra) == ["llama instances K=1 t=2 fa=off", "llama-server np=2 t=2 fa=off kv=f16 ub=512",
                           "llama-server np=2 t=2 fa=on kv=f16 ub=128"]
    assert extra[0].predicted == pred(11.0) and extra[1].predicted == pred(22.0)  # the best shape's
    assert r[kv.key].status == "refused" and r[kv.key].reason == "q8_0 over the budget"
    assert r[kv.key] not in extra
    assert all(x.status == "pending" for x in extra)
    # a knob's row already run (or refused) is not run again
    again = t._knob_rows(first)
    assert keys(again) == keys(extra)  # still pending: they were not run
    extra[0].status = "measured"
    assert keys(t._knob_rows(first)) == keys(extra[1:])


def test_knob_rows_only_for_the_engines_of_the_settings():
    t = tune_of(CANDS, engines=["mlx"])
    assert t._knob_rows([measured(t.rows[A.key], ok(4, 5.0))]) == []
    t2 = tune_of(CANDS, engines=["llama"])
    assert keys(t2._knob_rows([measured(t2.rows[D.key], ok(4, 5.0))])) == ["llama batch K=1 B=2 t=2 fa=off"]
    assert t2._knob_rows([]) == []


# --- successive halving -------------------------------------------------------------------------------------------

FIVE = SP.candidates(["llama"], cores=4, users=4)[:5]


def pool_of(t, cands, goodputs, n=4, seconds=1.0, load_s=None):
    rows = [measured(t.rows[c.key], ok(n, g, seconds=seconds, load_s=load_s)) for c, g in zip(cands, goodputs)]
    return sorted(rows, key=lambda r: r.trials[-1].score, reverse=True)


def test_halving_keeps_the_better_half_rounded_up_and_doubles_the_requests():
    r1, r2, r3, r4, r5 = (c.key for c in FIVE)
    m = Planted({(r1, 8): 35.0, (r2, 8): 20.0, (r3, 8): 30.0, (r1, 16): 5.0, (r3, 16): 6.0, (r3, 32): 1.0})
    t = tune_of(FIVE, measure=m)
    pool = pool_of(t, FIVE, [50.0, 40.0, 30.0, 20.0, 10.0])
    w = t._halve(pool, 4)
    # 5 → ⌈5/2⌉ = 3 at 8 (r1 35, r3 30, r2 20) → 2 at 16 (r3 6, r1 5) → 1 at 32
    assert [(x.requests, x.candidates) for x in t.rounds] == [(8, [r1, r2, r3]), (16, [r1, r3]), (32, [r3])]
    assert all(x.what == "successive halving" for x in t.rounds)
    assert m.runs == [(r1, 8), (r2, 8), (r3, 8), (r1, 16), (r3, 16), (r3, 32)]
    # the runner-up: second of the last ranking that had two (at 16: r1), not of the first (r2)
    assert w is t.rows[r3] and t.runner_up is t.rows[r1]
    assert t.rows[r4].reason == ("halved out after 4 requests (goodput 20.0 tok/s (0% in SLO), 21.0 tok/s, TTFT "
                                 "p99 100 ms, TPOT p50 0.0 ms)")
    assert t.rows[r5].reason.startswith("halved out after 4 requests (goodput 10.0 tok/s")
    assert t.rows[r2].reason.startswith("halved out after 8 requests (goodput 20.0 tok/s")
    assert t.rows[r1].reason.startswith("halved out after 16 requests (goodput 5.0 tok/s")
    assert t.stopped == "done" and t.notes == []


def test_halving_of_two_and_of_one():
    r1, r2 = FIVE[0].key, FIVE[1].key
    m = Planted({(r1, 8): 1.0, (r2, 8): 2.0})
    t = tune_of(FIVE[:2], measure=m)
    pool = pool_of(t, FIVE[:2], [9.0, 8.0])
    assert t._halve(pool, 4) is t.rows[r1]  # ⌈2/2⌉ = 1: r1 alone at 8, r2 halved out
    assert m.runs == [(r1, 8)] and t.runner_up is t.rows[r2]
    t1 = tune_of(FIVE[:1])
    only = pool_of(t1, FIVE[:1], [3.0])
    assert t1._halve(only, 4) is only[0] and t1.runner_up is None and t1.rounds == []
    assert tune_of(FIVE)._halve([], 4) is None


def test_halving_round_the_budget_cannot_hold_runs_its_best_only():
    # each row's run at 4: 3 s, 2 s of it requests: at 8, 2 × 8 ÷ 4 + (3 − 2) = 5 s; the two kept need 10 s
    r1, r2 = FIVE[0].key, FIVE[1].key
    scores = {(r1, 8): 9.0, (r2, 8): 8.0, (r1, 16): 7.0}
    m = Planted(scores, load_s=0.5)
    t = tune_of(FIVE[:4], measure=m, budget_s=10.0)
    pool = pool_of(t, FIVE[:4], [4.0, 3.0, 2.0, 1.0], seconds=3.0, load_s=2.0)
    assert [t.estimate(r, 8) for r in pool[:2]] == [5.0, 5.0]
    t._halve(pool, 4)
    assert t.rounds[0].candidates == [r1, r2] and t.stopped == "done"  # 10 s needed, 10 s left: both run
    m2 = Planted(scores, load_s=0.5)
    t2 = tune_of(FIVE[:4], measure=m2, budget_s=9.99)
    pool2 = pool_of(t2, FIVE[:4], [4.0, 3.0, 2.0, 1.0], seconds=3.0, load_s=2.0)
    w = t2._halve(pool2, 4)
    assert t2.rounds[0].candidates == [r1] and t2.stopped == "budget"
    assert t2.rows[r2].reason == "not run at 8 requests: the budget held that round for the best 1 only"
    assert t2.rows[FIVE[2].key].reason.startswith("halved out after 4 requests")
    assert w is t2.rows[r1] and t2.runner_up is t2.rows[r2] and m2.runs == [(r1, 8)]  # no round after a cut


def test_halving_round_cut_by_the_budget_leaves_the_last_complete_ranking():
    # the best alone needs 5 s at 8 requests, 4 s left: not run; the ranking at 4 stands
    t = tune_of(FIVE[:4], budget_s=4.0)
    pool = pool_of(t, FIVE[:4], [4.0, 3.0, 2.0, 1.0], seconds=3.0, load_s=2.0)
    w = t._halve(pool, 4)
    assert w is pool[0] and t.runner_up is pool[1]
    assert pool[0].reason == "not run at 8 requests: the budget: ≈ 5 s needed for 8 requests, 4 s left"
    assert t.lines[-1] == "the budget cut the round at 8 requests: the winner is the best of the last complete round"
    assert t.stopped == "budget"


def test_a_halving_round_whose_every_run_failed_leaves_the_round_before():
    t = tune_of(FIVE[:4], measure=Planted({}))  # every run crashes
    pool = pool_of(t, FIVE[:4], [4.0, 3.0, 2.0, 1.0])
    w = t._halve(pool, 4)
    assert w is pool[0] and t.runner_up is pool[1]
    assert t.notes == ["every run at 8 requests failed: the winner is the best of the round at 4 requests"]
    assert t.lines[-1] == t.notes[-1] and len(t.rounds) == 1
    assert pool[0].status == "crashed" and pool[0].reason == "at 8 requests: planted crash"


def test_a_later_halving_round_whose_every_run_failed_leaves_the_round_before():
    r1, r2, r3 = (c.key for c in FIVE[:3])
    m = Planted({(r1, 8): 3.0, (r2, 8): 1.0, (r3, 8): 2.0})  # 5 → 3 at 8 → r1, r3 at 16: both crash
    t = tune_of(FIVE, measure=m)
    pool = pool_of(t, FIVE, [5.0, 4.0, 3.0, 2.0, 1.0])
    w = t._halve(pool, 4)
    assert m.runs == [(r1, 8), (r2, 8), (r3, 8), (r1, 16), (r3, 16)]
    assert w is t.rows[r1] and t.runner_up is t.rows[r3]  # the ranking at 8 stands: r1 3, r3 2
    assert t.notes == ["every run at 16 requests failed: the winner is the best of the round at 8 requests"]


def test_a_halving_round_ranks_on_the_runs_that_measured():
    r1, r2, r3, r4 = (c.key for c in FIVE[:4])
    m = Planted({(r2, 8): 1.0, (r3, 16): 2.0})  # r1 crashes at 8: r2 goes on alone
    t = tune_of(FIVE[:4], measure=m)
    pool = pool_of(t, FIVE[:4], [4.0, 3.0, 2.0, 1.0])
    w = t._halve(pool, 4)
    assert w is t.rows[r2] and m.runs == [(r1, 8), (r2, 8)] and t.notes == [] and len(t.rounds) == 1
    # the last ranking that had two (at 4: r1, r2) has the winner second: no runner-up
    assert t.runner_up is None
    assert t.rows[r1].status == "crashed" and t.rows[r1].reason == "at 8 requests: planted crash"


def test_halving_stops_before_a_round_where_q_was_pressed():
    control = TuneControl()
    t = tune_of(FIVE[:3], carried=Carried(control=control))
    pool = pool_of(t, FIVE[:3], [4.0, 3.0, 2.0])
    control.stop()
    w = t._halve(pool, 4)
    assert w is pool[0] and t.runner_up is pool[1] and t.stopped == "stopped" and t.rounds == []
    assert t.lines == ["the tune was stopped (q) before the round at 8 requests: the winner is the best of the round "
                       "at 4 requests"]


def test_halving_round_cut_by_q_is_said_as_a_stop():
    control = TuneControl()
    r1, r2, r3 = (c.key for c in FIVE[:3])
    m = Planted({(r1, 8): 9.0, (r2, 8): 9.0}, on_run=lambda c, n: control.stop())
    t = tune_of(FIVE[:3], measure=m, carried=Carried(control=control))
    pool = pool_of(t, FIVE[:3], [4.0, 3.0, 2.0])
    w = t._halve(pool, 4)
    assert m.runs == [(r1, 8)] and w is pool[0] and t.stopped == "stopped"
    assert t.lines[-1] == ("the tune was stopped (q) in the round at 8 requests: the winner is the best of the last "
                           "complete round")


def test_no_halving_after_the_budget_cut_before():
    t = tune_of(FIVE[:3])
    pool = pool_of(t, FIVE[:3], [4.0, 3.0, 2.0])
    t.stopped = "budget"
    assert t._halve(pool, 4) is pool[0] and t.rounds == [] and t.runner_up is pool[1]


# --- the roofline checked -----------------------------------------------------------------------------------------

def checked(t, pairs):
    rows = []
    for c, (p, m) in zip(FIVE, pairs):
        r = t.rows[c.key]
        r.predicted = None if p is None else pred(p)
        if m is not None:
            measured(r, ok(4, m, tps=m))
        rows.append(r)
    return rows


def test_prediction_off_is_the_median_factor_either_way_over_two():
    t = tune_of(FIVE)
    # |ln(100/50)| = ln 2, |ln(40/10)| = ln 4, ln 1 = 0: median ln 2 → 2.0, not over 2: the pruning stands
    assert t.prediction_off(checked(t, [(100, 50), (40, 10), (30, 30)])) is None
    t = tune_of(FIVE)
    # ln 2 and ln 4: median 1.5 ln 2 → 2^1.5
    assert t.prediction_off(checked(t, [(100, 50), (40, 10)])) == pytest.approx(2 ** 1.5)
    t = tune_of(FIVE)
    assert t.prediction_off(checked(t, [(10, 30)])) == pytest.approx(3.0)  # predicted under: the same factor
    t = tune_of(FIVE)
    assert t.prediction_off(checked(t, [(100, 100 / 2.01)])) == pytest.approx(2.01)
    t = tune_of(FIVE)
    assert t.prediction_off(checked(t, [(100, 100 / 1.99)])) is None
    t = tune_of(FIVE)
    # a prediction of 1 tok/s is read too: ratios 0 and ln 4, median ln 2 → 2.0 (without it: 4.0)
    assert t.prediction_off(checked(t, [(1, 1), (40, 10)])) is None


def test_prediction_off_reads_only_rows_with_both_figures():
    t = tune_of(FIVE)
    # no prediction, a prediction of 0, nothing measured, a run of 0 tok/s: none is read; the one left: 4×
    rows = checked(t, [(None, 10), (0, 10), (10, None), (10, 0), (40, 10)])
    assert t.prediction_off(rows) == pytest.approx(4.0)
    t = tune_of(FIVE)
    assert t.prediction_off(checked(t, [(None, 10), (0, 10), (10, None)])) is None
    assert t.prediction_off([]) is None


# --- the front -----------------------------------------------------------------------------------------------------

NINE = SP.candidates(["llama"], cores=4, users=4)


def front_tune(runs):
    """A tune whose rows have these runs: [(candidate index, [trials])]."""
    t = tune_of(NINE)
    for i, trials in runs:
        t.rows[NINE[i].key].trials += trials
        t.rows[NINE[i].key].status = "measured" if any(x.ok for x in trials) else "crashed"
    return t


def test_front_n_is_the_longest_run_every_measured_candidate_has():
    t = front_tune([(0, [ok(4, 1), ok(8, 1), ok(16, 1)]), (1, [ok(4, 1), ok(8, 1)]), (2, [ok(4, 1), failed(8)]),
                    (3, [failed(4)])])
    assert t.front_n() == 4  # {4, 8, 16} ∩ {4, 8} ∩ {4}; the crashed one has no say
    t = front_tune([(0, [ok(4, 1), ok(8, 1), ok(16, 1)]), (1, [ok(4, 1), ok(8, 1)])])
    assert t.front_n() == 8
    t = front_tune([(0, [ok(8, 1), ok(16, 1)]), (1, [ok(4, 1)]), (2, [ok(32, 1)])])
    assert t.front_n() == 4  # nothing in common: the shortest of the shortest runs
    assert front_tune([(3, [failed(4)])]).front_n() is None and tune_of(NINE).front_n() is None


def test_front_runs_take_each_candidates_run_at_front_n_else_its_shortest():
    a16, a8 = ok(16, 1), ok(8, 2)
    t = front_tune([(0, [a8, a16]), (1, [ok(4, 3), ok(8, 4)]), (2, [failed(8)])])
    assert t.front_n() == 8
    assert t.front_runs() == {NINE[0].key: a8, NINE[1].key: t.rows[NINE[1].key].trials[1]}
    b4 = ok(4, 5)
    t = front_tune([(0, [a16, a8]), (1, [b4])])  # front_n 4: the first has none there: its shortest, 8
    assert t.front_runs() == {NINE[0].key: a8, NINE[1].key: b4}


def test_front_is_every_run_no_other_dominates_on_goodput_and_ttft():
    t = front_tune([(0, [ok(4, 100.0, p99=200.0)]), (1, [ok(4, 90.0, p99=150.0)]), (2, [ok(4, 80.0, p99=160.0)]),
                    (3, [ok(4, 100.0, p99=200.0)]), (4, [ok(4, 100.0, p99=250.0)]),
                    (5, [Trial(requests=4, status="ok", goodput_tps=None, p99_ttft_ms=10.0)]),
                    (6, [Trial(requests=4, status="ok", goodput_tps=95.0, p99_ttft_ms=None)]),
                    (7, [Trial(requests=4, status="ok", goodput_tps=0.5, p99_ttft_ms=10.0)])])
    # 2 (80, 160) is dominated by 1 (90, 150); 4 (100, 250) by 0; 0 and 3 are equal: neither dominates the other;
    # 5: no goodput (0) at 10 ms, under 7's 0.5 at 10 ms; 6: no p99 (∞) under 0's 100 at 200
    # sorted by (−goodput, p99): 0, 3 (−100, 200), 1 (−90, 150), 7 (−0.5, 10)
    assert keys(t.front()) == [NINE[0].key, NINE[3].key, NINE[1].key, NINE[7].key]


def test_front_takes_cost_as_a_third_figure_where_every_run_has_it():
    usd = front_tune([(0, [ok(4, 100.0, p99=200.0, usd_per_mtok=2.0, joules_per_token=1.0)]),
                      (1, [ok(4, 100.0, p99=200.0, usd_per_mtok=1.0, joules_per_token=3.0)])])
    assert keys(usd.front()) == [NINE[1].key]  # the same goodput and TTFT, cheaper: the other is dominated
    joules = front_tune([(0, [ok(4, 100.0, p99=200.0, usd_per_mtok=2.0, joules_per_token=1.0)]),
                         (1, [ok(4, 100.0, p99=200.0, joules_per_token=3.0)])])
    assert keys(joules.front()) == [NINE[0].key]  # $/Mtok not on every run: J/token
    none = front_tune([(0, [ok(4, 100.0, p99=200.0, usd_per_mtok=2.0)]),
                       (1, [ok(4, 100.0, p99=200.0, joules_per_token=3.0)])])
    assert keys(none.front()) == [NINE[0].key, NINE[1].key]  # neither on every run: two figures, equal
    # a third figure trades off: both stay, the cheaper second (sorted by the vector: −100, 200, then cost)
    trade = front_tune([(0, [ok(4, 100.0, p99=150.0, usd_per_mtok=3.0)]),
                        (1, [ok(4, 100.0, p99=200.0, usd_per_mtok=1.0)])])
    assert keys(trade.front()) == [NINE[0].key, NINE[1].key]
    free = front_tune([(0, [ok(4, 100.0, p99=200.0, usd_per_mtok=0.5)]),
                       (1, [ok(4, 100.0, p99=200.0, usd_per_mtok=0.0)])])
    assert keys(free.front()) == [NINE[1].key]  # $0 is a figure, the least
    assert tune_of(NINE).front() == []


def test_front_sets_runs_of_one_length_only():
    # 0 at 8 is worse than 1 at 8, though 0's run at 16 is better than 1's at 8: the 16 is not compared
    t = front_tune([(0, [ok(8, 50.0, p99=300.0), ok(16, 200.0, p99=100.0)]), (1, [ok(8, 100.0, p99=200.0)])])
    assert keys(t.front()) == [NINE[1].key]


# --- the answer ----------------------------------------------------------------------------------------------------

def test_result_records_the_winner_front_and_what_was_not_tried():
    clock = [5.0]  # the tune starts at 5 s on its clock
    t = Tune(settings(), CANDS, Planted({}), say=lambda m: None, clock=lambda: clock[0],
             carried=Carried(spent_s=100.0, skipped_engines={"vllm": "vllm is not installed here"}))
    r = t.rows
    measured(r[D.key], ok(4, 50.0, p99=100.0), ok(8, 60.0, p99=120.0))
    measured(r[A.key], ok(4, 40.0, p99=90.0))
    r[B.key].status, r[B.key].reason = "pruned", "predicted 1.0 tok/s"
    r[C.key].status, r[C.key].reason = "not tried", "the budget: ≈ 9 s needed"
    t.winner = r[D.key]
    t.notes.append("a note")
    t.rounds.append(Round(requests=4, what="shapes", candidates=[D.key, A.key]))
    t.final = final = object()  # type: ignore[assignment]  # (the last step's record, carried as it is)
    t.within_noise = [D.key, A.key]
    clock[0] = 17.34
    res = t.result("m.gguf", 512, machine="chip")
    assert res.winner is not None and res.winner.key == D.key and res.winner.trial.requests == 8
    assert res.winner.candidate == D and res.winner.trial is r[D.key].trials[1]
    assert res.winner.serve_command == ("inference-top --engine llama --model m.gguf --k 1 --b 2 --max-b 2 "
                                        "--threads 2 --ctx 512")
    assert res.winner.bench_command == ("inference-top bench --engine llama --model m.gguf --k 1 --b 2 --max-b 2 "
                                        "--threads 2 --ctx 512 --users 2 --requests 8 --max-tokens 8 --workload "
                                        "synthetic:8 --seed 0 --slo ttft=300ms,tpot=12ms")
    assert res.front == [D.key, A.key] and res.front_requests == 4  # at 4: D (50, 100), A (40, 90)
    assert res.not_tried == {B.key: "predicted 1.0 tok/s", C.key: "the budget: ≈ 9 s needed"}
    assert res.elapsed_s == 112.3 and res.this_session_s == 12.3  # 17.34 − 5 = 12.34 + 100 before; 12.34 now
    assert res.stopped == "done" and res.notes == ["a note"] and res.machine == "chip" and res.model == "m.gguf"
    assert [c.key for c in res.candidates] == keys_of(CANDS) and res.skipped_engines == {"vllm": "vllm is not installed here"}
    assert res.settings.users == 2 and res.final_compare is final and res.within_noise == [D.key, A.key]
    assert res.rounds == t.rounds and res.rounds is not t.rounds
    r[C.key].status = "pending"  # pending counts as not tried; refused and measured do not
    r[B.key].status = "refused"
    assert t.result("m.gguf", 512).not_tried == {C.key: "the budget: ≈ 9 s needed"}


def test_result_serves_the_winner_with_its_engines_model_and_server():
    s = Candidate("llama-server", "servers", 2, 2, 1)
    t = tune_of([s], carried=Carried(serving={"llama-server": Serving("other.gguf"), "llama": Serving("x")}))
    t.winner = measured(t.rows[s.key], ok(4, 5.0))
    cmd = t.result("m.gguf", 100, server_bin="/opt/bin/llama-server").winner.serve_command
    flags = "-np 2 -c 200 -t 1 -fa on -ctk f16 -ctv f16 -ub 512"
    assert cmd == (f"/opt/bin/llama-server -m other.gguf --host 127.0.0.1 --port 8080 {flags} & "
                   f"/opt/bin/llama-server -m other.gguf --host 127.0.0.1 --port 8081 {flags}")


def test_result_names_no_winner_without_a_measured_run():
    t = tune_of(CANDS)
    t.winner = t.rows[A.key]
    t.rows[A.key].trials.append(failed(4))
    res = t.result("m.gguf", 512)
    assert res.winner is None and res.front == [] and res.front_requests is None
    assert tune_of(CANDS).result("m.gguf", 512).winner is None


def test_search_module_constants():
    assert SE.OFF_BY == 2.0 and SE.START_S == 8.0 and SP.PRUNE == 0.5 and SP.FIRST_ROUND == 8
    assert math.isclose(SP.KV_BYTES["q8_0"], 1.0625) and math.isclose(SP.KV_BYTES["q4_0"], 0.5625)
    assert Row(A).status == "pending"

"""The public traces and datasets as users download them (issue 33, parts 1–2): mooncake:, bailian:, burstgpt:,
azure: and sharegpt: over fixtures shaped like each file's first rows (tests/data/traces/), their bad files,
streaming, shared prefixes as text, Bailian sessions, and the replayed arrival times against the null server."""
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from measure.core import traces
from measure.core.arrivals import parse_arrivals
from measure.core.datasets import DatasetError
from measure.machine.workloads import load_sharegpt
from measure.machine.workloads import resolve
from measure.machine.recorder import read_jsonl
from measure.core.arrivals import TraceSessions
from measure.core.traces import TraceDataset
from measure.core.datasets import request_for
from measure.core.workload import Load, PrefixCache, RequestMaker

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
CLI = [sys.executable, "-m", "tui.cli"]
NS = 1_000_000_000
KW = dict(rep=0, k=1, b=1, mode="http")


def rows(name):
    return [json.loads(ln) for ln in (DATA / name).read_text().splitlines() if ln.strip()]


def run(args, timeout=300):
    return subprocess.run(CLI + args, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


# ---- mooncake --------------------------------------------------------------------------------------------------


def test_mooncake_times_are_milliseconds_and_lengths_are_the_files():
    file = rows("mooncake_trace.jsonl")
    wl = resolve(f"mooncake:{DATA / 'mooncake_trace.jsonl'}")
    assert isinstance(wl, TraceDataset) and len(wl.times_s) == 10
    assert list(wl.times_s) == [r["timestamp"] / 1000 for r in file]  # 12000 ms is 12 s, not 12000 s
    assert wl.times_s[-1] == 12.0
    spec = parse_arrivals(None, None, speed=2.0, trace_times=wl.times_s)
    assert spec.describe() == "trace replay, 10 requests over 12 s at ×2 speed"
    for i, r in enumerate(file):
        p, n = request_for(wl, i, 64)
        assert len(p.text.split()) == r["input_length"] and n == r["output_length"]
        assert p.prompt_id == f"mooncake_trace-{i + 1}"
    assert wl.info["trace_format"] == "mooncake" and wl.info["trace_block_tokens"] == 512
    assert "trace_hash_mismatch_rows" not in wl.info  # every row's ids cover its length in 512-token blocks
    assert request_for(wl, 0, 64)[1] == 500 and resolve(f"mooncake:{DATA / 'mooncake_trace.jsonl'}",
                                                        max_tokens=64).output_at(0, 16) == 64  # --max-tokens caps


def shared_words(a, b):
    n = 0
    for x, y in zip(a.split(), b.split()):
        if x != y:
            break
        n += 1
    return n


def test_mooncake_hash_ids_become_shared_prompt_text():
    """Rows 1–3 share blocks 0–6 (7 × 512 tokens), then differ; row 10 repeats row 1; row 9 is block 0 alone."""
    wl = resolve(f"mooncake:{DATA / 'mooncake_trace.jsonl'}")
    p = [request_for(wl, i, 64)[0].text for i in range(10)]
    assert shared_words(p[0], p[1]) == shared_words(p[0], p[2]) == 7 * 512
    assert shared_words(p[1], p[2]) == 7 * 512  # blocks 14… and 22… differ at once
    assert p[9] == p[0]  # the same ids: the same tokens
    assert p[0].startswith(p[8]) and len(p[8].split()) == 512
    assert shared_words(p[0], p[3]) < 5  # block 30 is another block: no shared prefix (chance words only)
    assert shared_words(p[4], p[5]) == 10 * 512
    # the same block id is the same words whatever trace or row brings it
    assert traces.block_words(512, 3) == tuple(p[0].split()[3 * 512:4 * 512])


def test_prefix_cache_off_still_defeats_the_shared_blocks():
    wl = resolve(f"mooncake:{DATA / 'mooncake_trace.jsonl'}")
    a, b = request_for(wl, 0, 64)[0].text, request_for(wl, 9, 64)[0].text
    off, on = PrefixCache.parse("off"), PrefixCache.parse("on")
    assert on.apply(a, "run", 1) == (a, "") and on.apply(b, "run", 10)[0] == a  # on: the server sees the reuse
    sa, sb = off.apply(a, "run", 1)[0], off.apply(b, "run", 10)[0]
    assert sa != sb and shared_words(sa, sb) == 1 and not off.cache_prompt  # off: unique from the 2nd word on


def test_trace_prompts_tokenize_to_their_lengths_with_the_embedded_tokenizer():
    """Each vocabulary word is one token (with its space), so a prompt of N words is N tokens (± the first)."""
    from engines.embedded import embedded_model_path
    from engines.tokenizer import GGUFTokenizer

    tok = GGUFTokenizer(embedded_model_path(lambda m: None))
    wl = resolve(f"mooncake:{DATA / 'mooncake_trace.jsonl'}")
    for i, r in enumerate(rows("mooncake_trace.jsonl")[:4]):
        n = len(tok.text_ids(request_for(wl, i, 64)[0].text))
        assert abs(n - r["input_length"]) <= 2, (i, n, r["input_length"])


def test_mooncake_runs_with_the_prefix_cache_on_by_default_and_off_when_asked():
    from measure.control.builder import make_plan
    from tui.options import plan_options
    from tui.options import build_parser

    base = ["--engine", "http", "--url", "http://127.0.0.1:9/v1", "--tokenizer", "none",
            "--workload", f"mooncake:{DATA / 'mooncake_trace.jsonl'}"]
    _, bench = build_parser()
    plan = make_plan(plan_options(bench.parse_args(base)), default_max_tokens=16)
    assert plan.prefix_cache.policy == "on"
    plan = make_plan(plan_options(bench.parse_args(base + ["--prefix-cache", "off"])), default_max_tokens=16)
    assert plan.prefix_cache.policy == "off"


# ---- bailian ---------------------------------------------------------------------------------------------------


def test_bailian_sessions_counts_and_shared_history():
    wl = resolve(f"bailian:{DATA / 'qwen_traceA_blksz_16.jsonl'}")
    file = [r for r in rows("qwen_traceA_blksz_16.jsonl") if r["output_length"]]  # chat 4: 0 tokens, dropped
    assert len(wl.times_s) == 6 and list(wl.times_s) == [r["timestamp"] for r in file]
    assert wl.info["trace_sessions"] == 3 and wl.info["trace_orphans"] == 1  # chats 0, 1; chat 3's parent is absent
    assert "0 tokens dropped" in wl.description
    assert list(traces.after_of(wl)) == [-1, -1, 0, -1, 1, 2]
    p = [request_for(wl, i, 64)[0].text for i in range(6)]
    assert [len(x.split()) for x in p] == [r["input_length"] for r in file]
    assert shared_words(p[0], p[2]) == 32 * 16  # the follow-up carries its parent's first 32 blocks
    assert shared_words(p[2], p[5]) == 43 * 16 and shared_words(p[0], p[1]) == 2 * 16


class _Clock:
    def __init__(self):
        self.now = 0


def test_bailian_follow_up_waits_for_its_parents_answer_then_keeps_its_own_time():
    wl = resolve(f"bailian:{DATA / 'qwen_traceA_blksz_16.jsonl'}")
    spec = parse_arrivals(None, None, trace_times=wl.times_s, trace_after=traces.after_of(wl))
    arr = spec.make(6)
    assert isinstance(arr, TraceSessions)
    maker = RequestMaker(clock=lambda: 0)
    maker.set_load(Load(wl, arr, 64))
    sent = {}

    def step(t_s):
        for r in maker.due(round(t_s * NS), 0, **KW):
            sent[r.request_id] = r
        return sorted(r.request_id for r in sent.values() if r.t_scheduled_ns <= round(t_s * NS))

    assert step(0.0) == [1]
    assert step(0.06) == [1, 2]  # row 3 (chat 2, t = 0.05) waits: its parent (chat 0) is still answering
    maker.finished(sent[1], "an answer", round(0.3 * NS))  # chat 0's answer ends at 0.3 s
    assert step(0.3) == [1, 2, 3] and sent[3].t_scheduled_ns == round(0.3 * NS)  # then at once: after it
    assert (sent[3].session, sent[3].turn) == (1, 2) and sent[3].session_key is None  # no session prefix
    maker.finished(sent[2], "b", round(0.1 * NS))  # chat 1 ends long before its follow-up's own time (3.5 s)
    assert step(1.0) == [1, 2, 3, 4] and sent[4].turn == 3  # the orphan (chat 3) goes at its own 0.512 s
    assert step(3.4) == [1, 2, 3, 4]
    assert step(3.5) == [1, 2, 3, 4, 5] and sent[5].t_scheduled_ns == round(3.5 * NS)  # at its own time
    assert step(10.0) == [1, 2, 3, 4, 5]  # chat 6 waits for chat 2
    maker.finished(sent[3], "c", round(11 * NS))
    assert step(11.0) == [1, 2, 3, 4, 5, 6] and arr.exhausted()


def test_bailian_needs_a_server():
    p = run(["bench", "--workload", f"bailian:{DATA / 'qwen_traceA_blksz_16.jsonl'}"])
    assert p.returncode != 0 and "--engine http" in p.stderr
    assert len([ln for ln in p.stderr.splitlines() if ln.strip()]) == 1


# ---- burstgpt, azure ---------------------------------------------------------------------------------------------


def test_burstgpt_drops_failures_counts_them_and_filters_models():
    wl = resolve(f"burstgpt:{DATA / 'BurstGPT_1.csv'}")
    assert len(wl.times_s) == 6 and list(wl.times_s) == [0, 40, 113, 129, 155, 195]  # from the first row (5 s)
    assert [request_for(wl, i, 9)[0].synthetic_tokens for i in range(6)] == [472, 1087, 417, 82, 24, 640]
    assert [request_for(wl, i, 9)[1] for i in range(6)] == [18, 230, 276, 104, 412, 75]
    assert wl.info["trace_zero_token_rows"] == 2 and "2 rows of 0 tokens dropped" in wl.description
    gpt4 = resolve(f"burstgpt:{DATA / 'BurstGPT_1.csv'}", model_filter="GPT-4")
    assert list(gpt4.times_s) == [0, 42] and gpt4.info["trace_filtered_rows"] == 5
    assert gpt4.info["trace_zero_token_rows"] == 1
    with pytest.raises(DatasetError, match="no row of Model 'Claude'"):
        resolve(f"burstgpt:{DATA / 'BurstGPT_1.csv'}", model_filter="Claude")
    with pytest.raises(DatasetError, match="does not apply"):
        resolve(f"azure:{DATA / 'AzureLLMInferenceTrace_conv.csv'}", model_filter="GPT-4")


def test_burstgpt_with_session_id_and_elapsed_time_columns():
    wl = resolve(f"burstgpt:{DATA / 'BurstGPT_3.csv'}")
    assert list(wl.times_s) == [0, 2, 9] and wl.info["trace_zero_token_rows"] == 1
    assert [request_for(wl, i, 9) [1] for i in range(3)] == [86, 144, 301]


def test_azure_2023_seven_digit_fractions_and_2024_offsets():
    a = resolve(f"azure:{DATA / 'AzureLLMInferenceTrace_conv.csv'}")
    assert a.info["trace_format"] == "azure 2023 (naive times)" and a.info["trace_zero_token_rows"] == 1
    assert [round(t, 6) for t in a.times_s] == [0, 4.314579, 4.80119, 9.055882, 14.51941]
    assert [request_for(a, i, 9)[0].synthetic_tokens for i in range(5)] == [374, 396, 879, 91, 2048]
    b = resolve(f"azure:{DATA / 'AzureLLMInferenceTrace_code_1week.csv'}")
    assert b.info["trace_format"] == "azure 2024 (UTC offsets)"
    assert [round(t, 6) for t in b.times_s] == [0, 0.00482, 0.41042, 0.99207, 3.49007]
    assert [request_for(b, i, 9)[1] for i in range(5)] == [5, 7, 3, 29, 12]


def _replay_peak(path, n):
    """Peak traced memory while loading an n-row Azure file and reading its whole schedule and a prompt every
    7th row, as a replay reads them (in time order)."""
    with path.open("w") as out:
        out.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for i in range(n):  # row i at i ÷ 10 s
            out.write(f"2024-05-10 {i // 36000:02d}:{i // 600 % 60:02d}:{i // 10 % 60:02d}.{i % 10}00000+00:00,"
                      f"{100 + i % 900},{1 + i % 50}\n")
    tracemalloc.start()
    try:
        wl = resolve(f"azure:{path}")
        sched = parse_arrivals(None, None, trace_times=wl.times_s).make(n)
        count, last = 0, None
        for step in range(0, n // 10 + 101, 100):
            due = sched.due(step * NS, 0)
            count, last = count + len(due), due[-1] if due else last
        assert count == n and last == round((n - 1) / 10 * NS)
        assert sum(request_for(wl, i, 9)[1] for i in range(0, n, 7)) > 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_large_azure_file_is_streamed(tmp_path):
    """The table keeps a byte offset every CHUNK rows and its CHUNKS_KEPT last chunks, not the rows: 4 × the rows
    costs no more memory (kept rows would cost ≈ 130 B each: 4.3 MB more for 32 768 more)."""
    _replay_peak(tmp_path / "warm.csv", 100)  # imports and caches out of the way
    small, large = _replay_peak(tmp_path / "small.csv", 16_384), _replay_peak(tmp_path / "large.csv", 49_152)
    assert large - small < 1e6, (small, large)


# ---- sharegpt as downloaded -------------------------------------------------------------------------------------


def test_sharegpt_as_downloaded():
    """Ours: the first human turn (a system first turn skipped, an empty value skipped, two human turns in a
    row one message), the reply after it as the length; a conversation without a human turn, or with one and no
    reply, skipped and counted (as vLLM and GuideLLM drop it); with --output-len the reply is not needed."""
    name = str(DATA / "ShareGPT_V3_unfiltered_cleaned_split.json")
    _, _, items, skipped = load_sharegpt(name, lambda s: len(s.split()), later_turns=True)
    by = {it.prompt_id: it for it in items}
    assert skipped == 3 and sorted(by) == sorted(["QWJhYvA_0", "sys_first_0", "empty_value_0", "two_humans_0"])
    assert by["sys_first_0"].text == "What is the capital of France?" and by["sys_first_0"].output_tokens == 1
    _, _, items, skipped = load_sharegpt(name, None)  # --output-len: lengths drawn, the one-turn entry kept
    assert skipped == 2 and "one_turn_0" in {it.prompt_id for it in items}
    assert "3 conversations without a human turn and a reply skipped" in resolve(
        f"sharegpt:{name}", count_tokens=lambda s: len(s.split())).description
    assert by["empty_value_0"].text == "Write a haiku about rain."
    assert by["two_humans_0"].text == "Translate to German:\ngood morning"
    assert by["QWJhYvA_0"].more == (("And Ophelia?", 7),)


# ---- bad files ---------------------------------------------------------------------------------------------------

GOOD_MOONCAKE = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'
BAD = [
    ("burstgpt", "b.csv", "Timestamp,Model,Prompt tokens,Response tokens\n1,ChatGPT,3,4\n", 1,
     "lacks the column 'request tokens'"),
    ("azure", "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,-374,44\n", 2,
     "ContextTokens '-374' must be a whole number of tokens"),
    ("burstgpt", "b.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
     "5,ChatGPT,4,5,9,Conversation log\n3,ChatGPT,4,5,9,Conversation log\n", 3, "rows must be sorted by time"),
    ("azure", "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.009930+00:00,2162,5\n"
     "2024-05-10 00:00:00.0147", 3, "1 fields where the header has 3 (a truncated line?)"),
    ("mooncake", "m.jsonl", GOOD_MOONCAKE + '{"timestamp": 5, "input_length": 600, "outp', 2,
     "not JSON"),
    ("mooncake", "m.jsonl", GOOD_MOONCAKE + '{"timestamp": 5, "input_length": -1, "output_length": 5, '
     '"hash_ids": [0]}\n', 2, "input_length -1 must be a whole number"),
    ("bailian", "q.jsonl", '{"chat_id": 0, "timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": []}\n',
     1, "no 'parent_chat_id'"),
    ("azure", "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
     "2024-05-10 00:00:00.009930+00:00,2162,5\n", 3, "has a UTC offset where the first row's time does not"),
    ("azure", "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,374,44\n", 2, "is not a time like"),
]


@pytest.mark.parametrize("kind,fname,text,line,says", BAD)
def test_bad_files_name_the_file_the_line_and_what_was_expected(tmp_path, kind, fname, text, line, says):
    f = tmp_path / fname
    f.write_text(text)
    with pytest.raises(DatasetError) as e:
        resolve(f"{kind}:{f}")
    msg = str(e.value)
    assert f"--workload {kind}:{f} line {line}: " in msg and says in msg and "; expected: " in msg and "\n" not in msg


def test_a_trace_format_is_one_declared_class():
    """Issue 48: the table holds the four formats as declared, and no line of measure/, tui/ or benchmarks/
    outside a format's own class names its kind (a new format is one class and its tests)."""
    import inspect
    import re

    t = traces.TRACE_FORMATS
    assert list(t) == ["mooncake", "bailian", "burstgpt", "azure"]
    assert [(f.units_per_s, f.block, f.sessions, f.model_column, f.ext) for f in t.values()] == [
        (1000.0, 512, False, False, "jsonl"), (1.0, 16, True, False, "jsonl"), (1.0, 0, False, True, "csv"),
        (1.0, 0, False, False, "csv")]
    root = Path(__file__).resolve().parents[2]
    for kind, fmt in t.items():
        src, first = inspect.getsourcelines(type(fmt))
        own = (Path(inspect.getsourcefile(type(fmt))), range(first - 1, first + len(src)))  # with its decorator
        word = re.compile(rf"\b{kind}\b", re.I)
        named = [f"{p.relative_to(root)}:{n}" for d in ("measure", "tui", "benchmarks")
                 for p in sorted((root / d).rglob("*.py"))
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if word.search(line) and not (p == own[0] and n in own[1])]
        assert named == [], f"{kind} is named outside its class: {named}"


def test_a_byte_order_mark_is_not_a_bad_first_line(tmp_path):
    """Files saved by Windows tools start with a UTF-8 BOM: the first JSON line and the CSV header read as usual."""
    m, a = tmp_path / "m.jsonl", tmp_path / "a.csv"
    m.write_text("\ufeff" + GOOD_MOONCAKE, encoding="utf-8")
    a.write_text("\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n", encoding="utf-8")
    assert len(resolve(f"mooncake:{m}").times_s) == 1 and len(resolve(f"azure:{a}").times_s) == 1


def test_a_bad_file_exits_non_zero_with_one_line(tmp_path):
    f = tmp_path / "b.csv"
    f.write_text(BAD[2][2])
    p = run(["bench", "--engine", "http", "--url", "http://127.0.0.1:9/v1", "--workload", f"burstgpt:{f}"])
    assert p.returncode != 0 and f"burstgpt:{f} line 3" in p.stderr
    assert len([ln for ln in p.stderr.splitlines() if ln.strip()]) == 1


# ---- against the null server: the realised arrival times -------------------------------------------------------


@pytest.fixture(scope="module")
def null_server():
    from engines.null_server import Behaviour, NullServer

    with NullServer(Behaviour(ttft_ms=5, itl_ms=2)) as srv:
        yield srv.url


@pytest.mark.parametrize("kind,fname,speed", [("mooncake", "mooncake_trace.jsonl", 4),
                                              ("burstgpt", "BurstGPT_1.csv", 100),
                                              ("azure", "AzureLLMInferenceTrace_conv.csv", 4)])
def test_replayed_arrivals_match_the_files_times_within_1pct(null_server, tmp_path, kind, fname, speed):
    out = tmp_path / "out"
    p = run(["bench", "--engine", "http", "--url", null_server, "--tokenizer", "none", "--b", "8",
             "--workload", f"{kind}:{DATA / fname}", "--speed", str(speed), "--max-tokens", "8", "--out", str(out)])
    assert p.returncode == 0, p.stderr
    header, records, _ = read_jsonl(out / "records.jsonl")
    wl = resolve(f"{kind}:{DATA / fname}")
    want = [t / speed for t in wl.times_s]
    records.sort(key=lambda r: r.request_id)
    assert len(records) == len(want) and all(r.error is None for r in records)
    got = [(r.t_submitted_ns - records[0].t_submitted_ns) / NS for r in records]
    span = want[-1]
    assert all(abs(g - w) <= 0.01 * span for g, w in zip(got, want)), (got, want)
    assert abs(got[-1] - span) <= 0.01 * span
    assert header[0].line["workload_items"] == len(want) and header[0].line["trace_format"].startswith(kind)


def test_bailian_replay_sends_each_follow_up_after_its_parents_answer(null_server, tmp_path):
    out = tmp_path / "out"
    p = run(["bench", "--engine", "http", "--url", null_server, "--tokenizer", "none", "--b", "4", "--workload",
             f"bailian:{DATA / 'qwen_traceA_blksz_16.jsonl'}", "--speed", "2", "--max-tokens", "30", "--out",
             str(out)])
    assert p.returncode == 0, p.stderr
    header, records, _ = read_jsonl(out / "records.jsonl")
    assert header[0].line["prefix_cache"].startswith("on") and header[0].line["trace_sessions"] == 3
    by = {r.prompt_id: r for r in records}
    assert len(by) == 6 and all(r.error is None for r in records)
    t0 = min(r.t_scheduled_ns for r in records)
    file = {f"qwen_traceA_blksz_16-{i + 1}": r for i, r in enumerate(rows("qwen_traceA_blksz_16.jsonl"))}
    for child, parent in (("qwen_traceA_blksz_16-3", "qwen_traceA_blksz_16-1"),
                          ("qwen_traceA_blksz_16-6", "qwen_traceA_blksz_16-2"),
                          ("qwen_traceA_blksz_16-7", "qwen_traceA_blksz_16-3")):
        own = t0 + round(file[child]["timestamp"] / 2 * NS)
        assert by[child].t_scheduled_ns == max(own, by[parent].t_done_ns)
    # row 3 came 0.025 s after row 1 (at ×2), before its 30-token answer ended: it waited for that end
    assert by["qwen_traceA_blksz_16-3"].t_scheduled_ns == by["qwen_traceA_blksz_16-1"].t_done_ns

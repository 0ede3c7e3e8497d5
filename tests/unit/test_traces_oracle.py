"""core/traces.py by hand: each published format's rows read from text written here (benchmarks/mutation.py runs
these against the module's mutants). Every expected time, count, offset and message is worked out by hand in a
comment beside it; files are bytes in memory, read from a byte offset as machine/workloads.trace_file reads one."""
from __future__ import annotations

import hashlib
import io
import random
from array import array
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.base import Prompt
from measure.core import traces as T
from measure.core.datasets import DatasetError, LengthDist
from presets import Workload

# each format's `what`, as written in its class (the tail of every error line)
MOONCAKE_WHAT = ('Mooncake JSONL, one {"timestamp": ms, "input_length": N, "output_length": M, "hash_ids": [...]} '
                 'per line')
BAILIAN_WHAT = ('Bailian JSONL, one {"chat_id", "parent_chat_id", "timestamp": s, "input_length", "output_length", '
                '"type", "turn", "hash_ids"} per line')
BURST_WHAT = "BurstGPT CSV with the header Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
AZURE_WHAT = "Azure LLM inference trace CSV with the header TIMESTAMP,ContextTokens,GeneratedTokens"
WHAT = {"mooncake": MOONCAKE_WHAT, "bailian": BAILIAN_WHAT, "burstgpt": BURST_WHAT, "azure": AZURE_WHAT}
BURST_HEAD = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
EPOCH = 719163 * 86400  # date(1970, 1, 1).toordinal() is 719163 (0001-01-01 is 1): 62 135 683 200 s


class Source:
    """A trace file in memory: its bytes handed out line by line from a byte offset; it keeps the offsets asked
    for and counts the lines handed out."""

    def __init__(self, text: str | bytes, name: str):
        self.data = text.encode() if isinstance(text, str) else text
        self.starts: list[int] = []
        self.handed = 0
        self.file = T.TraceFile(Path(name), "/abs/" + name, self.lines_from)

    def lines_from(self, start: int) -> Iterator[bytes]:
        self.starts.append(start)
        for raw in io.BytesIO(self.data[start:]):
            self.handed += 1
            yield raw


def table(kind: str, text: str | bytes, model_filter: str | None = None, name: str = "t.x"
          ) -> tuple[T.TraceTable, Source]:
    src = Source(text, name)
    return T.TraceTable(T.TRACE_FORMATS[kind], name, src.file, model_filter), src


def loaded(kind: str, text: str, name: str, model_filter: str | None = None, output_len: LengthDist | None = None,
           max_tokens: int | None = None, seed: int = 0, output_spec: str | None = None) -> T.TraceDataset:
    return T.load(kind, name, Source(text, name).file, output_len=output_len, max_tokens=max_tokens,
                  model_filter=model_filter, seed=seed, output_spec=output_spec)


def fails(kind: str, text: str | bytes, name: str = "t.x", model_filter: str | None = None) -> str:
    with pytest.raises(DatasetError) as e:
        table(kind, text, model_filter, name)
    return str(e.value)


def mc(t: float, n_in: int, n_out: int, ids: str = "[]") -> str:
    """A Mooncake row (t in ms)."""
    return f'{{"timestamp": {t}, "input_length": {n_in}, "output_length": {n_out}, "hash_ids": {ids}}}\n'


def bl(chat: object, parent: object, t: float, n_in: int, n_out: int, ids: str, turn: object = None) -> str:
    """A Bailian row (t in s; no "turn" key where turn is None)."""
    tk = "" if turn is None else f', "turn": {turn}'
    return (f'{{"chat_id": {chat}, "parent_chat_id": {parent}, "timestamp": {t}, "input_length": {n_in}, '
            f'"output_length": {n_out}, "type": "text"{tk}, "hash_ids": {ids}}}\n')


def reader(kind: str = "mooncake", model_filter: str | None = None) -> T.RowReader:
    return T.RowReader(T.TRACE_FORMATS[kind], "m.jsonl", model_filter)


def bad(line: int, why: str, kind: str = "mooncake", name: str = "m.jsonl") -> str:
    return f"--workload {kind}:{name} line {line}: {why}; expected: {WHAT[kind]}"


def words(block: int, h: int) -> list[str]:
    """The design's words of block id h (docs/design/traces.md): `block` draws from VOCAB seeded by (block, h)."""
    return random.Random(f"block:{block}:{h}").choices(T.VOCAB, k=block)


# ---- the formats declared -----------------------------------------------------------------------------------------


def test_the_formats_declared_in_order() -> None:
    assert list(T.TRACE_FORMATS) == ["mooncake", "bailian", "burstgpt", "azure"]
    assert [f.name for f in T.TRACE_FORMATS.values()] == ["mooncake", "bailian", "burstgpt", "azure"]
    assert [f.ext for f in T.TRACE_FORMATS.values()] == ["jsonl", "jsonl", "csv", "csv"]
    assert [f.variant(reader()) for f in list(T.TRACE_FORMATS.values())[:3]] == ["", "", ""]


def test_declared_registers_one_instance_under_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(T, "TRACE_FORMATS", dict(T.TRACE_FORMATS))

    class Fake(T._Jsonl):
        name = "fake"
        title = "Fake"
        what = "fake"

    assert T._declared(Fake) is Fake  # the class back, its instance registered
    assert list(T.TRACE_FORMATS)[-1] == "fake" and type(T.TRACE_FORMATS["fake"]) is Fake


# ---- one value: counts, times, ids ---------------------------------------------------------------------------------


def test_count_takes_whole_numbers_of_tokens_0_or_more() -> None:
    r = reader()
    assert r.count(1, "input_length", 3) == 3 and r.count(1, "input_length", 0) == 0  # 0 is a count
    got = r.count(1, "input_length", "4.0")  # "4.0" → 4.0 → 4, an int
    assert got == 4 and type(got) is int
    assert type(r.count(1, "input_length", 5.0)) is int and r.count(1, "x", " 7 ") == 7
    for v in ("", "  ", True, 2.5, -1, "-1", float("inf"), "nan", None, [1]):
        with pytest.raises(DatasetError) as e:
            r.count(2, "input_length", v)
        assert str(e.value) == bad(2, f"input_length {v!r} must be a whole number of tokens, 0 or more")
    with pytest.raises(DatasetError) as e:
        r.count(3, "output_length", "abc")
    assert str(e.value) == bad(3, "output_length 'abc' is not a number")


def test_time_takes_a_time_0_or_more() -> None:
    r = reader()
    assert r.time(1, "timestamp", 0) == 0.0 and r.time(1, "timestamp", "1.5") == 1.5
    got = r.time(1, "timestamp", 3)
    assert got == 3.0 and type(got) is float
    for v, shown in ((-0.5, "-0.5"), (True, "True"), ("inf", "inf"), (None, "None"), ("-2", "-2.0"), ([], "[]")):
        with pytest.raises(DatasetError) as e:
            r.time(4, "timestamp", v)
        assert str(e.value) == bad(4, f"timestamp {shown} must be a time ≥ 0")  # a string shown as its float
    with pytest.raises(DatasetError) as e:
        r.time(5, "Timestamp", "noon")
    assert str(e.value) == bad(5, "Timestamp 'noon' is not a number")


def test_signed_takes_whole_numbers_of_either_sign() -> None:
    r = reader()
    assert r.signed(1, "chat_id", 5) == 5 and r.signed(1, "parent_chat_id", -1) == -1
    for v in (True, 1.0, "1", None):
        with pytest.raises(DatasetError) as e:
            r.signed(6, "turn", v)
        assert str(e.value) == bad(6, f"turn {v!r} must be a whole number")


def test_a_reader_starts_empty_and_lowers_its_model_filter() -> None:
    r = reader("burstgpt", "ChatGPT")
    assert (r.fmt, r.name, r.model_filter) == (T.TRACE_FORMATS["burstgpt"], "m.jsonl", "chatgpt")
    assert (r.cols, r.ncols, r.t0, r.offset) == ({}, 0, None, None)
    assert reader("burstgpt", "").model_filter is None and reader("burstgpt").model_filter is None
    r.cols, r.ncols, r.t0, r.offset = {"a": 1}, 3, (5, 0.5), True
    again = reader("burstgpt")
    assert again.resume(r) is again
    assert (again.cols, again.ncols, again.t0, again.offset) == ({"a": 1}, 3, (5, 0.5), True)


# ---- the CSV header -------------------------------------------------------------------------------------------------


def test_a_header_names_its_columns_in_any_order_and_case() -> None:
    r = reader("burstgpt")
    # a BOM, spaces, CR LF: the names stripped and lowered, each its position
    r.header(1, "\ufeff Log Type,Model , Timestamp,Response tokens,REQUEST TOKENS\r\n")
    assert r.cols == {"log type": 0, "model": 1, "timestamp": 2, "response tokens": 3, "request tokens": 4}
    assert r.ncols == 5
    r = reader("azure")
    r.header(1, "Xid,TIMESTAMP,ContextTokens,GeneratedTokens,EXTRAX\n")  # an X at either end is the name's
    assert r.cols == {"xid": 0, "timestamp": 1, "contexttokens": 2, "generatedtokens": 3, "extrax": 4}
    assert r.ncols == 5


def test_a_header_without_a_needed_column_names_it() -> None:
    r = T.RowReader(T.TRACE_FORMATS["burstgpt"], "b.csv", None)
    with pytest.raises(DatasetError) as e:
        r.header(1, "Timestamp,Model,Prompt tokens,Response tokens\n")
    assert str(e.value) == bad(1, "the header 'Timestamp,Model,Prompt tokens,Response tokens' lacks the column "
                                  "'request tokens'", "burstgpt", "b.csv")
    with pytest.raises(DatasetError) as e:
        r.header(2, " Timestamp,Model \n")  # two missing: "columns", joined by ", "
    assert str(e.value) == bad(2, "the header 'Timestamp,Model' lacks the columns 'request tokens', "
                                  "'response tokens'", "burstgpt", "b.csv")
    assert r.cols == {} and r.ncols == 0  # nothing kept from a bad header
    with pytest.raises(DatasetError) as e:  # a CR before the BOM: the BOM is not the line's start
        r.header(3, "\r\ufeffTimestamp,Model,Request tokens,Response tokens\n")
    assert str(e.value) == bad(3, "the header '\\ufeffTimestamp,Model,Request tokens,Response tokens' lacks the "
                                  "column 'timestamp'", "burstgpt", "b.csv")


# ---- JSONL rows ----------------------------------------------------------------------------------------------------


def test_a_mooncake_row_in_milliseconds() -> None:
    r = reader()
    # 1500 ms is 1.5 s; a non-session format's chat, parent and turn are 0
    assert r.parse(2, mc(1500, 600, 5, "[7, -8]")) == T.Parsed(1.5, 600, 5, (7, -8), 0, 0, 0)
    assert r.parse(1, "\ufeff" + mc(0, 1, 2)) == T.Parsed(0.0, 1, 2, (), 0, 0, 0)  # a BOM on line 1 only
    with pytest.raises(DatasetError) as e:
        r.parse(1, "X" + mc(0, 1, 2))  # only a BOM is taken off line 1
    assert str(e.value) == bad(1, "not JSON (Expecting value; a truncated line?)")
    assert r.parse(3, '{"timestamp": 2, "input_length": 1, "output_length": 1, "hash_ids": [], "chat_id": 5, '
                      '"parent_chat_id": 4, "turn": 3}') == T.Parsed(0.002, 1, 1, (), 0, 0, 0)  # read past


def test_bad_jsonl_rows_name_the_line_and_why() -> None:
    cases = [
        (2, "\ufeff" + mc(0, 1, 1), "not JSON (Unexpected UTF-8 BOM (decode using utf-8-sig); a truncated line?)"),
        (2, '{"timestamp": 5, "input_length": 600, "outp', "not JSON (Unterminated string starting at; a truncated "
                                                            "line?)"),
        # a ValueError with no .msg (an integer of 5000 digits): its text
        (3, '{"timestamp": ' + "1" * 5000 + "}", "not JSON (Exceeds the limit (4300 digits) for integer string "
                                                 "conversion: value has 5000 digits; use sys.set_int_max_str_digits()"
                                                 " to increase the limit; a truncated line?)"),
        (4, "[1, 2]", "a JSON list, not an object"),
        (4, "7", "a JSON int, not an object"),
        (5, '{"timestamp": 0}', "no 'input_length', 'output_length', 'hash_ids'"),
        (5, '{"timestamp": 0, "input_length": 1, "output_length": 1}', "no 'hash_ids'"),
        (6, mc(0, 1, 1, '"ab"'), "hash_ids must be a list of whole numbers"),
        (6, mc(0, 1, 1, "[1, true]"), "hash_ids must be a list of whole numbers"),
        (6, mc(0, 1, 1, "[1, 2.0]"), "hash_ids must be a list of whole numbers"),
        (7, mc(-1, 1, 1), "timestamp -1 must be a time ≥ 0"),  # JSON -1: an int
        (7, mc(0, -1, 1), "input_length -1 must be a whole number of tokens, 0 or more"),
        (7, mc(0, 1, 1.5), "output_length 1.5 must be a whole number of tokens, 0 or more"),
    ]
    for line, text, why in cases:
        with pytest.raises(DatasetError) as e:
            reader().parse(line, text)
        assert str(e.value) == bad(line, why), text[:40]


def test_a_bailian_row_links_its_chat_and_turn() -> None:
    r = reader("bailian")
    assert r.parse(1, bl(3, -1, 2.5, 20, 4, "[1, 2]", 1)) == T.Parsed(2.5, 20, 4, (1, 2), 3, -1, 1)  # s, not ms
    assert r.parse(2, bl(4, 3, 3, 40, 5, "[1, 2, 3]")) == T.Parsed(3.0, 40, 5, (1, 2, 3), 4, 3, 1)  # no turn: 1
    assert r.parse(2, bl(5, 4, 3, 40, 5, "[]", 7)).turn == 7
    for text, why in ((bl("true", -1, 0, 1, 1, "[]"), "chat_id True must be a whole number"),
                      (bl(1, 0.5, 0, 1, 1, "[]"), "parent_chat_id 0.5 must be a whole number"),
                      (bl(1, 0, 0, 1, 1, "[]", '"2"'), "turn '2' must be a whole number"),
                      ('{"chat_id": 0, "timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": []}',
                       "no 'parent_chat_id'")):
        with pytest.raises(DatasetError) as e:
            r.parse(9, text)
        assert str(e.value) == bad(9, why, "bailian")


# ---- CSV rows ------------------------------------------------------------------------------------------------------


def test_burstgpt_rows_by_header_name_and_model_filter() -> None:
    r = reader("burstgpt", "GPT-X")
    r.header(1, "Log Type,Timestamp,Request tokens,Response tokens,Model\r\n")  # Model last
    # the model's CR LF and case do not count; a quoted field holds a comma
    assert r.parse(2, "Conversation log,5.5,4,6,GPT-X\r\n") == T.Parsed(5.5, 4, 6)  # its X its own
    assert r.parse(3, "Conversation log,6,4,6,ChatGPT\n") is None  # another model: dropped
    assert r.parse(4, '"log, with a comma",7,3,2," GPT-X "\n') == T.Parsed(7.0, 3, 2)
    r = reader("burstgpt")
    r.header(1, BURST_HEAD)
    assert r.parse(2, "1,GPT-4,0,5,5,Conversation log\n") == T.Parsed(1.0, 0, 5)  # 0 tokens: the caller drops it
    for text, why in (("x,GPT-4,1,5,6,l\n", "Timestamp 'x' is not a number"),
                      ("1,GPT-4,1.5,5,6,l\n", "Request tokens '1.5' must be a whole number of tokens, 0 or more"),
                      ("1,GPT-4,1,-5,6,l\n", "Response tokens '-5' must be a whole number of tokens, 0 or more"),
                      ("1,GPT-4,1,5\n", "4 fields where the header has 6 (a truncated line?)"),
                      ('1,"GPT,4",1,5,6\n', "5 fields where the header has 6 (a truncated line?)")):
        with pytest.raises(DatasetError) as e:
            r.parse(8, text)
        assert str(e.value) == bad(8, why, "burstgpt")
    r.header(1, "Timestamp,Model,Request tokens,Response tokens\n")
    with pytest.raises(DatasetError) as e:  # only the line's CR LF is taken off: the space is the field's
        r.parse(9, "1,A,3,-5 \r\n")
    assert str(e.value) == bad(9, "Response tokens '-5 ' must be a whole number of tokens, 0 or more", "burstgpt")


def test_azure_times_as_written() -> None:
    p = T.Azure.parse_time
    assert p("1970-01-01 00:00:00") == (EPOCH, 0.0, False)
    # 01:02:03 is 3723 s; .25 the fraction; Z names UTC
    assert p("1970-01-01T01:02:03.25Z") == (EPOCH + 3723, 0.25, True)
    assert p("1970-01-01 05:30:00+05:30") == (EPOCH, 0.0, True)  # 19 800 s east of UTC: UTC midnight
    assert p("1970-01-01 00:00:00-0130") == (EPOCH + 5400, 0.0, True)  # 1 h 30 min west: 01:30 UTC
    assert p("1970-01-01 12:00:00+12:00") == (EPOCH, 0.0, True)  # 43 200 s east: UTC midnight
    assert p("1970-01-02 00:00:00,5") == (EPOCH + 86400, 0.5, False)  # a comma before the fraction; a day on
    assert p("1970-02-01 23:59:60") == (EPOCH + 32 * 86400, 0.0, False)  # a leap second: 86 400 s into Feb 1st
    whole, frac, off = p("2023-11-16 18:15:46.6805900")  # 7 digits: 6 805 900 ÷ 10⁷
    assert frac == pytest.approx(0.68059, abs=1e-12) and not off
    assert p("1970-01-01 23:59:59.000000000001")[1] == pytest.approx(1e-12, rel=1e-9)  # 12 digits
    for raw in ("yesterday", "1970-01-01", "1970-01-01 00:00:00 ", "2023-02-29 00:00:00", "1970-13-01 00:00:00",
                "1970-01-01 24:00:00", "1970-01-01 00:60:00", "1970-01-01 00:00:61", "x1970-01-01 00:00:00"):
        assert p(raw) is None, raw
    assert p("2024-02-29 23:59:59") is not None  # 2024 is a leap year


def test_azure_rows_count_from_the_first_row() -> None:
    r = T.RowReader(T.TRACE_FORMATS["azure"], "a.csv", None)
    r.header(1, AZURE_HEAD)
    assert r.parse(2, " 2023-11-16 18:15:46.6805900 ,374,44\n") == T.Parsed(0.0, 374, 44)
    assert r.offset is False and r.t0 is not None and r.t0[1] == pytest.approx(0.68059, abs=1e-12)
    t, n_in, n_out, *_ = r.parse(3, "2023-11-16 18:15:50.9951690,396,109\n")
    assert t == pytest.approx(4.314579, abs=1e-9) and (n_in, n_out) == (396, 109)  # 4 s + (0.995169 − 0.68059)
    # to midnight: 5 h 44 min 14 s = 20 654 s, less the first row's 0.68059
    assert r.parse(4, '"2023-11-17 00:00:00",10,1\n')[0] == pytest.approx(20653.31941, abs=1e-9)
    assert T.TRACE_FORMATS["azure"].variant(r) == "2023 (naive times)"
    for line, text, why in (
            (5, "2024-05-10 00:00:00.009930+00:00,1,1\n",
             "TIMESTAMP '2024-05-10 00:00:00.009930+00:00' has a UTC offset where the first row's time does not"),
            (6, "2023-02-30 00:00:00,1,1\n", "TIMESTAMP '2023-02-30 00:00:00' is not a time like "
                                             "2023-11-16 18:15:46.6805900 or 2024-05-10 00:00:00.009930+00:00"),
            (7, "2023-11-17 00:00:01,-3,1\n", "ContextTokens '-3' must be a whole number of tokens, 0 or more"),
            (7, "2023-11-17 00:00:01,3,x\n", "GeneratedTokens 'x' is not a number")):
        with pytest.raises(DatasetError) as e:
            r.parse(line, text)
        assert str(e.value) == bad(line, why, "azure", "a.csv")
    r = T.RowReader(T.TRACE_FORMATS["azure"], "a.csv", None)
    r.header(1, AZURE_HEAD)
    assert r.parse(2, "2024-05-10 00:00:00.009930+00:00,2162,5\n") == T.Parsed(0.0, 2162, 5)
    assert T.TRACE_FORMATS["azure"].variant(r) == "2024 (UTC offsets)"
    # 2 h ahead of UTC: 23:00:00.5 UTC the day before, 1 h less 0.00993 s before the first row
    assert r.parse(3, "2024-05-10 01:00:00.5+02:00,1,1\n")[0] == pytest.approx(-3599.50993, abs=1e-9)
    with pytest.raises(DatasetError) as e:
        r.parse(4, "2024-05-10 00:00:01,1,1\n")
    assert str(e.value) == bad(4, "TIMESTAMP '2024-05-10 00:00:01' lacks a UTC offset where the first row's time "
                                  "has one", "azure", "a.csv")


# ---- the scan ------------------------------------------------------------------------------------------------------

MOONCAKE = (mc(1000, 600, 5, "[7, 8]")  # line 1: t0 = 1 s; 600 tokens: 2 blocks of 512
            + " \t\n"  # line 2: blank, skipped (hashed all the same)
            + mc(1500, 1024, 0, "[7]")  # line 3: 0 answer tokens: dropped and counted (its ids not checked)
            + mc(2500, 513, 3, "[7]")  # line 4: 513 tokens need 2 blocks, 1 given: a mismatched row
            + mc(2500, 512, 2, "[9]"))  # line 5: the same time is sorted; 512 tokens are 1 block


def test_the_scan_keeps_counts_times_and_a_hash() -> None:
    t, src = table("mooncake", MOONCAKE, name="m.jsonl")
    assert (t.fmt, t.kind, t.name, t.path, t.block) == (T.TRACE_FORMATS["mooncake"], "mooncake", "m.jsonl",
                                                        Path("m.jsonl"), 512)
    assert (len(t), t.n, t.zero_rows, t.mismatched, t.filtered, t.orphans, t.sessions) == (3, 3, 1, 1, 0, 0, 0)
    assert (t.t0, t.last_t, t.variant, t.parents, t.model_filter) == (1.0, 1.5, "", None, None)  # 2.5 − 1 s
    assert t.sha256 == hashlib.sha256(MOONCAKE.encode()).hexdigest()[:16]  # every byte, blank lines too
    assert t._offsets == [(0, 0)] and src.starts == [0] and src.handed == 5 and not t._chunks
    assert t[0] == T.TraceRow(0, 1, 0.0, 600, 5, (7, 8), -1, 0)
    assert t[1] == T.TraceRow(1, 4, 1.5, 513, 3, (7,), -1, 0)
    assert t[2] == T.TraceRow(2, 5, 1.5, 512, 2, (9,), -1, 0)
    assert t[-1] == t[2] and t[-3] == t[0] and t[0:3:2] == [t[0], t[2]] and t[1:] == [t[1], t[2]]
    for i, named in ((3, 3), (-4, -1)):  # −4 counts from the end: −4 + 3 = −1, still out
        with pytest.raises(IndexError) as e:
            t[i]
        assert e.value.args == (named,)
    assert T.TraceDataset("k", "d", table=t).turn_at(1) == 0  # a format without sessions: turn 0 (never asked)


def test_times_count_from_the_first_kept_row() -> None:
    t, _ = table("mooncake", mc(1000, 0, 5) + mc(2000, 1, 1) + mc(5000, 1, 1))  # the 0-token row is not the zero
    assert (t.n, t.t0, t.last_t, t.zero_rows) == (2, 2.0, 3.0, 1)
    assert [r.t for r in t] == [0.0, 3.0]  # 2 s and 5 s, less 2 s


def test_an_empty_file() -> None:
    for kind in ("mooncake", "bailian"):
        t, _ = table(kind, "")
        assert (t.n, t.t0, t.last_t, t.zero_rows, t.filtered, t.orphans, t.mismatched, t.sessions, t.variant) == (
            0, 0.0, 0.0, 0, 0, 0, 0, 0, "")
        assert t.sha256 == "e3b0c44298fc1c14" and t._offsets == []  # sha256 of nothing: e3b0c442 98fc1c14 …
    assert list(table("bailian", "")[0].parents or [0]) == [0] and table("bailian", "")[0].parents is not None
    for text in ("", "\n \n"):
        assert fails("burstgpt", text, "b.csv") == ("--workload burstgpt:b.csv: the file is empty; expected: "
                                                    + BURST_WHAT)
    t, _ = table("azure", AZURE_HEAD)  # a header alone: no rows, a table
    assert (t.n, t.variant) == (0, "2023 (naive times)")


def test_rows_out_of_time_order_are_refused() -> None:
    # 2.5 s then 0.5 s: 2 s before line 3 (line 2 blank)
    assert fails("mooncake", mc(2000, 1, 1) + "\n" + mc(2500, 1, 1) + mc(500, 1, 1), "m.jsonl") == bad(
        4, "its time is 2 s before line 3's: the rows must be sorted by time")
    assert fails("mooncake", mc(2000, 1, 1) + mc(500, 1, 1), "m.jsonl") == bad(
        2, "its time is 1.5 s before line 1's: the rows must be sorted by time")
    # a row of 0 tokens is dropped after its time is checked: line 3 is 1 s before it
    assert fails("mooncake", mc(1000, 1, 1) + mc(3000, 1, 0) + mc(2000, 1, 1), "m.jsonl") == bad(
        3, "its time is 1 s before line 2's: the rows must be sorted by time")
    # a row of another model is dropped before: 50 s then 7 s is no disorder
    text = BURST_HEAD + "5,ChatGPT,1,1,2,l\n50,GPT-4,1,1,2,l\n7,ChatGPT,1,1,2,l\n"
    assert table("burstgpt", text, "chatgpt")[0].n == 2
    assert fails("burstgpt", text, "b.csv") == bad(4, "its time is 43 s before line 3's: the rows must be sorted by "
                                                      "time", "burstgpt", "b.csv")


def test_unreadable_files_say_so_in_one_line() -> None:
    assert fails("mooncake", mc(0, 1, 1).encode() + b"\xff\xfe\n", "m.jsonl") == bad(2, "not UTF-8 text")

    def gone(start: int) -> Iterator[bytes]:
        yield mc(0, 1, 1).encode()
        raise OSError(2, "No such file or directory")

    def broken(start: int) -> Iterator[bytes]:
        raise OSError("disk gone")

    for lines_from, why in ((gone, "No such file or directory"), (broken, "disk gone")):
        with pytest.raises(DatasetError) as e:
            T.TraceTable(T.TRACE_FORMATS["mooncake"], "m.jsonl", T.TraceFile(Path("m.jsonl"), "/m", lines_from))
        assert str(e.value) == f"--workload mooncake:m.jsonl: cannot read it ({why})"


# ---- sessions, chunks, reading rows back ---------------------------------------------------------------------------

BAILIAN = (bl(0, -1, 0, 16, 2, "[1]", 1)  # line 1, row 0: a root (session 1)
           + "\n"  # line 2: blank
           + bl(1, -1, 1, 0, 5, "[2]", 1)  # line 3: 0 prompt tokens: dropped, so chat 1 is not in the table
           + bl(2, 0, 2, 32, 3, "[1, 4]", 2)  # line 4, row 1: chat 0's follow-up (parent chat 0 = row 0)
           + bl(3, 1, 3, 16, 1, "[5]", 2)  # line 5, row 2: chat 1 was dropped: an orphan, a root (session 2)
           + bl(4, 2, 3.5, 48, 4, "[1, 4, 6]", 3)  # line 6, row 3: chat 2's follow-up (row 1)
           + bl(5, 77, 4, 16, 1, "[7]")  # line 7, row 4: chat 77 absent: an orphan (session 3); no turn: 1
           + bl(6, -1, 5, 8, 1, "[]", 1)  # line 8, row 5: a root (session 4); 8 tokens need 1 block: mismatched
           + bl(7, -1, 6, 8, 0, "[8]", 1)  # line 9: 0 answer tokens, dropped
           + "\n")  # line 10
ROWS = [T.TraceRow(0, 1, 0.0, 16, 2, (1,), -1, 1), T.TraceRow(1, 4, 2.0, 32, 3, (1, 4), 0, 2),
        T.TraceRow(2, 5, 3.0, 16, 1, (5,), -1, 2), T.TraceRow(3, 6, 3.5, 48, 4, (1, 4, 6), 1, 3),
        T.TraceRow(4, 7, 4.0, 16, 1, (7,), -1, 1), T.TraceRow(5, 8, 5.0, 8, 1, (), -1, 1)]


def test_bailian_sessions_and_orphans() -> None:
    t, _ = table("bailian", BAILIAN, name="q.jsonl")
    assert (t.n, t.zero_rows, t.orphans, t.sessions, t.mismatched, t.last_t) == (6, 2, 2, 4, 1, 5.0)
    assert list(t.parents or []) == [-1, 0, -1, 1, -1, -1] and list(t) == ROWS
    after = T.TraceAfter(t.parents or array("q"))
    assert len(after) == 6 and after[1] == 0 and after[3] == 1 and after[-1] == -1
    assert after[0:4] == [-1, 0, -1, 1] and type(after[0:4]) is list


def test_chunks_are_read_again_from_their_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(T, "CHUNK", 2)
    monkeypatch.setattr(T, "CHUNKS_KEPT", 2)
    t, src = table("bailian", BAILIAN, name="q.jsonl")
    data = BAILIAN.encode()
    o5, o7 = data.index(b'{"chat_id": 3'), data.index(b'{"chat_id": 5')  # lines 5 and 7: rows 2 and 4
    assert t._offsets == [(0, 0), (o5, 4), (o7, 6)]  # (byte, the line before)
    assert src.starts == [0] and src.handed == 10
    src.handed = 0
    assert t[0] == ROWS[0] and src.starts == [0, 0] and src.handed == 5  # lines 1–4, then 5 (a 3rd row: stop)
    src.handed = 0
    assert t[3] == ROWS[3] and src.starts[-1] == o5 and src.handed == 3  # lines 5, 6, then 7
    assert t[1] == ROWS[1] and len(src.starts) == 3  # chunk 0 kept: not read again (now the latest used)
    src.handed = 0
    assert t[5] == ROWS[5] and src.starts[-1] == o7 and src.handed == 3  # lines 7, 8, then 9; chunk 1 goes
    assert list(t._chunks) == [0, 2]
    assert t[0] == ROWS[0] and len(src.starts) == 4  # chunk 0 was used after chunk 1: kept
    assert t[2] == ROWS[2] and src.starts[-1] == o5 and list(t._chunks) == [0, 1]  # chunk 2 the least used
    assert t[4] == ROWS[4] and src.starts[-1] == o7 and len(src.starts) == 6


def test_a_last_chunk_stops_after_its_last_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(T, "CHUNK", 4)
    t, src = table("bailian", BAILIAN)
    o7 = BAILIAN.encode().index(b'{"chat_id": 5')
    assert t._offsets == [(0, 0), (o7, 6)]
    assert t[4] == ROWS[4] and t[5] == ROWS[5] and src.handed == 10 + 3  # lines 7, 8, then 9: row 6 is past n
    src.handed = 0
    assert t[3] == ROWS[3] and src.handed == 7  # lines 1–6 (rows 0–3), then 7: the chunk is full


def test_a_csv_chunk_reads_with_the_scans_header_and_first_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(T, "CHUNK", 2)
    text = (AZURE_HEAD + "2024-05-10 00:00:00.5+00:00,10,1\n2024-05-10 00:00:01+00:00,11,2\n"
            "2024-05-10 00:00:03.25+00:00,12,3\n")
    t, src = table("azure", text)
    assert t._offsets == [(len(AZURE_HEAD), 1), (text.index("2024-05-10 00:00:03"), 3)]
    assert t[2] == T.TraceRow(2, 4, 2.75, 12, 3, (), -1, 1)  # 3.25 − 0.5 s: the scan's first row, not the chunk's
    assert t[0] == T.TraceRow(0, 2, 0.0, 10, 1, (), -1, 1) and t.variant == "2024 (UTC offsets)"
    text = (BURST_HEAD + "5,ChatGPT,10,20,30,l\n50,GPT-4,11,21,32,l\n7,ChatGPT,0,5,5,l\n9,chatgpt ,12,0,12,l\n"
            "12,ChatGPT,13,22,35,l\n13,ChatGPT,14,23,37,l\n14,GPT-4,1,1,2,l\n")
    t, src = table("burstgpt", text, "ChatGPT")  # kept: lines 2, 6, 7; 3 and 8 another model; 4 and 5 0 tokens
    assert (t.n, t.filtered, t.zero_rows, t.t0, t.last_t) == (3, 2, 2, 5.0, 8.0)
    assert t._offsets == [(len(BURST_HEAD), 1), (text.index("13,ChatGPT"), 6)]
    assert t[1] == T.TraceRow(1, 6, 7.0, 13, 22, (), -1, 1) and t[2] == T.TraceRow(2, 7, 8.0, 14, 23, (), -1, 1)
    assert T.TraceTimes(t)[0:3] == [0.0, 7.0, 8.0]


def test_trace_times_read_through_the_table() -> None:
    t, src = table("bailian", BAILIAN)
    times = T.TraceTimes(t)
    assert times.table is t and len(times) == 6
    assert times[-1] == 5.0 and times[5] == 5.0 and src.starts == [0]  # the last time: kept, not read
    assert times[1] == 2.0 and src.starts == [0, 0]
    assert times[1:4] == [2.0, 3.0, 3.5] and times[::-2] == [5.0, 3.5, 2.0] and list(times) == [r.t for r in ROWS]


# ---- block ids as text ---------------------------------------------------------------------------------------------

def own_id(own: str, j: int) -> int:
    """The id of a request's own block j: sha256 of "own:OWN:J", its first 8 bytes big-endian, kept to 62 bits
    (the same in every process, as str hash() is not)."""
    return int.from_bytes(hashlib.sha256(f"own:{own}:{j}".encode()).digest()[:8], "big") & (2**62 - 1)


def test_block_ids_become_words() -> None:
    assert T.block_words(4, 9) == tuple(words(4, 9))
    # block 3's 16 words, then block 4's first 4 (20 tokens); ids past the length unused
    assert T.blocks_text([3, 4, 5], 20, 16, "p") == " ".join(words(16, 3) + words(16, 4)[:4])
    assert T.blocks_text([5], 3, 16, "p") == " ".join(words(16, 5)[:3])
    assert T.blocks_text([3], 16, 16, "p") == " ".join(words(16, 3))
    assert T.blocks_text([], 0, 16, "p") == ""
    # past the ids: block j is the request's own (j = 1 here), the same for the same request
    own = T.blocks_text([3], 20, 16, "p-1")
    assert own == " ".join(words(16, 3) + words(16, own_id("p-1", 1))[:4])
    # no ids: 20 own blocks of 2 words (j = 0 … 19)
    want = [w for j in range(20) for w in words(2, own_id("q", j))]
    assert T.blocks_text([], 40, 2, "q") == " ".join(want)
    # the same words in any process, whatever its hash seed: sha256("own:m-3:0") starts 2b7a2a68 cb3b6ded, which
    # is 3 132 863 120 364 236 269 (its top 2 bits 0: kept whole); 3 blocks of 2 words
    assert own_id("m-3", 0) == 3132863120364236269
    assert T.blocks_text([], 6, 2, "m-3") == "any well most swim fly father"


# ---- the dataset and load ------------------------------------------------------------------------------------------

MOONCAKE_LOAD = (mc(1000, 20, 5, "[7]")  # line 1: 20 tokens of block 7
                 + mc(1500, 512, 0, "[7]")  # line 2: 0 answer tokens, dropped
                 + mc(2500, 600, 3, "[7]")  # line 3: 600 tokens, 1 block given: mismatched; 88 own words
                 + mc(4000, 5, 9, "[1, 2]"))  # line 4: 5 tokens are 1 block, 2 given: mismatched


def test_load_a_mooncake_trace() -> None:
    ds = loaded("mooncake", MOONCAKE_LOAD, "m.jsonl", output_len=LengthDist("fixed", 7), seed=11,
                output_spec="fixed:7")
    assert (ds.key, ds.source) == ("mooncake:m.jsonl", "m.jsonl")
    assert ds.description == "3 requests from m.jsonl (mooncake; 1 rows of 0 tokens dropped)"
    assert ds.info == {"workload_file": "/abs/m.jsonl",
                       "workload_sha256": hashlib.sha256(MOONCAKE_LOAD.encode()).hexdigest()[:16],
                       "workload_items": 3, "trace_format": "mooncake", "output_len": "fixed:7", "length_seed": 11,
                       "trace_span_s": 3.0, "trace_block_tokens": 512, "trace_hash_mismatch_rows": 2}
    assert list(ds.times_s or []) == [0.0, 1.5, 3.0] and isinstance(ds.times_s, T.TraceTimes)
    assert ds.varies and ds.shares_prefixes and T.after_of(ds) is None
    assert ds.prompt_at(0) == Prompt("m-1", text=" ".join(words(512, 7)[:20]))
    assert ds.prompt_at(4) == Prompt("m-3", text=" ".join(words(512, 7) + words(512, own_id("m-3", 1))[:88]))
    assert ds.row(3) == ds.row(0) and ds.row(5).line == 4  # request i is row i mod 3
    assert [ds.output_at(i, 99) for i in range(3)] == [7, 7, 7]  # --output-len: its draw
    assert ds.longest(3, 99) == (1, 600, 7) and ds.longest(0, 99) is None
    capped = loaded("mooncake", MOONCAKE_LOAD, "m.jsonl", output_len=LengthDist("fixed", 7), max_tokens=4)
    assert [capped.output_at(i, 99) for i in range(3)] == [4, 4, 4]
    own = loaded("mooncake", MOONCAKE_LOAD, "m.jsonl", max_tokens=4)
    assert [own.output_at(i, 99) for i in range(3)] == [4, 3, 4]  # the rows' 5, 3, 9 capped at 4
    free = loaded("mooncake", MOONCAKE_LOAD, "m.jsonl")
    assert [free.output_at(i, 99) for i in range(4)] == [5, 3, 9, 5] and free.info["output_len"] is None
    assert free.longest(3, 99) == (1, 600, 3)  # 25, 603, 14 tokens


def test_load_a_burstgpt_trace_with_and_without_a_model() -> None:
    text = (BURST_HEAD + "5,ChatGPT,10,20,30,l\n6,GPT-4,13,17,30,l\n7,ChatGPT,0,5,5,l\n9,chatgpt ,12,0,12,l\n"
            "12,ChatGPT,8,1,9,l\n")  # lines 2, 3, 6 kept; 4, 5 of 0 tokens
    sha = hashlib.sha256(text.encode()).hexdigest()[:16]
    ds = loaded("burstgpt", text, "b.csv")
    assert ds.description == "3 requests from b.csv (burstgpt; 2 rows of 0 tokens dropped)"
    assert ds.info == {"workload_file": "/abs/b.csv", "workload_sha256": sha, "workload_items": 3,
                       "trace_format": "burstgpt", "output_len": None, "length_seed": 0, "trace_span_s": 7.0,
                       "trace_zero_token_rows": 2}
    assert ds.prompt_at(1) == Prompt("b-3", synthetic_tokens=13) and not ds.shares_prefixes
    assert ds.longest(3, 9) == (0, 10, 20)  # 30, 30, 9 tokens: the first of the longest
    assert loaded("burstgpt", text, "b.csv", max_tokens=18).longest(3, 9) == (1, 13, 17)  # 28, 30, 9
    ds = loaded("burstgpt", text, "b.csv", model_filter="ChatGPT")
    assert ds.description == ("2 requests from b.csv (burstgpt; 2 rows of 0 tokens dropped; 1 rows of other models "
                              "dropped)")
    assert ds.info == {"workload_file": "/abs/b.csv", "workload_sha256": sha, "workload_items": 2,
                       "trace_format": "burstgpt", "output_len": None, "length_seed": 0, "trace_span_s": 7.0,
                       "trace_zero_token_rows": 2, "trace_model_filter": "ChatGPT", "trace_filtered_rows": 1}
    assert [r.line for r in ds.table or []] == [2, 6]


def test_load_azure_and_bailian() -> None:
    text = AZURE_HEAD + "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.6805900,396,109\n"
    ds = loaded("azure", text, "a.csv")
    assert ds.description == "2 requests from a.csv (azure 2023 (naive times))"
    assert ds.info == {"workload_file": "/abs/a.csv", "workload_sha256": hashlib.sha256(text.encode()).hexdigest()[
        :16], "workload_items": 2, "trace_format": "azure 2023 (naive times)", "output_len": None, "length_seed": 0,
        "trace_span_s": 1.0, "trace_zero_token_rows": 0}
    ds = loaded("bailian", BAILIAN, "q.jsonl")
    assert ds.description == "6 requests from q.jsonl (bailian; 2 rows of 0 tokens dropped; 4 sessions)"
    assert ds.info == {"workload_file": "/abs/q.jsonl", "workload_sha256": hashlib.sha256(BAILIAN.encode()).hexdigest()[
        :16], "workload_items": 6, "trace_format": "bailian", "output_len": None, "length_seed": 0,
        "trace_span_s": 5.0, "trace_block_tokens": 16, "trace_sessions": 4, "trace_orphans": 2,
        "trace_hash_mismatch_rows": 1}
    after = T.after_of(ds)
    assert isinstance(after, T.TraceAfter) and list(after) == [-1, 0, -1, 1, -1, -1]
    assert [ds.turn_at(i) for i in range(7)] == [1, 2, 2, 3, 1, 1, 1]
    assert ds.prompt_at(1) == Prompt("q-4", text=" ".join(words(16, 1) + words(16, 4)))
    assert T.after_of(T.TraceDataset("k", "d")) is None and T.after_of(Workload("w", "d")) is None
    assert not T.TraceDataset("k", "d").shares_prefixes


def test_load_refuses_a_trace_with_no_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(kind: str, text: str, name: str, model_filter: str | None = None) -> str:
        with pytest.raises(DatasetError) as e:
            loaded(kind, text, name, model_filter)
        return str(e.value)

    rows = BURST_HEAD + "1,A,0,4,4,x\n2,B,3,4,7,x\n"
    assert refused("burstgpt", rows, "b.csv", "Claude") == (
        "--workload burstgpt:b.csv: no row of Model 'Claude' (2 rows of other models); expected: " + BURST_WHAT)
    assert refused("burstgpt", rows, "b.csv", "a") == (  # line 2 of 0 tokens, line 3 another model's
        "--workload burstgpt:b.csv: no row of Model 'a' (1 rows of other models); expected: " + BURST_WHAT)
    assert refused("burstgpt", BURST_HEAD + "1,A,0,4,4,x\n", "b.csv") == (
        "--workload burstgpt:b.csv: no request with tokens (1 rows of 0 tokens); expected: " + BURST_WHAT)
    assert refused("burstgpt", BURST_HEAD, "b.csv") == ("--workload burstgpt:b.csv: no requests; expected: "
                                                        + BURST_WHAT)
    assert refused("mooncake", "", "m.jsonl") == "--workload mooncake:m.jsonl: no requests; expected: " + MOONCAKE_WHAT
    assert refused("mooncake", MOONCAKE_LOAD, "m.jsonl", "GPT-4") == (
        "--model-filter picks a BurstGPT trace's rows by their Model column: it does not apply to --workload "
        "mooncake:")
    assert str(T.model_filter_error("azure")) == ("--model-filter picks a BurstGPT trace's rows by their Model "
                                                  "column: it does not apply to --workload azure:")

    class Fake(T._Jsonl):
        name = "fake"
        title = "Fake"
        model_column = True

    monkeypatch.setitem(T.TRACE_FORMATS, "fake", Fake())
    assert str(T.model_filter_error("bailian")) == ("--model-filter picks a BurstGPT trace's or Fake trace's rows by "
                                                    "their Model column: it does not apply to --workload bailian:")


def test_session_links_by_chat_id_whatever_its_value() -> None:
    t, _ = table("bailian", bl(5, 0, 0, 16, 1, "[1]", 2)  # row 0: chat 0 is not in the file: an orphan
                 + bl(6, 5, 1, 16, 1, "[1]", 3)  # row 1: chat 5's follow-up (row 0)
                 + bl(7, 6, 2, 16, 1, "[1]", 4)  # row 2: chat 6's (row 1)
                 + bl(-1, -2, 3, 16, 1, "[1]", 1)  # row 3: any parent below 0 is none: a root; its chat id −1
                 + bl(9, -1, 4, 16, 1, "[1]", 1))  # row 4: parent −1, a root, not chat −1's follow-up
    assert list(t.parents or []) == [-1, 0, 1, -1, -1]
    assert (t.orphans, t.sessions) == (1, 3)  # sessions: row 0 (an orphan), rows 3 and 4


def test_errors_from_the_table_name_the_file_and_line() -> None:
    assert fails("burstgpt", "\nTimestamp,Model\n", "b.csv") == bad(
        2, "the header 'Timestamp,Model' lacks the columns 'request tokens', 'response tokens'", "burstgpt", "b.csv")
    assert fails("mooncake", "\n" + mc(0, 1, 1) + "[1]\n", "m.jsonl") == bad(3, "a JSON list, not an object")
    # a BOM on the file's first line, not on a later one
    assert table("mooncake", "\ufeff" + mc(0, 1, 1))[0].n == 1
    assert fails("mooncake", "\n\ufeff" + mc(0, 1, 1), "m.jsonl") == bad(
        2, "not JSON (Unexpected UTF-8 BOM (decode using utf-8-sig); a truncated line?)")
    with pytest.raises(DatasetError) as e:
        loaded("mooncake", mc(0, 1, 1) + "[1]\n", "m.jsonl")
    assert str(e.value) == bad(2, "a JSON list, not an object")


def test_a_file_changed_since_its_scan_is_refused_when_read_again() -> None:
    t, src = table("mooncake", mc(0, 1, 1) + mc(5, 1, 1), name="m.jsonl")
    src.data = mc(0, 1, 1).encode() + b"[2]\n"  # line 2 rewritten after the scan
    with pytest.raises(DatasetError) as e:
        t[0]
    assert str(e.value) == bad(2, "a JSON list, not an object")


def test_output_lengths_drawn_by_request_index() -> None:
    dist = LengthDist("uniform", 1, 1000, seed=5, salt="output-len")
    ds = loaded("mooncake", MOONCAKE_LOAD, "m.jsonl", output_len=dist)
    # datasets.LengthDist: request i draws randint(1, 1000) from a generator seeded "output-len:5:i"
    want = [random.Random(f"output-len:5:{i}").randint(1, 1000) for i in range(4)]
    assert [ds.output_at(i, 9) for i in range(4)] == want and len(set(want)) > 1

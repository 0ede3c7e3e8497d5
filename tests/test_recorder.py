import json

import pytest

from measure.core.recorder import Recorder, read_jsonl
from measure.core.records import RequestRecord


def test_cut_last_line_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, {"model": "m"})
    for i in range(3):
        rec.record(RequestRecord("run", i, "instances", "e", "m", 1, 1, 1, token_ns=[1, 2]))
    rec.close()
    text = path.read_text()
    path.write_text(text[:-20])  # a SIGKILL in the middle of a write
    with pytest.warns(UserWarning, match="last line is cut"):
        headers, records, _ = read_jsonl(path)
    assert headers[0]["model"] == "m" and [r.request_id for r in records] == [0, 1]
    assert json.loads(text.splitlines()[1])["kind"] == "request"

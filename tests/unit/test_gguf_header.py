"""engines/gguf_header.py against gguf's own GGUFReader (the oracle), on written files: every tensor's name, shape,
type, offset and bytes and every metadata value the same, the long arrays (a vocabulary over ARRAY_KEPT) skipped
with their count; a file cut short or not a GGUF is one HeaderError."""
from __future__ import annotations

import pytest

from engines.gguf_file import gguf_field
from engines.gguf_header import ARRAY_KEPT, HeaderError, Skipped, read_gguf_header
from engines.gguf_synth import SynthShape, write_model


@pytest.mark.parametrize("shape", [SynthShape(hidden=64, layers=2, heads=4, kv_heads=2, ffn=64, experts=4,
                                              experts_used=2, vocab=ARRAY_KEPT + 100, ctx=256),
                                   SynthShape(hidden=64, layers=3, heads=4, kv_heads=1, ffn=96, experts=0,
                                              vocab=300, ctx=128)], ids=["moe-long-vocab", "dense"])
def test_the_header_is_what_gguf_reads(tmp_path, shape):
    from gguf import GGUFReader

    path = write_model(tmp_path / "m.gguf", shape)
    h, r = read_gguf_header(path), GGUFReader(str(path), "r")
    assert [(t.name, t.shape, t.type, t.data_offset, t.n_elements, t.n_bytes) for t in h.tensors] == [
        (t.name, tuple(int(x) for x in t.shape), int(t.tensor_type), int(t.data_offset), int(t.n_elements),
         int(t.n_bytes)) for t in r.tensors]
    for key in r.fields:
        if key.startswith("GGUF."):  # the reader's own pseudo-keys (version, counts), not the file's metadata
            continue
        want = gguf_field(r, key)
        if isinstance(want, list) and len(want) > ARRAY_KEPT:
            assert h.fields[key] == Skipped(h.fields[key].item_type, len(want)) and h.get(key) is None
        else:
            assert h.get(key) == pytest.approx(want) if isinstance(want, float) else h.get(key) == want, key
    assert h.get("llama.expert_count") == (shape.experts or None)


def test_a_cut_or_foreign_file_is_one_header_error(tmp_path):
    path = write_model(tmp_path / "m.gguf", SynthShape(hidden=64, layers=1, heads=4, kv_heads=2, ffn=64, experts=0,
                                                      vocab=300, ctx=64))
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:2000])  # inside the metadata
    with pytest.raises(HeaderError, match="truncated"):
        read_gguf_header(cut)
    other = tmp_path / "x.bin"
    other.write_bytes(b"PK\x03\x04" + data[4:100])
    with pytest.raises(HeaderError, match="magic"):
        read_gguf_header(other)

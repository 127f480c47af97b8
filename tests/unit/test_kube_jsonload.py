"""decice_kube.jsonload: orjson, and the standard library for what orjson refuses."""

from __future__ import annotations

import json
import math

import pytest

from decice_kube.jsonload import loads


def test_a_document_reads_the_same_from_bytes_text_and_a_memoryview() -> None:
    doc = {"type": "MODIFIED", "object": {"metadata": {"name": "p"}, "n": [1, 2.5, None, True]}}
    raw = json.dumps(doc).encode()
    assert loads(raw) == loads(raw.decode()) == loads(memoryview(raw)) == doc


@pytest.mark.parametrize("text", ["NaN", "[Infinity, -Infinity]", '"\\ud800"'])
def test_what_orjson_refuses_the_standard_library_reads(text: str) -> None:
    got, want = loads(text.encode()), json.loads(text)
    if isinstance(want, float):
        assert math.isnan(got)
    else:
        assert got == want
    assert loads(memoryview(text.encode())) == got or isinstance(want, float)


@pytest.mark.parametrize("text", [b"", b"{", b'{"a": 1} x', b"\xff"])
def test_what_neither_reads_is_a_value_error(text: bytes) -> None:
    with pytest.raises(ValueError):
        loads(text)


def test_an_integer_beyond_64_bits_reads_as_a_float_as_documented() -> None:
    assert loads(b"[18446744073709551615]") == [2**64 - 1]
    assert loads(b"[18446744073709551616]") == [float(2**64)]

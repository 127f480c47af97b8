"""decice_kube.jsonload: orjson, and the standard library for what orjson refuses."""

from __future__ import annotations

import json

import pytest

from decice_kube.jsonload import loads


def test_a_document_reads_the_same_from_bytes_and_text() -> None:
    doc = {"type": "MODIFIED", "object": {"metadata": {"name": "p"}, "n": [1, 2.5, None, True]}}
    raw = json.dumps(doc).encode()
    assert loads(raw) == loads(raw.decode()) == doc


@pytest.mark.parametrize("text", ["NaN", "[Infinity, -Infinity]", '"\\ud800"'])
def test_what_orjson_refuses_the_standard_library_reads(text: str) -> None:
    # compared as the standard library writes them back: NaN is not equal to itself
    want = json.dumps(json.loads(text))
    assert json.dumps(loads(text.encode())) == json.dumps(loads(text)) == want


@pytest.mark.parametrize("text", [b"", b"{", b'{"a": 1} x', b"\xff"])
def test_what_neither_reads_is_a_value_error(text: bytes) -> None:
    with pytest.raises(ValueError):
        loads(text)


def test_an_integer_beyond_64_bits_reads_as_a_float_as_documented() -> None:
    assert loads(b"[18446744073709551615]") == [2**64 - 1]
    assert loads(b"[18446744073709551616]") == [float(2**64)]

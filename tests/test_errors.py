"""Error kinds: every third-party message that a decision depends on is mapped to an
:class:`ErrorKind` at one boundary (``read/jsonerrors``, the inflater in
``read/sources``); each mapping is tested here with the REAL message of the real
library (ijson's C and Python backends, msgspec, zlib/ISA-L, zstandard), produced from
a real recorded trace."""

from __future__ import annotations

import gzip
import io
import pickle
from pathlib import Path

import ijson
import msgspec
import pytest
import zstandard

from tracefuse_stream import merge
from tracefuse_stream.errors import ErrorKind, InputError, UsageError
from tracefuse_stream.read.jsonerrors import describe_json_error, first_line, is_truncation
from tracefuse_stream.read.sources import TraceReader

TRACE = Path(__file__).resolve().parent / "data" / "recorded" / "natural_order" / "rank_5.json"
TEXT = TRACE.read_bytes()
HALF = TEXT[: len(TEXT) // 2]


def _ijson_error(data: bytes, backend: str) -> BaseException:
    be = ijson.get_backend(backend)
    with pytest.raises((ijson.JSONError, UnicodeDecodeError)) as ei:
        for _ in be.items(io.BytesIO(data), "traceEvents.item", use_float=False):
            pass
    return ei.value


def _msgspec_error(data: bytes) -> BaseException:
    with pytest.raises(msgspec.DecodeError) as ei:
        msgspec.json.decode(data)
    return ei.value


@pytest.mark.parametrize("backend", ["yajl2_c", "python"])
def test_ijson_truncation_is_truncated(backend):
    kind, problem = describe_json_error(_ijson_error(HALF, backend))
    assert kind is ErrorKind.TRUNCATED and "truncated" in problem


@pytest.mark.parametrize("backend", ["yajl2_c", "python"])
def test_ijson_syntax_error_is_invalid_json(backend):
    broken = TEXT.replace(b'"ph"', b'"ph" "', 1)
    e = _ijson_error(broken, backend)
    kind, problem = describe_json_error(e)
    assert kind is ErrorKind.INVALID_JSON and problem.startswith("invalid JSON: ")
    assert "\n" not in problem and first_line(e) in problem


def test_ijson_invalid_utf8_is_invalid_utf8():
    broken = TEXT.replace(b"rank_5", b"rank_\xff", 1)
    e = _ijson_error(broken, "yajl2_c")
    assert describe_json_error(e)[0] in (ErrorKind.INVALID_UTF8, ErrorKind.INVALID_JSON)
    u = pytest.raises(UnicodeDecodeError, b"\xff".decode, "utf-8").value
    assert describe_json_error(u) == (ErrorKind.INVALID_UTF8, f"invalid UTF-8 in a string ({u.reason})")


def test_msgspec_messages():
    trunc = _msgspec_error(HALF)
    assert is_truncation(trunc) and describe_json_error(trunc)[0] is ErrorKind.TRUNCATED
    bad = _msgspec_error(TEXT[:200] + b"}x" + TEXT[200:])
    assert not is_truncation(bad) and describe_json_error(bad)[0] is ErrorKind.INVALID_JSON


def test_first_line_of_bytes_and_multiline_messages():
    assert first_line(ValueError(b"parse error: x\n   (right here) ------^\n")) == "parse error: x"
    assert first_line(ValueError("")) == "ValueError"


def _read_all(path: Path) -> None:
    r = TraceReader(path)
    try:
        while r.read(1 << 16):
            pass
    finally:
        r.close()


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_compressed_streams_truncated_or_corrupt(tmp_path, codec):
    # (zstd detects damage by its frame checksum; without one, flipped bits may decode)
    data = (
        gzip.compress(TEXT)
        if codec == "gzip"
        else zstandard.ZstdCompressor(write_checksum=True).compress(TEXT)
    )
    cut = tmp_path / f"cut.{codec}"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as ei:
        _read_all(cut)
    assert ei.value.kind is ErrorKind.TRUNCATED and ei.value.salvageable
    bad = bytearray(data)
    for i in range(len(bad) // 3, len(bad) // 3 + 40):
        bad[i] ^= 0x5A
    corrupt = tmp_path / f"corrupt.{codec}"
    corrupt.write_bytes(bytes(bad))
    with pytest.raises(InputError) as ei:
        _read_all(corrupt)
    assert ei.value.kind is ErrorKind.CORRUPT_STREAM and ei.value.salvageable
    assert str(corrupt) in str(ei.value)


def test_file_level_kinds_and_what_salvage_can_do(tmp_path):
    with pytest.raises(InputError) as ei:
        TraceReader(tmp_path / "missing.json")
    assert ei.value.kind is ErrorKind.MISSING and not ei.value.salvageable
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    scalar = tmp_path / "scalar.json"
    scalar.write_bytes(b"42")
    for p, kind in ((empty, ErrorKind.EMPTY), (scalar, ErrorKind.NOT_A_TRACE)):
        for salvage in (False, True):  # nothing a salvage pass could keep
            with pytest.raises(InputError) as ei:
                merge([str(p)], str(tmp_path / "o.json"), salvage=salvage)
            assert ei.value.kind is kind, (p, salvage)
    assert UsageError("x").kind is ErrorKind.USAGE and not UsageError("x").salvageable


def test_input_error_keeps_its_kind_through_pickling():
    # errors raised in worker processes travel back pickled
    e = InputError("f.json", "gzip stream ends early", offset=7, kind=ErrorKind.TRUNCATED, hint="h")
    back = pickle.loads(pickle.dumps(e))
    assert (back.kind, back.offset, str(back)) == (ErrorKind.TRUNCATED, 7, str(e))

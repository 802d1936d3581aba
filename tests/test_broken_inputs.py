"""Issue 4: broken and hostile inputs.

Strict mode must fail with ONE clear line (file, what, where, ``--salvage`` hint),
exit code 1, no traceback, nothing under the output name and no temporary file;
``--salvage`` must keep exactly the complete events before a cut, repair losslessly,
skip and count what cannot be parsed, record it per rank and exit 4.

Every broken input here is GENERATED from the real PyTorch traces in the shared
fixtures directory (truncated, corrupted, edited event by event); no trace is
hand-written. Expected numbers are computed independently of the engine, with
``json``/``zlib``/``zstandard`` on the original bytes.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import io
import json
import os
import re
import subprocess
import sys
import zlib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest
import zstandard
from conftest import json_text

from tracefuse_stream.cli.app import main as cli_main


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def real_traces(shared_fixtures: Path) -> Path:
    """The real traces beside the repository (conftest fails loudly without them)."""
    return shared_fixtures


def _ddp_by_rank(real_traces: Path) -> Dict[int, Path]:
    out = {}
    for f in sorted((real_traces / "ddp4_transformer_tb").glob("*.json.gz")):
        r = json.loads(gzip.decompress(f.read_bytes()))["distributedInfo"]["rank"]
        out[r] = f
    if sorted(out) != [0, 1, 2, 3]:
        pytest.fail(f"ddp4_transformer_tb should hold ranks 0-3, found {sorted(out)}", pytrace=False)
    return out


# --------------------------------------------------------------------------- independent JSON framing
_WS = re.compile(r"[ \t\r\n]*")
_DEC = json.JSONDecoder()


@dataclass
class Framing:
    """Byte spans of a trace's parts, found with ``json.JSONDecoder.raw_decode``."""

    layout: str  # "object" | "array"
    array_open: int  # index of the '[' of the event array
    spans: List[Tuple[int, int]]  # [start, end) of every element of the event array
    array_close: int  # index of the ']' closing the event array


def framing(data: bytes) -> Framing:
    text = data.decode("latin-1")  # 1 char == 1 byte: positions are byte offsets
    i = _WS.match(text, 0).end()
    if text[i] == "[":
        layout, arr = "array", i
    else:
        assert text[i] == "{"
        layout = "object"
        i += 1
        while True:
            i = _WS.match(text, i).end()
            key, i = _DEC.raw_decode(text, i)
            i = _WS.match(text, i).end()
            assert text[i] == ":"
            i = _WS.match(text, i + 1).end()
            if key == "traceEvents":
                arr = i
                assert text[i] == "["
                break
            _, i = _DEC.raw_decode(text, i)
            i = _WS.match(text, i).end()
            assert text[i] == ",", f"top-level object ended before traceEvents at {i}"
            i += 1
    spans = []
    i = arr + 1
    while True:
        i = _WS.match(text, i).end()
        if text[i] == "]":
            break
        start = i
        _, i = _DEC.raw_decode(text, i)
        spans.append((start, i))
        i = _WS.match(text, i).end()
        if text[i] == ",":
            i += 1
    return Framing(layout, arr, spans, i)


def parse_exact(data: bytes) -> Any:
    def bad(name: str) -> Any:
        raise ValueError(f"non-standard constant {name}")

    return json.loads(data, parse_float=Decimal, parse_constant=bad)


def subset_trace(data: bytes, keep: Sequence[int]) -> bytes:
    """The same file (header and trailer bytes untouched) with only events ``keep``."""
    fr = framing(data)
    parts = [data[s:e] for i, (s, e) in enumerate(fr.spans) if i in set(keep)]
    return data[: fr.array_open + 1] + b"\n  " + b",\n  ".join(parts) + b"\n  " + data[fr.array_close :]


def edit_events(data: bytes, edits: Dict[int, Callable[[Dict[str, Any]], Any]]) -> bytes:
    """Replace events by index: ``fn(event) -> dict`` (re-serialised exactly) or ``bytes``."""
    fr = framing(data)
    out = data
    for k in sorted(edits, reverse=True):
        s, e = fr.spans[k]
        ev = parse_exact(data[s:e])
        new = edits[k](ev)
        blob = new if isinstance(new, bytes) else json_text(new).encode()
        out = out[:s] + blob + out[e:]
    return out


def events_exact(data: bytes) -> List[Dict[str, Any]]:
    obj = parse_exact(data)
    return obj["traceEvents"] if isinstance(obj, dict) else obj


def kept_by_default(ev: Dict[str, Any]) -> bool:
    """The default selection rule: metadata regenerated, python_function dropped."""
    return ev.get("ph") != "M" and ev.get("cat") != "python_function"


def zstd_blocks(data: bytes, block: int = 8192) -> bytes:
    """zstd with a block flush every ``block`` bytes (so truncations decode partially)."""
    c = zstandard.ZstdCompressor(level=3).compressobj()
    out = [
        c.compress(data[i : i + block]) + c.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
        for i in range(0, len(data), block)
    ]
    out.append(c.flush())
    return b"".join(out)


def gunzip_prefix(raw: bytes) -> bytes:
    """Everything a decompressor can deliver from a (truncated) gzip file."""
    return zlib.decompressobj(31).decompress(raw)


def unzstd_prefix(raw: bytes) -> bytes:
    d = zstandard.ZstdDecompressor().decompressobj()
    try:
        return d.decompress(raw)
    except zstandard.ZstdError:
        return b""


# --------------------------------------------------------------------------- running
@dataclass
class Run:
    rc: int
    out: str
    err: str

    @property
    def line(self) -> str:
        lines = [ln for ln in self.err.splitlines() if ln.strip()]
        assert len(lines) == 1, f"expected ONE line on stderr, got {len(lines)}:\n{self.err}"
        return lines[0]


def cli(*args: Any) -> Run:
    """``tracefuse`` in-process (fast); a non-TraceFuse exception would be exit 70."""
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = cli_main([str(a) for a in args])
    return Run(rc, o.getvalue(), e.getvalue())


def run_subprocess(*args: Any, timeout: float = 120) -> Run:
    env = dict(os.environ)
    env.pop("TRACEFUSE_DEBUG", None)
    p = subprocess.run(
        [sys.executable, "-m", "tracefuse_stream", *map(str, args)],
        capture_output=True,
        timeout=timeout,
        env=env,
    )
    return Run(p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"))


def leftovers(d: Path) -> List[str]:
    return sorted(
        p.name
        for p in d.iterdir()
        if p.name.endswith(".tracefuse-tmp") or p.name.startswith(".tracefuse-frag-")
    )


def merge(tmp: Path, inputs: Sequence[Any], *extra: Any, out_name: str = "merged.json") -> Tuple[Run, Path]:
    outdir = tmp / "out"
    outdir.mkdir(exist_ok=True)
    out = outdir / out_name
    if out.exists():
        out.unlink()
    r = cli("merge", *inputs, "-o", out, "-q", "-j", "1", *extra)
    return r, out


_WHERE = re.compile(r"\(at (event #\d+(, byte \d+)?|byte \d+)\)")


def assert_failed(
    r: Run,
    out: Path,
    path: Any,
    *,
    code: int = 1,
    where: bool = True,
    hint: bool = False,
    what: Optional[str] = None,
) -> str:
    assert r.rc == code, f"exit code {r.rc}, expected {code}; stderr: {r.err}"
    line = r.line
    assert line.startswith("tracefuse: error: "), line
    assert "Traceback" not in r.err
    assert str(path) in line, f"the message does not name {path}: {line}"
    msg = line.replace(str(path), "<FILE>")  # temp paths contain test names
    if where:
        assert _WHERE.search(msg), f"the message does not say where (event #N / byte B): {line}"
    if hint:
        assert "--salvage" in msg, f"the message has no --salvage hint: {line}"
    if what:
        assert re.search(what, msg, re.I), f"{what!r} not in: {line}"
    assert not out.exists(), "a file was left under the output name after a failure"
    assert not leftovers(out.parent), f"temporary files left: {leftovers(out.parent)}"
    return line


def load_out(out: Path) -> Dict[str, Any]:
    raw = out.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    obj = parse_exact(raw)  # strict JSON: NaN/Infinity or raw control chars would raise
    assert isinstance(obj, dict)
    return obj


def rank_events(out: Dict[str, Any], rank: int) -> List[Dict[str, Any]]:
    """The rank's events, with the ts the input had (the output base sits just before
    the first event: every ts moves by the rank's exact shift_ns, undone here)."""
    shift = Decimal(out["tracefuse"]["ranks"][str(rank)]["shift_ns"]).scaleb(-3)
    evs = [e for e in out["traceEvents"] if e["args"]["rank"] == rank and e.get("ph") != "M"]
    return [dict(e, ts=e["ts"] - shift) if shift and "ts" in e else e for e in evs]


def sig(ev: Dict[str, Any]) -> Tuple[Any, ...]:
    """What identifies an event through the rewrite (ts as in the input)."""
    return (ev.get("ph"), ev.get("cat"), ev.get("name"), ev.get("ts"), ev.get("dur"))


# --------------------------------------------------------------------------- generated inputs
@pytest.fixture(scope="session")
def ddp_raw(real_traces: Path) -> Dict[int, bytes]:
    return {r: gzip.decompress(p.read_bytes()) for r, p in _ddp_by_rank(real_traces).items()}


@pytest.fixture(scope="session")
def small(ddp_raw: Dict[int, bytes]) -> Dict[int, bytes]:
    """Per rank: the real file, header and trailer bytes untouched, with ~360 of its
    events (the first 250 with their metadata and fwdbwd "s" events, a block with the
    matching "f" events and python_function events, and the last 6 events: the
    "Spans", "Traces" and "" string pids)."""
    out = {}
    for r, data in ddp_raw.items():
        n = len(framing(data).spans)
        keep = list(range(250)) + list(range(950, 1050)) + list(range(n - 6, n))
        out[r] = subset_trace(data, keep)
        json.loads(out[r])  # still valid
    return out


@pytest.fixture(scope="session")
def mini_raw(real_traces: Path) -> bytes:
    """mi250_minitoy: baseTimeNanoseconds AFTER traceEvents (old Kineto layout)."""
    return gzip.decompress((real_traces / "real" / "mi250_minitoy.json.gz").read_bytes())


def expected_after_cut(full: bytes, cut: int) -> Tuple[int, List[Dict[str, Any]]]:
    """(number of events complete in full[:cut], the kept non-metadata ones)."""
    fr = framing(full)
    evs = events_exact(full)
    n = sum(1 for s, e in fr.spans if e <= cut)
    return n, [e for e in evs[:n] if kept_by_default(e)]


def check_truncation(tmp: Path, path: Path, full: bytes, cut: int, *, compressed: bool) -> None:
    """Strict must fail cleanly; --salvage must keep exactly the complete events."""
    fr = framing(full)
    json_complete = False
    try:
        json.loads(full[:cut])
        json_complete = True
    except ValueError:
        pass
    # a plain file cut only in its trailing whitespace is intact; a compressed file
    # cut inside its container trailer has all the JSON but a broken stream
    prefix_complete = json_complete and not compressed
    r, out = merge(tmp, [path])
    if prefix_complete:
        assert r.rc == 0, r.err
    else:
        assert_failed(r, out, path, where=True)
    r, out = merge(tmp, [path], "--salvage")
    if cut <= fr.array_open:  # the event array never started: nothing to salvage
        assert_failed(r, out, path, where=False, what="salvage")
        return
    if prefix_complete:
        assert r.rc == 0, r.err
        return
    assert r.rc == 4, f"--salvage exit code {r.rc}: {r.err}"
    assert not leftovers(out.parent)
    n_complete, exp = expected_after_cut(full, cut)
    o = load_out(out)
    got = rank_events(o, 0)
    assert len(got) == len(exp), (
        f"cut at byte {cut}: {len(got)} events salvaged, {len(exp)} complete kept events before the cut"
    )
    assert [sig(e) for e in got] == [sig(e) for e in exp]
    rh = o["tracefuse"]["ranks"]["0"]
    assert rh["events_in"] == n_complete
    s = rh["salvage"]
    assert s is not None, "the rank header does not record the salvage"
    if json_complete:  # only the compressed stream is cut
        assert s["stream_error"], s
    else:
        assert s["truncated_at_byte"] == cut, f"truncated_at_byte {s['truncated_at_byte']} != {cut}"
    assert s["events_skipped"] == 0


# --------------------------------------------------------------------------- 1. truncation
N_SPREAD = 30


@pytest.mark.parametrize("i", range(N_SPREAD))
def test_truncated_plain_spread(tmp_path, small, i):
    full = small[0]
    cut = int(len(full) * (i + 0.5) / N_SPREAD)
    p = tmp_path / "rank0.json"
    p.write_bytes(full[:cut])
    check_truncation(tmp_path, p, full, cut, compressed=False)


def _targeted_cuts(full: bytes) -> Dict[str, int]:
    fr = framing(full)
    text = full.decode("latin-1")
    s10, e10 = fr.spans[10]
    name_at = text.index('"name"', s10, e10)
    name_at = text.index('"', name_at + 6) + 3  # 3 characters into the name's value
    s20, e20 = fr.spans[20]
    ts_at = text.index('"ts"', s20, e20)
    ts_at = re.compile(r"\d").search(text, ts_at).start() + 5  # inside the digits
    assert text[ts_at - 1].isdigit() and text[ts_at].isdigit()
    s30, e30 = fr.spans[30]
    assert text[e30] == ","
    s40, e40 = fr.spans[40]
    args_at = text.index('"args"', s40, e40)
    return {
        "in_header": text.index('"distributedInfo"') + 25,
        "before_array_open": fr.array_open,
        "after_array_open": fr.array_open + 1,
        "in_first_event": fr.spans[0][0] + 5,
        "in_string": name_at,
        "in_number": ts_at,
        "after_event_brace": e30,
        "after_comma": e30 + 1,
        "before_next_event": fr.spans[31][0],
        "inside_args_object": text.index("{", args_at) + 2,
        "after_last_event": fr.spans[-1][1],
        "after_array_close": fr.array_close + 1,
        "in_trailer": fr.array_close + 8,
        "missing_final_brace": text.rindex("}"),
    }


TARGETS = [
    "in_header",
    "before_array_open",
    "after_array_open",
    "in_first_event",
    "in_string",
    "in_number",
    "after_event_brace",
    "after_comma",
    "before_next_event",
    "inside_args_object",
    "after_last_event",
    "after_array_close",
    "in_trailer",
    "missing_final_brace",
]


@pytest.mark.parametrize("where", TARGETS)
def test_truncated_plain_targeted(tmp_path, small, where):
    full = small[0]
    cut = _targeted_cuts(full)[where]
    p = tmp_path / "rank0.json"
    p.write_bytes(full[:cut])
    check_truncation(tmp_path, p, full, cut, compressed=False)


N_GZ = 12


@pytest.mark.parametrize("i", range(N_GZ))
def test_truncated_gzip_stream(tmp_path, small, i):
    full = small[0]
    comp = gzip.compress(full, 6, mtime=0)
    # offset 5 is inside the gzip header, the last one inside the CRC/size trailer
    k = 5 if i == 0 else (len(comp) - 3 if i == N_GZ - 1 else int(len(comp) * i / N_GZ))
    p = tmp_path / "rank0.json.gz"
    p.write_bytes(comp[:k])
    cut = len(gunzip_prefix(comp[:k]))
    check_truncation(tmp_path, p, full, cut, compressed=True)


@pytest.mark.parametrize("frac", [0.1, 0.45, 0.8, 0.999])
def test_truncated_zstd_stream(tmp_path, small, frac):
    full = small[0]
    comp = zstd_blocks(full)
    k = int(len(comp) * frac)
    p = tmp_path / "rank0.json.zst"
    p.write_bytes(comp[:k])
    cut = len(unzstd_prefix(comp[:k]))
    check_truncation(tmp_path, p, full, cut, compressed=True)


@pytest.mark.parametrize("frac", [0.3, 0.6, 0.97])
def test_truncated_base_after_events_layout(tmp_path, mini_raw, frac):
    """Old Kineto layout (base after the events): the base is lost with the end.
    Salvage keeps exactly the complete events and notes the missing base."""
    full = mini_raw
    fr = framing(full)
    cut = int(fr.array_close * frac)
    p = tmp_path / "mi250.json"
    p.write_bytes(full[:cut])
    r, out = merge(tmp_path, [p])
    assert_failed(r, out, p, where=False)  # "where" is checked in test_strict_messages_say_where_and_hint
    r, out = merge(tmp_path, [p], "--salvage")
    assert r.rc == 4, r.err
    n_complete, exp = expected_after_cut(full, cut)
    o = load_out(out)
    got = rank_events(o, 0)
    assert [sig(e) for e in got] == [sig(e) for e in exp]
    rh = o["tracefuse"]["ranks"]["0"]
    assert rh["events_in"] == n_complete
    assert rh["salvage"]["truncated_at_byte"] == cut
    assert any("baseTimeNanoseconds" in n for n in rh["salvage"]["plan_notes"]), rh["salvage"]


# --------------------------------------------------------------------------- strict messages
def _broken_cases(small: Dict[int, bytes], mini: bytes) -> Dict[str, Tuple[str, bytes]]:
    full = small[0]
    fr = framing(full)
    mid = fr.spans[len(fr.spans) // 2][0] + 7
    comp = gzip.compress(full, 6, mtime=0)
    zc = zstd_blocks(full)
    k = fr.spans[15]
    name_at = full.index(b'"name": "', k[0]) + 12
    return {
        "truncated_plain": ("a.json", full[:mid]),
        "truncated_base_after_events": ("b.json", mini[: len(mini) // 2]),
        "truncated_gzip": ("c.json.gz", comp[: len(comp) // 2]),
        "truncated_zstd": ("d.json.zst", zc[: len(zc) // 2]),
        "corrupt_zstd": ("e.json.zst", _flip(zc, len(zc) // 2, 8)),
        "raw_control_char": ("f.json", full[:name_at] + b"\x01" + full[name_at:]),
        "invalid_utf8": ("g.json", full[:name_at] + b"\xff" + full[name_at:]),
        "nan": ("h.json", full[: name_at - 12] + b'"nan": NaN, ' + full[name_at - 12 :]),
    }


def _flip(data: bytes, at: int, n: int) -> bytes:
    b = bytearray(data)
    for j in range(at, at + n):
        b[j] ^= 0xA5
    return bytes(b)


CASES = [
    "truncated_plain",
    "truncated_base_after_events",
    "truncated_gzip",
    "truncated_zstd",
    "corrupt_zstd",
    "raw_control_char",
    "invalid_utf8",
    "nan",
]


@pytest.mark.parametrize("case", CASES)
def test_strict_messages_say_where_and_hint(tmp_path, small, mini_raw, case):
    """Strict mode on a broken trace: exit 1, ONE line naming the file, what is wrong,
    where (event index or byte offset) and the --salvage hint; nothing left behind;
    and --salvage then merges it."""
    name, data = _broken_cases(small, mini_raw)[case]
    p = tmp_path / name
    p.write_bytes(data)
    r, out = merge(tmp_path, [p])
    assert_failed(r, out, p, where=True, hint=True)
    r, out = merge(tmp_path, [p], "--salvage")
    assert r.rc == 4, r.err
    load_out(out)


@pytest.mark.parametrize("case", ["truncated_gzip", "corrupt_zstd", "nan"])
def test_strict_failure_in_a_subprocess_has_no_traceback(tmp_path, small, mini_raw, case):
    name, data = _broken_cases(small, mini_raw)[case]
    p = tmp_path / name
    p.write_bytes(data)
    out = tmp_path / "o" / "m.json.gz"
    out.parent.mkdir()
    r = run_subprocess("merge", p, "-o", out)
    assert r.rc == 1, r.err
    assert "Traceback" not in r.err
    assert r.line.startswith("tracefuse: error: ") and str(p) in r.line
    assert not out.exists() and not leftovers(out.parent)


# --------------------------------------------------------------------------- salvage bookkeeping
def test_salvage_summary_and_headers_per_rank(tmp_path, small):
    """Two ranks, rank 1 truncated: exit 4; the text summary and --json-summary list
    the salvage on rank 1 only; each rank header records it (or null)."""
    p0 = tmp_path / "r0.json"
    p0.write_bytes(small[0])
    fr = framing(small[1])
    cut = fr.spans[200][0] + 30
    p1 = tmp_path / "r1.json"
    p1.write_bytes(small[1][:cut])
    out = tmp_path / "m.json.gz"
    r = cli("merge", p0, p1, "-o", out, "-j", "1", "--salvage")
    assert r.rc == 4, r.err
    lines = r.out.splitlines()
    row0 = [ln.replace(str(p0), "<FILE>") for ln in lines if ln.rstrip().endswith(str(p0))]
    row1 = [ln.replace(str(p1), "<FILE>") for ln in lines if str(p1) in ln]
    assert len(row0) == 1 and len(row1) == 1, r.out
    assert "salvage" not in row0[0]
    assert "salvaged" in row1[0] and f"truncated at byte {cut}" in row1[0], row1[0]
    o = load_out(out)
    assert o["tracefuse"]["ranks"]["0"]["salvage"] is None
    s1 = o["tracefuse"]["ranks"]["1"]["salvage"]
    assert s1["truncated_at_byte"] == cut and s1["events_skipped"] == 0
    _n, exp1 = expected_after_cut(small[1], cut)
    assert len(rank_events(o, 1)) == len(exp1)
    assert len(rank_events(o, 0)) == sum(1 for e in events_exact(small[0]) if kept_by_default(e))

    r = cli("merge", p0, p1, "-o", out, "-j", "1", "--salvage", "--force", "--json-summary")
    assert r.rc == 4, r.err
    js = json.loads(r.out)
    by_rank = {x["rank"]: x for x in js["ranks"]}
    assert by_rank[0]["salvage"] is None
    assert by_rank[1]["salvage"]["truncated_at_byte"] == cut


def test_salvage_on_intact_inputs_changes_nothing(tmp_path, real_traces):
    """--salvage on readable inputs: exit 0, no salvage recorded, byte-identical output."""
    files = [real_traces / "real" / "h100_bert_small.json.gz", real_traces / "real" / "mi250_minitoy.json.gz"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    r = cli("merge", *files, "-o", a, "-q", "-j", "1")
    assert r.rc == 0, r.err
    r = cli("merge", *files, "-o", b, "-q", "-j", "1", "--salvage")
    assert r.rc == 0, r.err
    assert a.read_bytes() == b.read_bytes()
    o = load_out(b)
    assert all(v["salvage"] is None for v in o["tracefuse"]["ranks"].values())


# --------------------------------------------------------------------------- repairs and skips
def _inject_in_name(full: bytes, k: int, blob: bytes) -> Tuple[bytes, str, str]:
    fr = framing(full)
    s, e = fr.spans[k]
    at = full.index(b'"name": "', s, e) + len(b'"name": "') + 3
    ev = parse_exact(full[s:e])
    return (
        full[:at] + blob + full[at:],
        ev["name"],
        ev["name"][:3] + blob.decode("utf-8", "replace") + ev["name"][3:],
    )


REPAIRS = {
    "raw_control_chars": b"\x01\x1f\t\n",
    "unescaped_quote": b'"x',
    "invalid_utf8": b"\xff\xfe",
    "invalid_utf8_truncated_sequence": b"\xe2\x82",
    "stray_backslash": b"\\q",
}


@pytest.mark.parametrize("kind", sorted(REPAIRS))
def test_repairs_are_lossless(tmp_path, small, kind):
    full = small[0]
    evs = events_exact(full)
    k = next(i for i, e in enumerate(evs) if i > 100 and e.get("ph") == "X" and len(e.get("name", "")) > 5)
    data, _orig, expected_name = _inject_in_name(full, k, REPAIRS[kind])
    p = tmp_path / "rank0.json"
    p.write_bytes(data)
    r, out = merge(tmp_path, [p])
    line = assert_failed(r, out, p, where=True, hint=True)
    assert f"event #{k}" in line, f"strict error should point at event #{k}: {line}"
    r, out = merge(tmp_path, [p], "--salvage")
    assert r.rc == 4, r.err
    o = load_out(out)
    got = rank_events(o, 0)
    exp = [e for e in evs if kept_by_default(e)]
    assert len(got) == len(exp)
    names = [e["name"] for e in got]
    exp_names = [expected_name if e is evs[k] else e["name"] for e in exp]
    assert names == exp_names
    s = o["tracefuse"]["ranks"]["0"]["salvage"]
    assert s["events_repaired"] == 1 and s["events_skipped"] == 0, s
    assert s["truncated_at_byte"] is None


def test_nan_and_infinity(tmp_path, small):
    """Strict: an error at the event. Salvage: NaN/Infinity/-Infinity -> null, counted."""
    full = small[0]
    evs = events_exact(full)
    k = next(
        i for i, e in enumerate(evs) if i > 100 and e.get("ph") == "X" and isinstance(e.get("args"), dict)
    )
    fr = framing(full)
    s, e = fr.spans[k]
    at = full.index(b'"args": {', s, e) + len(b'"args": {')
    data = full[:at] + b'"nan_v": NaN, "inf_v": Infinity, "ninf_v": -Infinity, ' + full[at:]
    p = tmp_path / "rank0.json"
    p.write_bytes(data)
    r, out = merge(tmp_path, [p])
    line = assert_failed(r, out, p, where=True, hint=True)
    assert f"event #{k}" in line, line
    r, out = merge(tmp_path, [p], "--salvage")
    assert r.rc == 4, r.err
    o = load_out(out)  # strict parse: no NaN survives
    got = rank_events(o, 0)
    assert len(got) == sum(1 for x in evs if kept_by_default(x))
    hit = [x for x in got if "nan_v" in x["args"]]
    assert len(hit) == 1
    assert (
        hit[0]["args"]["nan_v"] is None
        and hit[0]["args"]["inf_v"] is None
        and hit[0]["args"]["ninf_v"] is None
    )
    assert hit[0]["name"] == evs[k]["name"]
    sv = o["tracefuse"]["ranks"]["0"]["salvage"]
    assert sv["nonfinite_numbers_nulled"] == 3 and sv["events_repaired"] == 1, sv


def test_unparseable_event_is_skipped_and_counted(tmp_path, small):
    full = small[0]
    evs = events_exact(full)
    k = next(i for i, e in enumerate(evs) if i > 100 and e.get("ph") == "X")
    data = edit_events(full, {k: lambda ev: json_text(ev).replace('"ph": "X"', '"ph" "X"', 1).encode()})
    p = tmp_path / "rank0.json"
    p.write_bytes(data)
    r, out = merge(tmp_path, [p])
    line = assert_failed(r, out, p, where=True, hint=True)
    assert f"event #{k}" in line, line
    r, out = merge(tmp_path, [p], "--salvage")
    assert r.rc == 4, r.err
    o = load_out(out)
    exp = [e for i, e in enumerate(evs) if i != k and kept_by_default(e)]
    assert [sig(e) for e in rank_events(o, 0)] == [sig(e) for e in exp]
    sv = o["tracefuse"]["ranks"]["0"]["salvage"]
    assert sv["events_skipped"] == 1 and sv["events_repaired"] == 0, sv
    assert sv["examples"], "skipped events should come with an example"


# --------------------------------------------------------------------------- corrupt streams
def _check_corrupt_salvage(tmp_path: Path, p: Path, full: bytes, good_prefix: bytes) -> None:
    """Salvage keeps at least every event complete in the bytes that decode before the
    damage, unchanged and in order, and records the stream error."""
    r, out = merge(tmp_path, [p], "--salvage")
    assert r.rc == 4, r.err
    o = load_out(out)
    _n, lower = expected_after_cut(full, len(good_prefix))
    got = rank_events(o, 0)
    assert len(got) >= len(lower), (
        f"salvage kept {len(got)} events; {len(lower)} complete events decode before the damage "
        f"({len(good_prefix)} of {len(full)} bytes)"
    )
    assert [sig(e) for e in got[: len(lower)]] == [sig(e) for e in lower]
    sv = o["tracefuse"]["ranks"]["0"]["salvage"]
    assert sv and sv["stream_error"], sv


@pytest.mark.parametrize("frac", [0.3, 0.7])
def test_corrupt_gzip(tmp_path, small, frac):
    full = small[0]
    comp = gzip.compress(full, 6, mtime=0)
    at = int(len(comp) * frac)
    p = tmp_path / "rank0.json.gz"
    p.write_bytes(_flip(comp, at, 4))
    r, out = merge(tmp_path, [p])
    assert_failed(r, out, p, where=True)
    _check_corrupt_salvage(tmp_path, p, full, gunzip_prefix(comp[:at]))


@pytest.mark.parametrize("frac", [0.3, 0.7])
def test_corrupt_zstd(tmp_path, small, frac):
    full = small[0]
    comp = zstd_blocks(full)
    at = int(len(comp) * frac)
    p = tmp_path / "rank0.json.zst"
    p.write_bytes(_flip(comp, at, 8))
    r, out = merge(tmp_path, [p])
    assert_failed(r, out, p, where=True)
    _check_corrupt_salvage(tmp_path, p, full, unzstd_prefix(comp[:at]))


# --------------------------------------------------------------------------- not traces at all
@pytest.mark.parametrize("kind", ["plain", "gzip", "zstd"])
def test_empty_input(tmp_path, kind):
    name, data = {
        "plain": ("empty.json", b""),
        "gzip": ("empty.json.gz", gzip.compress(b"", mtime=0)),
        "zstd": ("empty.json.zst", zstandard.ZstdCompressor().compress(b"")),
    }[kind]
    p = tmp_path / name
    p.write_bytes(data)
    for extra in ((), ("--salvage",)):
        r, out = merge(tmp_path, [p], *extra)
        assert_failed(r, out, p, where=False, what="empty")


@pytest.mark.parametrize("kind", ["base64_text", "raw_deflate_binary"])
def test_non_json_input(tmp_path, small, kind):
    if kind == "base64_text":
        data = base64.encodebytes(small[0])
    else:
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        data = c.compress(small[0]) + c.flush()
    p = tmp_path / "rank0.json"
    p.write_bytes(data)
    r, out = merge(tmp_path, [p])
    line = assert_failed(r, out, p, where=False, what="not JSON")
    assert "(at byte 0)" in line, f"the first byte is already wrong: {line}"
    r, out = merge(tmp_path, [p], "--salvage")
    assert_failed(r, out, p, where=False)


def test_json_that_is_not_a_trace(tmp_path, small):
    hdr = parse_exact(small[0])
    hdr.pop("traceEvents")
    cases = {
        "no_trace_events.json": (json_text(hdr).encode(), "not a trace.*traceEvents"),
        "scalar.json": (json.dumps(hdr["distributedInfo"]["backend"]).encode(), "not a trace"),
        "events_not_array.json": (
            json_text({**hdr, "traceEvents": {"ph": "X"}}).encode(),
            "traceEvents is not an array",
        ),
    }
    for name, (data, what) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        r, out = merge(tmp_path, [p])
        assert_failed(r, out, p, where=False, what=what)
        r, out = merge(tmp_path, [p], "--salvage")
        assert_failed(r, out, p, where=False)


def _bare_array(full: bytes) -> bytes:
    fr = framing(full)
    return b"[\n" + b",\n".join(full[s:e] for s, e in fr.spans) + b"\n]\n"


def test_bare_event_array_is_accepted(tmp_path, small):
    data = _bare_array(small[0])
    p = tmp_path / "events.json"
    p.write_bytes(data)
    r, out = merge(tmp_path, [p])
    assert r.rc == 0, r.err
    o = load_out(out)
    exp = [e for e in events_exact(small[0]) if kept_by_default(e)]
    assert [sig(e) for e in rank_events(o, 0)] == [sig(e) for e in exp]


def test_bare_event_array_without_closing_bracket_is_a_valid_trace(tmp_path, small):
    """The Trace Event Format makes the final ']' of the array form optional (Perfetto
    and chrome://tracing load such files): nothing is lost, so strict mode accepts it."""
    data = _bare_array(small[0]).rstrip()[:-1]
    p = tmp_path / "events.json"
    p.write_bytes(data)
    r, out = merge(tmp_path, [p])
    assert r.rc == 0, f"exit {r.rc}: {r.err}"
    o = load_out(out)
    exp = [e for e in events_exact(small[0]) if kept_by_default(e)]
    assert [sig(e) for e in rank_events(o, 0)] == [sig(e) for e in exp]


@pytest.mark.parametrize("frac", [0.05, 0.5, 0.93])
def test_bare_event_array_truncated(tmp_path, small, frac):
    full = _bare_array(small[0])
    cut = int(len(full) * frac)
    p = tmp_path / "events.json"
    p.write_bytes(full[:cut])
    check_truncation(tmp_path, p, full, cut, compressed=False)


# --------------------------------------------------------------------------- odd values
BIG_INTS = {
    "just_above_int64": 2**63,
    "uint64_max": 2**64 - 1,
    "above_uint64": 2**64,
    "huge": 123456789012345678901234567890123,
    "below_int64": -(2**63) - 1,
}


@pytest.mark.parametrize("ext", [".json", ".json.gz"])
def test_integers_beyond_int64_and_uint64_merge_strictly(tmp_path, small, ext):
    """Strict mode; every digit kept (checked in the output text and by value)."""
    full = small[1]
    evs = events_exact(full)
    ks = [i for i, e in enumerate(evs) if e.get("ph") == "X" and isinstance(e.get("args"), dict)][:3]

    def add(ev: Dict[str, Any]) -> Dict[str, Any]:
        ev["args"].update(BIG_INTS)
        ev["args"]["Comms Id"] = 2**64 - 12345
        ev["args"]["big_list"] = [2**64 - 1, 2**128, -(2**70)]
        return ev

    data = edit_events(full, {k: add for k in ks})
    p0, p1 = tmp_path / "r0.json", tmp_path / "r1.json"
    p0.write_bytes(small[0])
    p1.write_bytes(data)
    r, out = merge(tmp_path, [p0, p1], out_name="m" + ext)
    assert r.rc == 0, r.err
    raw = out.read_bytes()
    text = (gzip.decompress(raw) if ext.endswith(".gz") else raw).decode()
    for v in list(BIG_INTS.values()) + [2**64 - 12345, 2**128, -(2**70)]:
        assert text.count(str(v)) >= len(ks), f"{v} lost its digits"
    o = load_out(out)
    hits = [e for e in rank_events(o, 1) if "above_uint64" in e["args"]]
    assert len(hits) == len(ks)
    for e in hits:
        for key, v in BIG_INTS.items():
            assert e["args"][key] == v and type(e["args"][key]) is int
        assert e["args"]["Comms Id"] == 2**64 - 12345
        assert e["args"]["big_list"] == [2**64 - 1, 2**128, -(2**70)]


def test_events_missing_pid_tid_ts(tmp_path, small):
    full = small[0]
    evs = events_exact(full)
    xs = [i for i, e in enumerate(evs) if e.get("ph") == "X" and isinstance(e.get("args"), dict)]
    drops = {xs[5]: "pid", xs[6]: "tid", xs[7]: "ts", xs[8]: ("pid", "tid", "ts")}

    def dropper(keys: Any, tag: str) -> Callable[[Dict[str, Any]], Dict[str, Any]]:
        def f(ev: Dict[str, Any]) -> Dict[str, Any]:
            for key in keys if isinstance(keys, tuple) else (keys,):
                ev.pop(key)
            ev["args"]["tf_marker"] = tag
            return ev

        return f

    data = edit_events(full, {k: dropper(v, f"m{k}") for k, v in drops.items()})
    p = tmp_path / "rank0.json"
    p.write_bytes(data)
    r, out = merge(tmp_path, [p])
    assert r.rc == 0, r.err
    o = load_out(out)
    got = rank_events(o, 0)
    assert len(got) == sum(1 for e in evs if kept_by_default(e))
    for e in o["traceEvents"]:
        assert type(e["pid"]) is int and 10000 <= e["pid"] < 20000, e
        if "tid" in e:
            assert type(e["tid"]) is int and 0 <= e["tid"] < 2**32, e
    marked = {e["args"]["tf_marker"]: e for e in got if "tf_marker" in e["args"]}
    assert sorted(marked) == sorted(f"m{k}" for k in drops)
    assert "ts" not in marked[f"m{xs[7]}"] or marked[f"m{xs[7]}"]["ts"] is None


def test_negative_and_huge_pids_and_tids(tmp_path, small):
    full = small[0]
    evs = events_exact(full)
    xs = [i for i, e in enumerate(evs) if e.get("ph") == "X" and isinstance(e.get("args"), dict)][10:]
    pids = [-5, -1, 2**31, 2**40, 2**70, -(2**70), "6583", 4999, 5000]
    tids = [-3, -(2**31), 2**32, 2**40, 2**70, "main", -(2**32)]
    edits = {}
    for j, v in enumerate(pids):
        edits[xs[j]] = (lambda v, j: lambda ev: {**ev, "pid": v, "args": {**ev["args"], "tf_pid": j}})(v, j)
    for j, v in enumerate(tids):
        edits[xs[len(pids) + j]] = (
            lambda v, j: lambda ev: {**ev, "tid": v, "args": {**ev["args"], "tf_tid": j}}
        )(v, j)
    data = edit_events(full, edits)
    p = tmp_path / "rank0.json"
    p.write_bytes(data)
    # the same trace twice (two files: one file given twice is refused): rank 0 and
    # rank 1 must not share any output pid
    p2 = tmp_path / "rank0_copy.json"
    p2.write_bytes(data)
    r, out = merge(tmp_path, [p, p2], "--rank-from", "order")
    assert r.rc == 0, r.err
    o = load_out(out)
    pid_rank: Dict[int, int] = {}
    for e in o["traceEvents"]:
        pid, rank = e["pid"], e["args"]["rank"]
        assert type(pid) is int and 1 <= pid <= 2**31 - 1, pid
        assert pid // 10000 - 1 == rank
        assert pid_rank.setdefault(pid, rank) == rank
        if "tid" in e:
            assert type(e["tid"]) is int and 0 <= e["tid"] < 2**32, e
    for rank in (0, 1):
        got = rank_events(o, rank)
        assert len(got) == sum(1 for e in evs if kept_by_default(e))
        by_pid = {e["args"]["tf_pid"]: e["pid"] for e in got if "tf_pid" in e["args"]}
        assert sorted(by_pid) == list(range(len(pids)))
        cpu_pid = next(e["pid"] for e in got if "tf_pid" not in e["args"] and e.get("cat") == "cpu_op")
        outs = list(by_pid.values()) + [cpu_pid]
        assert len(set(outs)) == len(outs), f"distinct original pids share an output pid: {by_pid}"
        assert by_pid[pids.index(4999)] == (rank + 1) * 10000 + 4999
        header_pids = o["tracefuse"]["ranks"][str(rank)]["pids"]
        for j, v in enumerate(pids):
            assert [v, by_pid[j]] in header_pids, f"header pid map lacks {v!r}"
        by_tid = {e["args"]["tf_tid"]: e for e in got if "tf_tid" in e["args"]}
        assert by_tid[0]["tid"] == 3 and by_tid[1]["tid"] == 2**31
        names = {
            (m["pid"], m.get("tid")): m["args"]["name"]
            for m in o["traceEvents"]
            if m.get("ph") == "M" and m.get("name") == "thread_name" and m["args"]["rank"] == rank
        }
        for j in (2, 3, 4, 5, 6):
            e = by_tid[j]
            assert 1_000_000_000 <= e["tid"] < 2**32
            assert str(tids[j]) in names.get((e["pid"], e["tid"]), ""), (
                f"synthetic tid {e['tid']} for {tids[j]!r} has no thread_name with the original"
            )


def _flow_pairs(evs: List[Dict[str, Any]]) -> List[Tuple[int, int, int]]:
    """(id, index of s, index of f) for complete s/f pairs with id >= 10."""
    s_at: Dict[Any, int] = {}
    out = []
    for i, e in enumerate(evs):
        if e.get("ph") == "s":
            s_at[(e["cat"], e["id"])] = i
        elif e.get("ph") == "f" and (e["cat"], e["id"]) in s_at and e["id"] >= 10:
            out.append((e["id"], s_at[(e["cat"], e["id"])], i))
    return out


def test_hex_string_and_integral_float_flow_ids(tmp_path, small):
    full = small[0]
    evs = events_exact(full)
    pairs = _flow_pairs(evs)
    assert len(pairs) >= 4, "the generated input should hold complete fwdbwd pairs"
    forms: Dict[int, Callable[[int], Any]] = {
        0: lambda i: format(i, "x"),  # "1a" is 26 (Perfetto parses string ids as hex)
        1: lambda i: "0x%x" % i,
        2: lambda i: Decimal(f"{i}.0"),  # integral float
        3: lambda i: Decimal(f"{i}.000"),
    }
    edits = {}
    for j, f in forms.items():
        fid, si, fi = pairs[j]
        for k in (si, fi):
            edits[k] = (lambda f, fid: lambda ev: {**ev, "id": f(fid)})(f, fid)
    p = tmp_path / "rank0.json"
    p.write_bytes(edit_events(full, edits))
    p2 = tmp_path / "rank0_copy.json"  # one file given twice is refused: a copy
    p2.write_bytes(p.read_bytes())
    r, out = merge(tmp_path, [p, p2], "--rank-from", "order")
    assert r.rc == 0, r.err
    o = load_out(out)
    for rank in (0, 1):
        got = rank_events(o, rank)
        exp = [e for e in evs if kept_by_default(e)]
        assert len(got) == len(exp)
        for g, e in zip(got, exp):
            if "id" in e:
                assert type(g["id"]) is int and g["id"] == (rank << 32) + int(e["id"]), (g, e)
    keys: Dict[Any, set] = {}
    for e in o["traceEvents"]:
        if e.get("ph") in ("s", "t", "f"):
            keys.setdefault((e["cat"], e["name"], e["id"]), set()).add(e["args"]["rank"])
    assert all(len(v) == 1 for v in keys.values())


def test_non_integral_float_flow_id(tmp_path, small):
    full = small[0]
    evs = events_exact(full)
    fid, si, fi = _flow_pairs(evs)[0]
    p = tmp_path / "rank0.json"
    p.write_bytes(edit_events(full, {si: lambda ev: {**ev, "id": Decimal(f"{fid}.5")}}))
    r, out = merge(tmp_path, [p])
    line = assert_failed(r, out, p, where=True, hint=True)
    assert f"event #{si}" in line, line
    r, out = merge(tmp_path, [p], "--salvage")
    assert r.rc == 4, r.err
    o = load_out(out)
    exp = [e for i, e in enumerate(evs) if i != si and kept_by_default(e)]
    assert [sig(e) for e in rank_events(o, 0)] == [sig(e) for e in exp]
    sv = o["tracefuse"]["ranks"]["0"]["salvage"]
    assert sv["events_skipped"] == 1, sv


# --------------------------------------------------------------------------- paths, ranks, world size
def test_missing_file_and_directories(tmp_path, small):
    good = tmp_path / "good.json"
    good.write_bytes(small[0])
    missing = tmp_path / "nope" / "rank9.json.gz"
    r, out = merge(tmp_path, [good, missing])
    assert_failed(r, out, missing, where=False, what="no such file")
    empty_dir = tmp_path / "empty_run"
    empty_dir.mkdir()
    (empty_dir / "notes.txt").write_text("not a trace")
    (empty_dir / "sub.json").mkdir()  # a directory with a trace-like name is not a trace
    r, out = merge(tmp_path, [good, empty_dir])
    assert_failed(r, out, empty_dir, where=False, what="no .*trace")
    for extra in ((), ("--salvage",)):
        r, out = merge(tmp_path, [missing], *extra)
        assert_failed(r, out, missing, where=False)


def test_directory_in_a_rank_mapping_is_an_input_error(tmp_path, small):
    from tracefuse_stream import merge as api_merge
    from tracefuse_stream.errors import InputError

    good = tmp_path / "good.json"
    good.write_bytes(small[0])
    d = tmp_path / "adir.json"
    d.mkdir()
    out = tmp_path / "o" / "m.json"
    out.parent.mkdir()
    with pytest.raises(InputError) as ei:
        api_merge({0: good, 1: d}, str(out), jobs=1)
    assert str(d) in str(ei.value)
    assert not out.exists() and not leftovers(out.parent)


def test_duplicate_ranks(tmp_path, small):
    # two recordings that both say rank 0 (b: rank 1's file, its distributedInfo.rank
    # set to 0; it starts at another instant, so it is no copy: plan/copies.py)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_bytes(small[0])
    assert small[1].count(b'"rank": 1,') == 1
    b.write_bytes(small[1].replace(b'"rank": 1,', b'"rank": 0,'))
    r, out = merge(tmp_path, [a, b])
    line = assert_failed(r, out, a, code=2, where=False, what="--rank-from order")
    assert str(b) in line and "rank 0 appears twice" in line
    # a's events and one more byte of white space: another file, the same recording
    b.write_bytes(small[0] + b"\n")
    r, out = merge(tmp_path, [a, b])
    line = assert_failed(r, out, a, code=2, where=False, what="hold rank 0's recording from the same instant")
    assert str(b) in line and "appears twice" not in line
    r, out = merge(tmp_path, [a, b], "--rank-from", "order")
    assert r.rc == 0, r.err
    assert sorted(load_out(out)["tracefuse"]["ranks"]) == ["0", "1"]


def test_a_copy_of_a_trace_is_not_a_second_rank_or_cycle(tmp_path, small):
    """A byte-for-byte copy (``cp``, a second download) in the inputs: the same rank at
    the same times. Without the check it was planned as a second profiling cycle
    (``--cycle 1`` merged the copy with half of the ranks)."""
    run = tmp_path / "run"
    run.mkdir()
    for i, data in enumerate([small[0], small[1], small[2]]):
        (run / f"rank{i}.json").write_bytes(data)
    copy = run / "rank1 (1).json"
    copy.write_bytes(small[1])
    r, out = merge(tmp_path, [run])
    line = assert_failed(r, out, run / "rank1.json", code=2, where=False, what="same bytes")
    assert str(copy) in line and "--rank-from order" in line
    assert "cycle" not in line and "appears twice" not in line  # not the cycle or rank advice
    # given on purpose as separate ranks: merged, with a warning naming both
    r = cli("merge", run, "-o", tmp_path / "o.json", "-j", "1", "--rank-from", "order", "--json-summary")
    assert r.rc == 0, r.err
    summary = json.loads(r.out)
    assert [(x["rank"], Path(x["path"]).name) for x in summary["ranks"]] == [
        (0, "rank0.json"), (1, "rank1 (1).json"), (2, "rank1.json"), (3, "rank2.json")]  # fmt: skip
    assert [w for w in summary["warnings"] if "same bytes" in w] == [
        f"{run / 'rank1 (1).json'} and {run / 'rank1.json'} hold the same bytes: merged as two ranks, "
        "numbered by --rank-from order"
    ]
    # info shows the run without the copy (the first by position is kept: natural order
    # puts "rank1 (1).json" first), and says which file it left out (exit 0)
    r = cli("info", run, "--json")
    assert r.rc == 0, r.err
    assert [Path(x["path"]).name for x in json.loads(r.out)["ranks"]] == [
        "rank0.json", "rank1 (1).json", "rank2.json"]  # fmt: skip
    r = cli("info", run)
    assert r.rc == 0, r.err
    assert (
        f"warning: {run / 'rank1.json'} left out: it and {copy} hold the same bytes (one trace twice)"
        in r.out
    )


def test_copies_are_found_whatever_the_compression_and_only_when_identical(tmp_path, small):
    run = tmp_path / "run"
    run.mkdir()
    for i, data in enumerate([small[0], small[1]]):
        (run / f"rank{i}.json.gz").write_bytes(gzip.compress(data, mtime=0))
    (run / "again.json.gz").write_bytes(gzip.compress(small[0], mtime=0))  # the same bytes
    r, out = merge(tmp_path, [run])
    assert r.rc == 2 and "again.json.gz and" in r.err and "rank0.json.gz hold the same bytes" in r.err, r.err
    # the same events compressed at another level, or not at all (gunzip -k): other
    # bytes, the same recording of rank 0 (it starts at the same instant), not a cycle
    for name, data in (("again.json.gz", gzip.compress(small[0], compresslevel=1, mtime=0)),
                       ("again.json", small[0])):  # fmt: skip
        (run / "again.json.gz").unlink(missing_ok=True)
        (run / name).write_bytes(data)
        r, out = merge(tmp_path, [run])
        assert r.rc == 2 and "same bytes" not in r.err and "cycle" not in r.err, r.err
        assert (
            f"{run / name} and {run / 'rank0.json.gz'} hold rank 0's recording from the same instant" in r.err
        )
    # the two ranks alone are no copies of each other
    r, out = merge(tmp_path, [run / "rank0.json.gz", run / "rank1.json.gz"])
    assert r.rc == 0, r.err


def test_copies_given_as_explicit_ranks_merge_with_a_warning(tmp_path, small):
    from tracefuse_stream import merge as api_merge

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_bytes(small[0])
    b.write_bytes(small[0])
    s = api_merge({0: str(a), 1: str(b)}, str(tmp_path / "m.json"), jobs=1)
    assert [r.rank for r in s.ranks] == [0, 1]
    assert any("hold the same bytes: merged as two ranks, numbered by the {rank: path} keys" in w
               for w in s.warnings), s.warnings  # fmt: skip


def test_inconsistent_world_size_warns_and_merges(tmp_path, small):
    p0, p1 = tmp_path / "r0.json", tmp_path / "r1.json"
    p0.write_bytes(small[0])
    assert small[1].count(b'"world_size": 4') == 1
    p1.write_bytes(small[1].replace(b'"world_size": 4', b'"world_size": 8'))
    out = tmp_path / "m.json"
    r = cli("merge", p0, p1, "-o", out, "-j", "1")
    assert r.rc == 0, r.err
    warn = [ln for ln in r.out.splitlines() if ln.startswith("warning:") and "world_size" in ln]
    assert warn, f"no world_size warning in the summary:\n{r.out}"
    assert "4" in warn[0] and "8" in warn[0]
    r = cli("merge", p0, p1, "-o", out, "-j", "1", "--force", "--json-summary")
    assert r.rc == 0
    assert any("world_size" in w for w in json.loads(r.out)["warnings"])
    o = load_out(out)
    assert len(rank_events(o, 1)) == sum(1 for e in events_exact(small[1]) if kept_by_default(e))


@pytest.mark.parametrize("frac", [0.3, 0.6])
def test_truncated_gzip_strict_error_points_at_the_end_of_the_data(tmp_path, small, frac):
    """The byte offset in the strict message is where the decodable data ends (as for a
    truncated plain file), not the start of the last read."""
    full = small[0]
    comp = gzip.compress(full, 6, mtime=0)
    k = int(len(comp) * frac)
    p = tmp_path / "rank0.json.gz"
    p.write_bytes(comp[:k])
    cut = len(gunzip_prefix(comp[:k]))
    r, out = merge(tmp_path, [p])
    line = assert_failed(r, out, p, where=True)
    m = re.search(r"byte (\d+)", line.replace(str(p), ""))
    assert m and int(m.group(1)) == cut, f"data ends at decompressed byte {cut}: {line}"


def test_any_single_byte_flip_in_a_gzip_stream_is_an_input_error(tmp_path, mini_raw):
    """Flip one byte at 40 places of a real gzip trace: strict mode must report an
    input error (exit 1), never an internal error (exit 70, e.g. an ISA-L
    "Invalid lookback distance" escaping as IsalError); --salvage exits 4 or 1."""
    comp = gzip.compress(mini_raw, 6, mtime=0)
    p = tmp_path / "rank0.json.gz"
    bad = []
    for at in range(12, len(comp) - 8, max(1, (len(comp) - 20) // 40)):
        p.write_bytes(_flip(comp, at, 1))
        for extra, ok in (((), (1,)), (("--salvage",), (1, 4))):
            r, out = merge(tmp_path, [p], *extra)
            if r.rc not in ok:
                bad.append((at, extra, r.rc, r.err.strip()[:120]))
            elif r.rc != 4:
                assert_failed(r, out, p, where=False)
            else:
                load_out(out)
    assert not bad, f"{len(bad)} flips gave other exit codes, e.g. {bad[:3]}"


@pytest.mark.parametrize("case", ["truncated_plain", "raw_control_char", "nan", "invalid_utf8"])
def test_strict_errors_from_worker_processes(tmp_path, small, mini_raw, case):
    """The default for a multi-rank merge is one worker per core: an input error raised
    inside a worker must reach the user as the same one-line input error (exit 1),
    not as an internal error about a broken process pool."""
    name, data = _broken_cases(small, mini_raw)[case]
    good = tmp_path / "good.json"
    good.write_bytes(small[1])
    p = tmp_path / name
    p.write_bytes(data)
    outdir = tmp_path / "out"
    outdir.mkdir()
    out = outdir / "m.json.gz"
    r = cli("merge", good, p, "-o", out, "-q", "-j", "2", "--rank-from", "order")
    assert_failed(r, out, p, where=True, hint=True)
    r = cli("merge", good, p, "-o", out, "-q", "-j", "2", "--rank-from", "order", "--salvage")
    assert r.rc == 4, r.err
    load_out(out)


def test_strict_error_from_a_worker_in_a_subprocess(tmp_path, small):
    """The same through ``python -m tracefuse_stream`` with the default -j."""
    fr = framing(small[1])
    good, bad = tmp_path / "r0.json", tmp_path / "r1.json"
    good.write_bytes(small[0])
    bad.write_bytes(small[1][: fr.spans[100][0] + 9])
    out = tmp_path / "o" / "m.json.gz"
    out.parent.mkdir()
    r = run_subprocess("merge", good, bad, "-o", out, "-j", "2")
    assert r.rc == 1, r.err
    assert "Traceback" not in r.err and str(bad) in r.line and "--salvage" in r.line
    assert not out.exists() and not leftovers(out.parent)

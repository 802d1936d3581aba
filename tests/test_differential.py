"""Differential test of the output contract: one answer, whichever path writes it.

A merge must write the same bytes with the C kernel and without it
(``TRACEFUSE_KERNEL=0``), and with ``jobs=1`` and ``jobs=2`` — or fail with the same
error. tests/test_kernel.py aims at each rule of the kernel; this test throws whole
random jobs at the contract: 2-3 ranks with their own base times (shifts of every
Decimal exponent) whose events spell every string (keys, cat, name, ph, arg keys and
values, metadata names) with short escapes, ``\\u`` escapes, ``\\/`` and raw
non-ASCII, every JSON number form (exponents, ``-0``, trailing zeros, epoch and huge
integers) in ts, dur, id, pid, tid and link args, repeated keys and any white space;
and every selection option (``--keep-cat``, ``--drop-cat``, ``--name``, ``--window``,
``--steps``, ``--ranks``, ``--args``, ``--include-pyfunc``) with and without
``--salvage`` (then with malformed events and a cut file). The answer compared is the
output's bytes, or the error's kind and text.

The options compare *decoded* text: a ``--drop-cat`` of ``my<TAB>cat`` drops the
category however the file spells it (``"my\\tcat"``, ``"my\\u0009cat"``); the drop-cat
case below pins that with exact counts.

Random where it runs (hypothesis with its example database, so a failure found once
is replayed first); under ``CI`` the conftest's ``ci`` profile derandomizes it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracefuse_stream.rewrite.kernel as kernel_mod
from tracefuse_stream import merge, native
from tracefuse_stream.errors import TraceFuseError

BASE_NS = 1_700_000_000_000_000_000

#: decoded texts the string fields draw from: escapes JSON must write (quote,
#: backslash, control characters), ones it may (slash), non-ASCII of 2, 3 and 4 bytes
TEXTS = [
    "cpu_op",
    "kernel",
    "python_function",
    "my\tcat",
    'q"uote',
    "back\\slash",
    "a/b",
    "café",
    "naïve ∑",
    "rocket 🚀",
    "nul\x00\x1f",
    "line\nbreak\r\x08\x0c",
    "",
]
CATS = TEXTS[:10]
NAMES = ["aten::mm", "ProfilerStep#1", "ProfilerStep#2"] + TEXTS[3:]


def _u_escape(text: str) -> str:
    """Every character as a \\u escape (surrogate pairs above the BMP)."""
    out = []
    for ch in text:
        o = ord(ch)
        if o > 0xFFFF:
            o -= 0x10000
            out.append(f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04X}")
        else:
            out.append(f"\\u{o:04x}")
    return '"' + "".join(out) + '"'


def spell_string(text: str, style: int) -> str:
    """``text`` as a JSON string, spelled one of four ways (the same decoded text)."""
    if style == 0:
        return json.dumps(text, ensure_ascii=False)  # raw UTF-8, short escapes
    if style == 1:
        return json.dumps(text)  # non-ASCII as \\u
    if style == 2:
        return _u_escape(text)
    return json.dumps(text, ensure_ascii=False).replace("/", "\\/")


def spell_number(value: int, scale: int, style: int) -> str:
    """``value * 10**-scale`` as a JSON number, one of several spellings."""
    neg = value < 0
    digits = str(abs(value)).rjust(scale + 1, "0")
    whole, frac = digits[: len(digits) - scale], digits[len(digits) - scale :]
    sign = "-" if neg else ""
    if style == 0:  # plain
        return sign + whole + ("." + frac if frac else "")
    if style == 1:  # trailing zeros
        return sign + whole + "." + (frac or "") + "00"
    if style == 2:  # exponent, upper case, mantissa with one digit before the point
        m = digits.lstrip("0") or "0"
        exp = len(m) - 1 - scale
        return f"{sign}{m[0]}.{m[1:] or '0'}E{exp:+d}"
    if style == 3:  # exponent, lower case, integer mantissa
        return f"{sign}{abs(value)}e{-scale}"
    if style == 4:  # negative zero where the value is zero, else plain
        return ("-0" if value == 0 else sign + whole) + ("." + frac if frac else "")
    return sign + whole + ("." + frac if frac else "") + "e0"


@st.composite
def numbers(draw: Any, lo: int, hi: int, scale: int) -> str:
    value = draw(st.integers(lo, hi))
    return spell_number(value, scale, draw(st.integers(0, 5)))


@st.composite
def strings(draw: Any, pool: List[str]) -> str:
    return spell_string(draw(st.sampled_from(pool)), draw(st.integers(0, 3)))


_ODD_IDS = ["4294967296", "18446744073709551616", '"0x1f"', '"zz"', "-1", "null", "true", "1.5"]
_ODD_TIDS = ['"main"', "-5", "4294967296", "18446744073709551616", "7.0", "null"]
# epoch microseconds (old traces), int64 ns and beyond, NaN's neighbours in JSON
_ODD_TS = [
    '"5"',
    "null",
    "true",
    "1e400",
    "-1E3",
    "1700000000000000.123",
    "9223372036854775807",
    "1" + "0" * 30,
]
_ODD_DUR = ["-0", "1E2", "-0.0", "0.0000001", "-5", "1e30", '"1"', "null", "123456789012345678901234.5"]
_ODD_PIDS = ['"77"', "123456789", "77.0", "7.7E1", "-0", "99999999999999999999999"]


@st.composite
def args_object(draw: Any, odd: bool) -> str:
    members = []
    for key in draw(
        st.lists(
            st.sampled_from(
                ["External id", "correlation", "Python id", "grid", "Input Dims", "device", "x"] + TEXTS[3:8]
            ),
            max_size=4,
            unique=True,
        )
    ):
        if key in ("External id", "correlation", "Python id"):
            value = draw(
                st.one_of(numbers(0, 5000, 0), st.sampled_from(_ODD_IDS))
                if odd
                else st.integers(0, 5000).map(str)
            )
        elif key == "grid":
            value = "[" + ", ".join(draw(numbers(-3, 3000, draw(st.integers(0, 3)))) for _ in range(3)) + "]"
        else:
            value = draw(st.one_of(strings(TEXTS), numbers(-(10**20), 10**20, 2), st.just("[[8, 512], []]")))
        members.append(f"{spell_string(key, draw(st.integers(0, 3)))}: {value}")
    return "{" + ", ".join(members) + "}"


@st.composite
def event(draw: Any, odd: bool) -> str:
    """One event's JSON text; ``odd`` also draws values the strict merge rejects."""
    ph = draw(st.sampled_from(["X", "X", "X", "i", "s", "f", "M"]))
    m: List[Tuple[str, str]] = []
    m.append(("ph", spell_string(ph, draw(st.integers(0, 3)))))
    pid = draw(
        st.sampled_from(["77", "77", "0", "1"]) | (st.sampled_from(_ODD_PIDS) if odd else st.nothing())
    )
    tid = draw(st.sampled_from(["77", "7", "0"]) | (st.sampled_from(_ODD_TIDS) if odd else st.nothing()))
    m += [("pid", pid), ("tid", tid)]
    # ts: around 1000 us from the rank's base, to 3 decimals (and an odd huge one)
    ts = draw(numbers(0, 4_000_000, 3) | (st.sampled_from(_ODD_TS) if odd else st.nothing()))
    m.append(("ts", ts))
    if ph == "M":
        m.append(("name", spell_string(draw(st.sampled_from(["process_name", "thread_name"])), 0)))
        m.append(("args", "{" + spell_string("name", 0) + ": " + draw(strings(TEXTS)) + "}"))
    else:
        m.append(("cat", draw(strings(CATS))))
        m.append(("name", draw(strings(NAMES))))
        if ph == "X":
            m.append(
                (
                    "dur",
                    draw(numbers(0, 900_000, 3) | (st.sampled_from(_ODD_DUR) if odd else st.nothing())),
                )
            )
        if ph in "sf":
            flow_id = draw(numbers(0, 50, 0) | (st.sampled_from(_ODD_IDS) if odd else st.nothing()))
            m.append(("id", flow_id))
            if ph == "f":
                m.append(("bp", '"e"'))
        if draw(st.booleans()):
            m.append(("args", draw(args_object(odd))))
    if odd and draw(st.integers(0, 9)) == 0:  # a repeated key: the last value counts
        m.append(draw(st.sampled_from(m)))
    order = draw(st.permutations(range(len(m))))
    # keys spelled every way too ("t\\u0073" is "ts"), and white space where JSON allows it
    keys = [spell_string(m[j][0], draw(st.sampled_from([0, 0, 0, 2]))) for j in order]
    colon, comma = draw(st.sampled_from([(": ", ", "), (":", ","), (" :\n ", "\n,\t")]))
    return "{" + comma.join(f"{k}{colon}{m[j][1]}" for k, j in zip(keys, order)) + "}"


def _steps_frame(rank_off_us: int) -> List[str]:
    """ProfilerStep#1..#3 annotations, so --steps has something to cut on."""
    return [
        f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{k}", "pid": 77, "tid": 77,'
        f' "ts": {rank_off_us + (k - 1) * 1000}, "dur": 999.5}}'
        for k in (1, 2, 3)
    ]


@st.composite
def job(draw: Any) -> Dict[str, Any]:
    """A random job: 2-3 ranks of random events, and random merge options."""
    salvage = draw(st.booleans())
    n_ranks = draw(st.integers(2, 3))
    ranks = []
    for _ in range(n_ranks):
        events = _steps_frame(0) + draw(st.lists(event(odd=salvage or draw(st.booleans())), max_size=12))
        events = draw(st.permutations(events))
        ranks.append((draw(st.integers(-3_000_000, 3_000_000)), events))
    opts: Dict[str, Any] = {
        "salvage": salvage,
        "include_pyfunc": draw(st.booleans()),
        "args": draw(st.sampled_from(["all", "slim", "none"])),
    }
    choice = draw(st.sampled_from(["drop", "keep", "name", "none", "drop"]))
    if choice == "drop":
        opts["drop_cat"] = frozenset(draw(st.lists(st.sampled_from(CATS), min_size=1, max_size=3)))
    elif choice == "keep":
        opts["keep_cat"] = frozenset(draw(st.lists(st.sampled_from(CATS), min_size=1, max_size=4)))
    elif choice == "name":
        opts["name_regex"] = draw(
            st.sampled_from(["^Profiler", "é", "\t", "🚀", '"', "\\\\", "/", "^$", "mm|∑"])
        )
    when = draw(st.sampled_from(["all", "all", "window", "steps"]))
    if when == "window":
        a = draw(st.integers(0, 4000)) / 1000
        opts["window_ms"] = (a, a + draw(st.integers(0, 3000)) / 1000)
    elif when == "steps":
        a = draw(st.integers(1, 3))
        opts["steps"] = (a, draw(st.integers(a, 3)))
    if draw(st.booleans()):
        opts["ranks"] = sorted(draw(st.sets(st.integers(0, n_ranks - 1), min_size=1)))
    cut = draw(st.integers(1, 400)) if salvage and draw(st.booleans()) else None
    return {"ranks": ranks, "opts": opts, "cut": cut}


def write_job(folder: Path, spec: Dict[str, Any]) -> List[str]:
    paths = []
    for rank, (off_ns, events) in enumerate(spec["ranks"]):
        info = f'"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {len(spec["ranks"])}}}'
        body = ",\n  ".join(events)
        text = f'{{{info}, "baseTimeNanoseconds": {BASE_NS + off_ns}, "traceEvents": [\n  {body}\n]}}'
        data = text.encode("utf-8")
        if spec["cut"] is not None and rank == len(spec["ranks"]) - 1:
            data = data[: max(len(data) - spec["cut"], len(data) // 2)]
        path = folder / f"host.{rank}.pt.trace.json"
        path.write_bytes(data)
        paths.append(str(path))
    return paths


class _Written:
    """Counts the events the kernel wrote: a comparison where it wrote none would
    compare the Python path with itself."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events = self.dropped = 0
        call = kernel_mod.KernelRewriter.__call__
        counter = self

        def counted(self: Any, *args: Any) -> Any:
            before, dropped = self.rw.events_out, self.rw.dropped
            out = call(self, *args)
            counter.events += self.rw.events_out - before
            counter.dropped += self.rw.dropped - dropped
            return out

        monkeypatch.setattr(kernel_mod.KernelRewriter, "__call__", counted)


def run_merge(
    inputs: List[str],
    out: Path,
    opts: Dict[str, Any],
    jobs: int,
    kernel: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> Tuple[Optional[bytes], Optional[str]]:
    """The merged bytes, or the error (kind and text) of a failed merge. Any exception
    counts as an answer here: what this test checks is that every path gives the same
    one (that bad numbers give a clear input error is tests/test_errors.py's job)."""
    monkeypatch.setenv("TRACEFUSE_KERNEL", "1" if kernel else "0")
    try:
        merge(inputs, str(out), force=True, jobs=jobs, **opts)
    except TraceFuseError as e:
        return None, f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - a crash is compared like an error
        return None, f"crash {type(e).__name__}: {e}"
    finally:
        monkeypatch.delenv("TRACEFUSE_KERNEL")
    return out.read_bytes(), None


@pytest.fixture
def kernel_built() -> None:
    if native.kernel is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but the C kernel did not build (tracefuse_stream/_kernel.c)")
        pytest.skip("the optional C kernel is not built here: kernel vs Python cannot be compared")


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@given(spec=job())
def test_kernel_and_workers_write_the_same_bytes(
    spec: Dict[str, Any],
    kernel_built: None,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tmp = tmp_path_factory.mktemp("diff")
    monkeypatch.delenv("TRACEFUSE_VERIFY", raising=False)  # the comparison is the check here
    inputs = write_job(tmp, spec)
    opts = spec["opts"]
    python_j1 = run_merge(inputs, tmp / "p1.json", opts, 1, False, monkeypatch)
    kernel_j1 = run_merge(inputs, tmp / "k1.json", opts, 1, True, monkeypatch)
    kernel_j2 = run_merge(inputs, tmp / "k2.json", opts, 2, True, monkeypatch)
    assert kernel_j1 == python_j1
    assert kernel_j2 == kernel_j1
    outcome = "merged" if python_j1[0] is not None else (python_j1[1] or "").split(":")[0]
    hypothesis.event(outcome)


def test_the_kernel_writes_in_such_jobs(
    kernel_built: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The random jobs' events, without the forms the kernel hands back (``\\u``,
    non-ASCII, exponents): most of them are the kernel's to write, so the comparison
    above compares two writers, not the Python path with itself."""
    texts = [t for t in TEXTS if t.isascii() and "\x00" not in t]  # (JSON spells NUL \\u0000)
    tab_key = spell_string("a\tb", 0)
    events = _steps_frame(0)
    for i in range(60):
        cat, name = spell_string(texts[i % len(texts)], 0), spell_string(texts[(i * 7) % len(texts)], 0)
        dur = spell_number(1000 + i * 37, 3, 0)
        events.append(
            f'{{"ph": "X", "cat": {cat}, "name": {name}, "pid": 77, "tid": 7, "ts": {1000 + i}.{i:03d},'
            f' "dur": {dur}, "args": {{"External id": {i}, {tab_key}: "x"}}}}'
        )
    inputs = write_job(tmp_path, {"ranks": [(0, events), (1357, events), (-2_000_001, events)], "cut": None})
    for opts in ({}, {"drop_cat": frozenset({"my\tcat"}), "args": "slim"}, {"window_ms": (0.5, 1.5)}):
        counted = _Written(monkeypatch)
        with_kernel, err = run_merge(inputs, tmp_path / "k.json", opts, 1, True, monkeypatch)
        assert err is None
        assert run_merge(inputs, tmp_path / "p.json", opts, 1, False, monkeypatch) == (with_kernel, None)
        # of 63 events a rank, the kernel judges all but the three ProfilerStep#N (Python
        # reads their numbers: the run check's steps; the first also registers the pid);
        # the window keeps a third of them
        assert counted.events + counted.dropped >= 3 * 60, opts
        assert counted.events >= 3 * 15, opts


def _drop_cat_job(tmp: Path, style: int) -> List[str]:
    ok = '{"ph": "X", "cat": "ok", "name": "a", "pid": 77, "tid": 77, "ts": 5, "dur": 1}'
    tab = spell_string("my\tcat", style)
    odd = [
        f'{{"ph": "X", "cat": {tab}, "name": "b", "pid": 77, "tid": 77, "ts": {10 + i}, "dur": 1}}'
        for i in range(4)
    ]
    spec = {"ranks": [(0, [ok] + odd), (1000, [ok] + odd)], "cut": None}
    return write_job(tmp, spec)


@pytest.mark.parametrize("style", range(4))
def test_drop_cat_compares_decoded_text(
    style: int, kernel_built: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review's case: a category spelled with an escape, dropped by its text.
    2 ranks x (1 kept + 4 dropped), with the kernel writing the kept ones it can."""
    inputs = _drop_cat_job(tmp_path, style)
    counted = _Written(monkeypatch)
    opts = {"drop_cat": frozenset({"my\tcat"})}
    with_kernel, err = run_merge(inputs, tmp_path / "k.json", opts, 1, True, monkeypatch)
    assert err is None and with_kernel is not None
    python, _ = run_merge(inputs, tmp_path / "p.json", opts, 1, False, monkeypatch)
    assert with_kernel == python
    events = [e for e in json.loads(with_kernel)["traceEvents"] if e["ph"] != "M"]
    assert [(e["cat"], e["args"]["rank"]) for e in events] == [("ok", 0), ("ok", 1)]
    # the kernel judged the short escapes itself (the first event of each rank
    # registers its pid in Python); \u escapes it hands back to Python
    assert counted.events == 0
    assert counted.dropped == (0 if style == 2 else 8)
    assert re.search(rb'"cat":"my', with_kernel) is None


# ------------------------------------------------------------------ info, and issue 28's classes
#: events of the classes issue 28 found the paths disagreeing on (or crashing): each
#: is spliced into a random job's rank, where any event of it may stand
HOSTILE_EVENTS = [
    # nested bad literals and leading zeros
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 77, "tid": 7, "ts": 5, "dur": 1, "args": {"x": [tru]}}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 77, "tid": 7, "ts": 5, "dur": 1, "args": {"x": [00012]}}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 77, "tid": 7, "ts": 5, "dur": 1, "args": {"x": {"y": nul}}}',
    # control bytes, in a name and nested
    '{"ph": "X", "cat": "cpu_op", "name": "a\x01b", "pid": 77, "tid": 7, "ts": 5, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 77, "tid": 7, "ts": 5, "dur": 1, "args": {"x": ["\x1f"]}}',
    # invalid UTF-8 (written as latin-1 below), in a name, an arg, a collective's args
    '{"ph": "X", "cat": "cpu_op", "name": "a\xffb", "pid": 77, "tid": 7, "ts": 5, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 77, "tid": 7, "ts": 5, "dur": 1, "args": {"x": "\xc3"}}',
    '{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 7, "ts": 6, "dur": 2,'
    ' "args": {"Collective name": "allreduce", "S\xffeq": 1}}',
    # lone surrogates, in every field kind; a pair is fine
    '{"ph": "X", "cat": "cpu_op", "name": "\\ud800", "pid": 77, "tid": 7, "ts": 5, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 77, "tid": "\\udfff", "ts": 5, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": "x\\ud800", "tid": 7, "ts": 5, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 77, "tid": 7, "ts": 5, "dur": 1, "args": {"\\udc00": 1}}',
    '{"ph": "X", "cat": "cpu_op", "name": "\\\\ud800 \\ud83d\\ude80", "pid": 77, "tid": 7, "ts": 5, "dur": 1}',
    # pid aliases, pids no table can hold, tids -7 / 7
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 77.0, "tid": 7, "ts": 5, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": true, "tid": 7, "ts": 5, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": [77], "tid": 7, "ts": 5, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": {}, "tid": 7, "ts": 5, "dur": 1}',
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 77, "tid": -7, "ts": 5, "dur": 1}',
    # link args beyond 2**32, id2
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 77, "tid": 7, "ts": 5, "dur": 1, "args": {"Python id": 4294967301}}',
    '{"ph": "b", "cat": "c", "name": "n", "pid": 77, "tid": 7, "ts": 5, "id2": {"global": "0x1"}}',
    # deep nesting: within the limit, beyond it, beyond msgspec's recursion limit
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 77, "tid": 7, "ts": 5, "dur": 1, "args": {"x": '
    + "[" * 40
    + "]" * 40
    + "}}",
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 77, "tid": 7, "ts": 5, "dur": 1, "args": {"x": '
    + "[" * 300
    + "]" * 300
    + "}}",
    '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 77, "tid": 7, "ts": 5, "dur": 1, "args": {"x": '
    + "[" * 3000
    + "]" * 3000
    + "}}",
]

INFO_FLAGS = [(), ("--steps",), ("--align",), ("--collectives",), ("--json", "--collectives", "--steps")]
_TIMES = re.compile(r"\d+\.\d+ s\b")


def run_cli_in_process(
    args: List[str], kernel: bool, monkeypatch: pytest.MonkeyPatch
) -> Tuple[int, str, str]:
    import contextlib
    import io

    from tracefuse_stream.cli.app import main as cli_main

    monkeypatch.setenv("TRACEFUSE_KERNEL", "1" if kernel else "0")
    o, e = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            rc = cli_main(args)
    finally:
        monkeypatch.delenv("TRACEFUSE_KERNEL")
    return rc, _TIMES.sub("T", o.getvalue()), e.getvalue()


@st.composite
def hostile_job(draw: Any) -> Dict[str, Any]:
    """A random job (no cut file) with hostile events spliced into its ranks."""
    spec = draw(job())
    spec["cut"] = None
    ranks = []
    for off, events in spec["ranks"]:
        events = list(events)
        for _ in range(draw(st.integers(0, 2))):
            events.insert(draw(st.integers(0, len(events))), draw(st.sampled_from(HOSTILE_EVENTS)))
        ranks.append((off, events))
    spec["ranks"] = ranks
    return spec


def write_hostile_job(folder: Path, spec: Dict[str, Any]) -> List[str]:
    """``write_job``, byte for byte: hostile events with raw non-ASCII are written as
    latin-1 (their ``\xff`` is the invalid UTF-8 byte), every other event as UTF-8."""
    paths = []
    for rank, (off_ns, events) in enumerate(spec["ranks"]):
        info = f'"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {len(spec["ranks"])}}}'
        head = f'{{{info}, "baseTimeNanoseconds": {BASE_NS + off_ns}, "traceEvents": [\n  '.encode()
        body = b",\n  ".join(e.encode("latin-1" if e in HOSTILE_EVENTS else "utf-8") for e in events)
        path = folder / f"host.{rank}.pt.trace.json"
        path.write_bytes(head + body + b"\n]}")
        paths.append(str(path))
    return paths


@settings(
    max_examples=20,
    print_blob=True,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@given(spec=hostile_job())
def test_merge_and_info_give_one_answer_on_hostile_jobs(
    spec: Dict[str, Any],
    kernel_built: None,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 28: the classes above, on both paths, for merge (with the job's options)
    and info with every flag: the same bytes, or the same exit code and text; never
    an internal error."""
    tmp = tmp_path_factory.mktemp("hostile")
    monkeypatch.delenv("TRACEFUSE_VERIFY", raising=False)
    inputs = write_hostile_job(tmp, spec)
    python = run_merge(inputs, tmp / "p.json", spec["opts"], 1, False, monkeypatch)
    kernel = run_merge(inputs, tmp / "k.json", spec["opts"], 1, True, monkeypatch)
    assert kernel == python
    assert not (python[1] or "").startswith("crash"), python[1]
    for flags in INFO_FLAGS:
        args = ["info", *flags, *inputs]
        answers = [run_cli_in_process(args, k, monkeypatch) for k in (False, True)]
        assert answers[0] == answers[1], flags
        assert answers[0][0] != 70 and "internal error" not in answers[0][2], (flags, answers[0])
    hypothesis.event("merged" if python[0] is not None else (python[1] or "").split(":")[0])

"""Issue 28: one answer for every input. Metadata never moves the output base; no
wrong trace with exit 0 (pid aliases, tids -7/7, link args >= 2**32, id2, lone
surrogates); no internal error (exit 70) for any input; the kernel and the Python
path give the same bytes or the same error. Inputs are generated here (tests/hostile.py)."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path
from typing import List

import pytest
from conftest import run_cli
from hostile import (
    BASE_NS,
    BROKEN_CLASSES,
    PERIOD_NS,
    broken_trace,
    cli,
    events_of,
    thread_name,
    write,
    x_event,
)
from hostile import OK as OKEV

from tracefuse_stream import native

PATHS = ["1", "0"]  # TRACEFUSE_KERNEL: the C kernel, the Python path


@pytest.fixture(params=PATHS, ids=["kernel", "python"])
def path_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "1" and native.kernel is None:
        pytest.skip("the C kernel is not built")
    monkeypatch.setenv("TRACEFUSE_KERNEL", request.param)
    return str(request.param)


def _rebased(tmp: Path) -> List[Path]:
    """Three ranks at the same instants: rank 1 re-based one Kineto period earlier,
    rank 2 two (ts grow by as much); rank 1's thread_name at ts 0, rank 2's at its old ts."""
    p_us = PERIOD_NS // 1000
    out = []
    for r, meta_ts in ((0, 0), (1, 0), (2, 1000)):
        events = [thread_name(meta_ts), x_event(Decimal("1000.5") + r * p_us), x_event(2000 + r * p_us)]
        out.append(write(tmp / f"r{r}.json", events, base_ns=BASE_NS - r * PERIOD_NS, rank=r, world=3))
    return out


def test_metadata_never_moves_the_output_base(tmp_path: Path, path_kind: str) -> None:
    inputs = _rebased(tmp_path)
    out = tmp_path / "out.json"
    rc, _, err = cli("merge", *inputs, "-o", out, "-q", "-j", "1")
    # the ranks start at one instant, as built: the run check's warning (-q keeps warnings), only it
    assert rc == 0 and err.startswith("warning: one recording under 3 ranks") and err.count("\n") == 1, err
    events = events_of(out)
    timed = [e["ts"] for e in events if e["ph"] != "M"]
    # the base is the first event minus 10 s (the ranks' bases are 91 and 182 days apart)
    assert timed == [10_000_000.5, 10_001_000] * 3
    assert all(0 <= e["ts"] < 2**32 for e in events)
    names = [e for e in events if e["name"] == "thread_name"]
    # rank 0's ts 0 is 10 s before its first event; the others fall before the base
    # and are placed where their process starts
    assert [(n["ts"], n["args"]["rank"]) for n in names] == [
        (9_999_000, 0),
        (10_000_000.5, 1),
        (10_000_000.5, 2),
    ]
    header = json.loads(out.read_bytes())["tracefuse"]
    assert header["base_time_ns"] == BASE_NS + 1_000_500 - 10_000_000_500


def test_metadata_before_the_base_on_stdout(tmp_path: Path, path_kind: str) -> None:
    """stdout cannot be written twice: metadata used to make that merge fail (exit 3)."""
    inputs = _rebased(tmp_path)
    p = run_cli("merge", *inputs, "-o", "-", "-q", "-j", "1", env={"TRACEFUSE_KERNEL": path_kind})
    assert p.returncode == 0 and p.stderr_text.startswith("warning: one recording under 3 ranks"), (
        p.stderr_text
    )
    assert p.stderr_text.count("\n") == 1  # that warning only (the ranks start at one instant, as built)
    assert [e["ts"] for e in json.loads(p.stdout)["traceEvents"] if e["ph"] != "M"] == [
        10_000_000.5,
        10_001_000,
    ] * 3


def test_both_paths_write_the_same_rebased_merge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if native.kernel is None:
        pytest.skip("the C kernel is not built")
    inputs = _rebased(tmp_path)
    outs = []
    for k in PATHS:
        monkeypatch.setenv("TRACEFUSE_KERNEL", k)
        out = tmp_path / f"out{k}.json"
        assert cli("merge", *inputs, "-o", out, "-q", "-j", "1")[0] == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def _merge(tmp: Path, *inputs: Path, extra: tuple = ()) -> tuple:
    out = tmp / "out.json"
    rc, _, err = cli("merge", *inputs, "-o", out, "-q", "-j", "1", "--force", *extra)
    return rc, err.strip(), out


def test_pids_1_1p0_true_are_three_processes(tmp_path: Path, path_kind: str) -> None:
    """Python's 1 == 1.0 == True made one process of three JSON values (exit 0)."""
    events = [
        '{"ph": "X", "cat": "c", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}',
        '{"ph": "X", "cat": "c", "name": "b", "pid": 1.0, "tid": 1, "ts": 2, "dur": 1}',
        '{"ph": "X", "cat": "c", "name": "c", "pid": true, "tid": 1, "ts": 3, "dur": 1}',
    ]
    rc, err, out = _merge(tmp_path, write(tmp_path / "p.json", events))
    assert (rc, err) == (0, "")
    trace = json.loads(out.read_bytes())
    assert [(e["name"], e["pid"]) for e in trace["traceEvents"] if e["ph"] == "X"] == [
        ("a", 10001),
        ("b", 15000),
        ("c", 15001),
    ]
    assert trace["tracefuse"]["ranks"]["0"]["pids"] == [[1, 10001], [1.0, 15000], [True, 15001]]
    titles = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert titles == ["RANK 0 - CPU", "RANK 0 - 1.0", "RANK 0 - true"]


@pytest.mark.parametrize("order", [(7, -7), (-7, 7), (7, 8, -7)])
def test_tids_7_and_minus_7_are_an_error(tmp_path: Path, path_kind: str, order: tuple) -> None:
    """Negative tids become their absolute value: -7 and 7 of one process would be one
    thread (exit 0 before); the merge names the pid and the event, nothing is written."""
    events = [x_event(i, tid=t) for i, t in enumerate(order)]
    rc, err, out = _merge(tmp_path, write(tmp_path / "t.json", events))
    at = len(order) - 1
    assert rc == 1
    assert err == (
        f"tracefuse: error: {tmp_path / 't.json'}: pid 77 has threads 7 and -7: negative tids become their "
        f"absolute value (what newer PyTorch writes), so they would be one thread (at event #{at}); "
        "use --salvage to drop such events"
    )
    assert not out.exists()


def test_tids_7_and_minus_7_with_salvage(tmp_path: Path, path_kind: str) -> None:
    rc, err, out = _merge(
        tmp_path, write(tmp_path / "t.json", [x_event(1, tid=-7), x_event(2, tid=7)]), extra=("--salvage",)
    )
    assert rc == 4
    assert [(e["tid"], e["ts"]) for e in events_of(out) if e["ph"] == "X"] == [(7, 1)]


def test_link_arg_beyond_2_32_is_an_error(tmp_path: Path, path_kind: str) -> None:
    """Kept as it was, rank 0's Python id 2**32 + 5 equalled rank 1's rewritten
    External id 5 (a join across ranks)."""
    r0 = write(tmp_path / "r0.json", [x_event(1, args={"External id": 5, "Python id": 2**32 + 5})], world=2)
    r1 = write(tmp_path / "r1.json", [x_event(1, args={"External id": 5})], rank=1, world=2)
    rc, err, out = _merge(tmp_path, r0, r1)
    assert rc == 1
    assert err == (
        f"tracefuse: error: {r0}: args['Python id'] 4294967301 is not an integer in 0..2**32-1, so it cannot "
        "be made unique across ranks (at event #0); use --salvage to drop such events"
    )
    assert not out.exists()


def test_link_arg_sentinel_is_kept(tmp_path: Path, path_kind: str) -> None:
    rc, err, out = _merge(
        tmp_path, write(tmp_path / "r0.json", [x_event(1, args={"Python id": -1, "External id": 3})])
    )
    assert (rc, err) == (0, "")
    assert [e["args"] for e in events_of(out) if e["ph"] == "X"] == [
        {"Python id": -1, "External id": 3, "rank": 0}
    ]


def test_id2_global_and_local_are_rank_unique(tmp_path: Path, path_kind: str) -> None:
    def b(ph: str, id2: str) -> str:
        return f'{{"ph": "{ph}", "cat": "c", "name": "n", "pid": 77, "tid": 7, "ts": 2, "id2": {id2}}}'

    r0 = write(tmp_path / "r0.json", [b("b", '{"global": "0x1"}'), b("e", '{"local": 5}')], world=2)
    r1 = write(tmp_path / "r1.json", [b("b", '{"global": "0x1"}'), b("e", '{"local": 5}')], rank=1, world=2)
    rc, err, out = _merge(tmp_path, r0, r1)
    assert (rc, err) == (0, "")
    assert [e["id2"] for e in events_of(out) if "id2" in e] == [
        {"global": 1},
        {"local": 5},
        {"global": 2**32 + 1},
        {"local": 2**32 + 5},
    ]


def test_id2_not_an_id_is_an_error(tmp_path: Path, path_kind: str) -> None:
    ev = '{"ph": "b", "cat": "c", "name": "n", "pid": 77, "tid": 7, "ts": 2, "id2": {"other": 1}}'
    path = write(tmp_path / "r0.json", [x_event(1), ev])
    rc, err, out = _merge(tmp_path, path)
    assert (rc, err) == (
        1,
        f'tracefuse: error: {path}: id2 {{\'other\': 1}} is not {{"global": id}} or {{"local": id}} (at event #1); '
        "use --salvage to drop such events",
    )


@pytest.mark.parametrize("pid", ["[1]", "{}"])
def test_pid_list_or_object_is_an_input_error(tmp_path: Path, path_kind: str, pid: str) -> None:
    """Unhashable in the pid table: exit 70 before."""
    ev = f'{{"ph": "X", "cat": "c", "name": "a", "pid": {pid}, "tid": 7, "ts": 2, "dur": 1}}'
    path = write(tmp_path / "r0.json", [x_event(1), ev])
    rc, err, out = _merge(tmp_path, path)
    shown = "[1]" if pid == "[1]" else "{}"
    assert (rc, err) == (
        1,
        f"tracefuse: error: {path}: a pid must be a number or a string, not {shown} (at event #1); "
        "use --salvage to drop such events",
    )
    assert not out.exists()
    rc, err, out = _merge(tmp_path, path, extra=("--salvage",))
    assert rc == 4
    assert [e["ts"] for e in events_of(out) if e["ph"] == "X"] == [1]


# ---------------------------------------------------------------- items 3 and 4
COMMANDS = {
    "merge": ("merge",),
    "merge-salvage": ("merge", "--salvage"),
    "merge-window": ("merge", "--window", "0:1"),
    "info": ("info",),
    "info-steps": ("info", "--steps"),
    "info-align": ("info", "--align"),
    "info-collectives": ("info", "--collectives"),
    "info-json": ("info", "--json", "--collectives", "--steps"),
    "verify": ("verify",),
}
_TIMING = re.compile(r"\d+\.\d+ s \([\d.]+ MB/s\)")


def _answer(tmp: Path, command: str, trace: Path, kernel: str, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """(exit code, stdout, stderr, output bytes) of one command on one code path."""
    monkeypatch.setenv("TRACEFUSE_KERNEL", kernel)
    args = list(COMMANDS[command]) + [str(trace)]
    out = tmp / f"out-{kernel}.json"
    if args[0] == "merge":
        args += ["-o", str(out), "-q", "-j", "1", "--force"]
    rc, stdout, stderr = cli(*args)
    data = out.read_bytes() if out.exists() else None
    if out.exists():
        out.unlink()
    return rc, _TIMING.sub("T", stdout).replace(str(out), "OUT"), stderr.replace(str(out), "OUT"), data


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("kind", sorted(BROKEN_CLASSES))
def test_no_internal_error_and_one_answer(
    kind: str, command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every hostile class under every command: never exit 70, never a traceback, and
    the kernel and the Python path give the same answer (exit code, text, bytes)."""
    trace = tmp_path / f"{kind}.json"
    trace.write_bytes(broken_trace(kind))
    python = _answer(tmp_path, command, trace, "0", monkeypatch)
    assert python[0] != 70 and "Traceback" not in python[2] and "internal error" not in python[2], python
    if native.kernel is None:
        return
    assert _answer(tmp_path, command, trace, "1", monkeypatch) == python


#: what the merge says of each class (after the file's path): exit 1, nothing written
MERGE_ERRORS = {
    "lone_surrogate_args": "lone UTF-16 surrogate escape \\ud800 in args['x']: not Unicode text, it cannot be "
    "written as it is (at event #1); use --salvage to drop such events",
    "lone_surrogate_name": "lone UTF-16 surrogate escape \\udc00 in name: not Unicode text, it cannot be "
    "written as it is (at event #1); use --salvage to drop such events",
    "lone_surrogate_tid": "lone UTF-16 surrogate escape \\ud800 in tid: not Unicode text, it cannot be "
    "written as it is (at event #1); use --salvage to drop such events",
    "lone_surrogate_pid": "lone UTF-16 surrogate escape \\ud800 in pid: not Unicode text, it cannot be "
    "written as it is (at event #1); use --salvage to drop such events",
    "deep_args": "an event nests 5002 levels deep (at most 254 are accepted) (at event #1); "
    "use --salvage to drop such events",
    "nested_bad_literal": "invalid JSON: lexical error: invalid string in json text. (at event #1, byte 242); "
    "use --salvage to keep the complete events before it",
}


@pytest.mark.parametrize("kind", sorted(MERGE_ERRORS))
def test_merge_names_the_file_event_and_field(kind: str, tmp_path: Path, path_kind: str) -> None:
    trace = tmp_path / f"{kind}.json"
    trace.write_bytes(broken_trace(kind))
    rc, err, out = _merge(tmp_path, trace)
    assert (rc, err) == (1, f"tracefuse: error: {trace}: {MERGE_ERRORS[kind]}")
    assert not out.exists() and not list(tmp_path.glob("*.tmp*"))


@pytest.mark.parametrize("kind", sorted(MERGE_ERRORS))
def test_salvage_drops_the_event(kind: str, tmp_path: Path, path_kind: str) -> None:
    """--salvage keeps the two good events and drops the bad one (exit 4: salvaged)."""
    trace = tmp_path / f"{kind}.json"
    trace.write_bytes(broken_trace(kind))
    rc, err, out = _merge(tmp_path, trace, extra=("--salvage",))
    assert rc == 4
    assert [(e["name"], e["ts"]) for e in events_of(out) if e["ph"] == "X"] == [("op", 1), ("op", 1)]


@pytest.mark.parametrize(
    "kind",
    ["nested_bad_literal", "nested_leading_zeros", "control_byte", "invalid_utf8", "lone_surrogate_args"],
)
def test_info_is_as_strict_as_the_merge(kind: str, tmp_path: Path, path_kind: str) -> None:
    """info reports the file the merge would refuse as BROKEN (exit 1), naming the file
    and the event, whichever code path reads it (the kernel said exit 0 for these)."""
    trace = tmp_path / f"{kind}.json"
    trace.write_bytes(broken_trace(kind))
    for flags in ((), ("--collectives",), ("--steps",), ("--align",)):
        rc, out, err = cli("info", *flags, trace)
        assert rc == 1, (flags, out, err)
        broken = [ln for ln in out.splitlines() if ln.startswith("BROKEN")]
        assert len(broken) == 1 and broken[0].startswith(f"BROKEN {trace}: ") and "(at event #1" in broken[0]


def test_window_of_a_file_with_a_bad_nested_literal(tmp_path: Path, path_kind: str) -> None:
    """The Python path read it with the salvage reader for --window's first event
    (without --salvage) and stopped with exit 2, 'no timed events'."""
    trace = tmp_path / "w.json"
    trace.write_bytes(
        f'{{"baseTimeNanoseconds": {BASE_NS}, "traceEvents": [\n'.encode()
        + b'{"ph": "X", "cat": "c", "name": "a", "pid": 77, "tid": 7, "ts": 2, "dur": 1, "args": {"x": [tru]}}\n]}'
    )
    rc, err, out = _merge(tmp_path, trace, extra=("--window", "0:1"))
    assert (rc, err) == (
        1,
        f"tracefuse: error: {trace}: invalid JSON: lexical error: invalid string in json text. while counting "
        "events (at event #0, byte 157)",  # the "]" that ends "tru": where the parser stops
    )


def test_info_collectives_with_invalid_utf8_in_a_kernels_args(tmp_path: Path, path_kind: str) -> None:
    """A projected read kept a kernel's args raw; decoding them later raised msgspec's
    DecodeError: exit 70. Now the read refuses the invalid UTF-8 and info says BROKEN."""
    good = '{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "pid": 0, "tid": 7, "ts": 6, "dur": 2, '
    paths = []
    for r in (0, 1):
        body = good + ('"args": {"S\xffeq": 1}}' if r else '"args": {"Seq": 1}}')
        data = f'{{"distributedInfo": {{"rank": {r}, "world_size": 2}}, "baseTimeNanoseconds": {BASE_NS}, '
        data += '"traceEvents": [\n' + OKEV + ",\n" + body + "\n]}"
        paths.append(tmp_path / f"r{r}.json")
        paths[-1].write_bytes(data.encode("latin-1"))
    for flags in (("--collectives",), ("--align",), ("--collectives", "--json")):
        rc, out, err = cli("info", *flags, *paths)
        assert rc == 1 and "internal error" not in err, (flags, err)
    rc, out, err = cli("info", "--collectives", *paths)
    assert f"BROKEN {paths[1]}: invalid JSON: lexical error: invalid bytes in UTF8 string." in out

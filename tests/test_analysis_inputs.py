"""Issue 39 (part A, items 1 and 7): one answer for every input, analysis side.

Each case is a 2-rank run with one hostile value where the analysis reads it: a step
number no ``int()`` takes (``ProfilerStep#²``), collective times at and beyond the
analysis' range (2**62 ns from the base) and the clock's (2**63 ns), a step number and
a ``distributedInfo.rank`` of 2**64, a ``host_name`` of ``__proto__``. Every command
that analyses (``info`` with each flag, ``report``, ``diff`` of the run against itself, ``merge --link-collectives``,
``verify`` of what it wrote) and ``stragglers()`` gives the same answer with the C
kernel and without it (``TRACEFUSE_KERNEL=0``): never exit 70, and the exact answer
each case is pinned to below.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
from hostile import BASE_NS, cli, trace_bytes

import tracefuse_stream
from tracefuse_stream import native
from tracefuse_stream.errors import TraceFuseError

DATA_RE = re.compile(r'<script type="application/json" id="tracefuse-report">(.*?)</script>', re.S)
_TIMES = re.compile(r"\d+\.\d+ s \([\d.]+ MB/s\)|\d+\.\d+ s\b")
FAR_US = 2**62 // 1000  # the analysis' range, in whole microseconds
CLOCK_US = 2**63 // 1000  # the merge's clock
HOURS_18_5 = int(18.5 * 3600e9)


def collective(ts: Any, seq: int = 1, dur: Any = 50) -> Dict[str, Any]:
    return {
        "ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32", "pid": 0, "tid": 7,
        "ts": ts, "dur": dur, "args": {"Collective name": "allreduce", "Process Group Name": "0", "Seq": seq},
    }  # fmt: skip


def step(n: Any, ts: Any, dur: Any = 1000) -> Dict[str, Any]:
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": f"ProfilerStep#{n}",
        "pid": 77,
        "tid": 77,
        "ts": ts,
        "dur": dur,
    }


def write_run(
    folder: Path,
    events_of_rank: Any,
    ranks: Tuple[int, ...] = (0, 1),
    host: Any = None,
    shift: Any = None,
    world: Optional[int] = None,
) -> List[Path]:
    """One file per rank; ``host``: the ``host_name`` written before ``traceEvents``;
    ``shift(i)``: the i-th file's base after ``BASE_NS`` (default ``i`` ns: each rank its
    own process, as the run check wants); ``world``: its ``world_size`` (default: the ranks)."""
    paths = []
    for i, r in enumerate(ranks):
        base = BASE_NS + (i if shift is None else shift(i))
        data = trace_bytes(events_of_rank(i), base_ns=base, rank=r, world=world or len(ranks))
        if host is not None:
            data = data.replace(b"{", b'{"host_name": ' + json.dumps(host).encode() + b", ", 1)
        path = folder / f"r{i}.json"
        path.write_bytes(data)
        paths.append(path)
    return paths


CASES: Dict[str, Dict[str, Any]] = {
    "superscript_step": {"events": lambda i: [step("²", 0), collective(10 + 5 * i)]},
    "arabic_indic_step": {"events": lambda i: [step("٣", 0), collective(10 + 5 * i)]},
    "ts_beyond_clock": {"events": lambda i: [step(1, 0), collective(CLOCK_US + 10 + i)]},
    "ts_beyond_clock_no_step": {"events": lambda i: [collective(CLOCK_US + 10 + i)]},
    "ts_beyond_range": {"events": lambda i: [step(1, FAR_US, 10**6), collective(FAR_US + 10 + 5 * i)]},
    "dur_beyond_range": {"events": lambda i: [step(1, 0, FAR_US + 1), collective(10 + 5 * i)]},
    "step_2_64": {"events": lambda i: [step(2**64, 0), collective(10 + 5 * i)]},
    "rank_2_64": {"events": lambda i: [step(1, 0), collective(10 + 300 * i)], "ranks": (0, 2**64)},
    "host_proto": {"events": lambda i: [step(1, 0), collective(10 + 5 * i)], "host": "__proto__"},
    "host_constructor": {"events": lambda i: [step(1, 0), collective(10 + 5 * i)], "host": "constructor"},
    # the run check (item 2): rank 1 18.5 h after rank 0; on one host, 60 s after rank 0's
    # recording ended; one recording (ns times) under two ranks; 2 of a world of 4
    "mixed_runs": {"events": lambda i: [step(1, 0), collective(10)], "shift": lambda i: i * HOURS_18_5, "refused": True},
    "one_host_disjoint": {"events": lambda i: [step(1, 0), collective(10)], "host": "h",
                          "shift": lambda i: i * 60 * 10**9, "refused": True},
    "edited_copies": {"events": lambda i: [step(1, 0.5), collective(10.25)], "shift": lambda i: 0, "refused": True},
    "missing_ranks": {"events": lambda i: [step(1, 0), collective(10 + 5 * i)], "world": 4},
}  # fmt: skip
#: the commands whose answer would be wrong on a refused case: exit 2 (a usage error naming the files)
REFUSING = {"info-collectives", "info-json", "report", "diff"}

COMMANDS = {
    "info": ("info",),
    "info-steps": ("info", "--steps"),
    "info-align": ("info", "--align"),
    "info-collectives": ("info", "--collectives"),
    "info-json": ("info", "--json", "--collectives", "--steps", "--align"),
    "report": ("report",),
    "merge-links": ("merge", "--link-collectives", "-q", "-j", "1"),
    "diff": ("diff", "--json"),  # the run against itself
}


def _case(tmp: Path, name: str) -> List[Path]:
    c = CASES[name]
    return write_run(tmp, c["events"], c.get("ranks", (0, 1)), c.get("host"), c.get("shift"), c.get("world"))


def _answer(
    tmp: Path, command: str, inputs: List[Path], kernel: str, monkeypatch: pytest.MonkeyPatch
) -> tuple:
    """(exit code, stdout, stderr, what it wrote: the page's JSON or the merged bytes,
    and verify's answer on a merged file)."""
    monkeypatch.setenv("TRACEFUSE_KERNEL", kernel)
    out = tmp / ("page.html" if command == "report" else "merged.json")
    args: List[Any] = list(COMMANDS[command]) + inputs
    if command == "diff":
        args = [*COMMANDS[command], inputs[0].parent, inputs[0].parent]
    if command in ("report", "merge-links"):
        args += ["-o", out, "--force"]
    rc, stdout, stderr = cli(*args)
    written: Any = None
    verified: Any = None
    if out.exists():
        if command == "report":
            m = DATA_RE.search(out.read_text())
            assert m, "no embedded JSON"
            written = json.loads(m.group(1))
        else:
            written = out.read_bytes()
            v_rc, v_out, _ = cli("verify", out, "--against", *inputs)
            verified = (v_rc, _TIMES.sub("T", v_out))
        out.unlink()
    return rc, _TIMES.sub("T", stdout), stderr, written, verified


def _stragglers(inputs: List[Path], kernel: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TRACEFUSE_KERNEL", kernel)
    try:
        return tracefuse_stream.stragglers([str(p) for p in inputs])
    except TraceFuseError as e:  # the package's own errors are an answer; anything else fails the test
        return f"{type(e).__name__}: {e}"


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_answer_on_both_paths(
    case: str, command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = _case(tmp_path, case)
    python = _answer(tmp_path, command, inputs, "0", monkeypatch)
    if CASES[case].get("refused") and command in REFUSING:
        assert python[0] == 2 and "needs one run, each rank once" in python[2], python[:3]
        assert str(inputs[0]) in python[2] or str(inputs[1]) in python[2]
    else:  # diff: a run whose steps cannot be compared is a usage error (2) naming what differs
        assert python[0] in ((0, 1, 2) if command == "diff" else (0, 1)), python[:3]
    # the warning, naming what is wrong (a merge reads no file whole before it writes: it
    # sees the first events only, here 60 s apart, under the ten minutes of plan/runcheck.py)
    if (CASES[case].get("refused") or case == "missing_ranks") and (case, command) != (
        "one_host_disjoint",
        "merge-links",
    ):
        assert (
            "runs" in python[1] + python[2]
            or "one recording" in python[1] + python[2]
            or ("rank(s) 2-3" in python[1] + python[2])
        ), python[:3]
    assert "internal error" not in python[2] and "Traceback" not in python[2]
    if native.kernel is not None:
        assert _answer(tmp_path, command, inputs, "1", monkeypatch) == python


@pytest.mark.parametrize("case", sorted(CASES))
def test_stragglers_one_answer(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = _case(tmp_path, case)
    python = _stragglers(inputs, "0", monkeypatch)
    if CASES[case].get("refused"):
        assert python.startswith("UsageError: stragglers() needs one run, each rank once"), python
    else:
        assert isinstance(python, dict), python
    if native.kernel is not None:
        assert _stragglers(inputs, "1", monkeypatch) == python


# ------------------------------------------------------------------ the exact answers
@pytest.mark.parametrize("case", ["superscript_step", "arabic_indic_step"])
def test_a_step_number_not_in_ascii_digits_is_no_step(case: str, tmp_path: Path) -> None:
    """``ProfilerStep#²``: str.isdigit() said yes, int() no (exit 70 in info --collectives,
    report, merge --link-collectives; stragglers() raised ValueError)."""
    inputs = _case(tmp_path, case)
    rc, out, err = cli("info", "--steps", *inputs)
    assert (rc, err) == (0, "")
    assert out.count("ProfilerSteps none") == 2
    rc, out, err = cli("info", "--json", "--collectives", *inputs)
    assert (rc, err) == (0, "")
    c = json.loads(out)["collectives"]
    assert [(i["name"], i["step"]) for i in c["instances"]] == [("allreduce", None)]
    rep = tracefuse_stream.stragglers([str(p) for p in inputs])
    assert [row["step"] for row in rep["by_step"]] == [None]
    rc, _, err = cli("merge", "--link-collectives", "--steps", "1", *inputs, "-o", tmp_path / "m.json")
    assert (rc, err.strip()) == (
        2,
        f"tracefuse: error: step 1 not found on rank 0 ({inputs[0]}); steps present: none (no ProfilerStep#N events)",
    )


def test_a_collective_beyond_the_clock(tmp_path: Path) -> None:
    """ts >= 2**63 ns: exit 70 before (Timeline.segments' int64 cuts); now the analysis
    leaves it out with a note, and the merge refuses it naming the file and the event."""
    inputs = _case(tmp_path, "ts_beyond_clock")
    rc, out, err = cli("info", "--collectives", "--json", *inputs)
    assert (rc, err) == (0, "")
    c = json.loads(out)["collectives"]
    assert c["instances"] == []
    assert [n for n in c["notes"] if "left out" in n] == [
        f"rank {r}: 1 collective or ProfilerStep event(s) left out: a ts or dur beyond 2**62 ns from the "
        "file's base, outside the range the analysis reads"
        for r in (0, 1)
    ]
    rc, _, err = cli("merge", "--link-collectives", *inputs, "-o", tmp_path / "m.json", "-q")
    assert (rc, err.strip()) == (
        1,
        f"tracefuse: error: {inputs[0]}: bad ts {CLOCK_US + 10} is beyond any clock (int64 nanoseconds) "
        "(at event #1); use --salvage to drop such events",
    )


def test_a_collective_beyond_the_range_has_no_why_of_0_percent(tmp_path: Path) -> None:
    """2**62..2**63 ns: the collectives were matched while the timeline skipped their
    events (every why said 0% explained, with no reason); now they are left out with a
    note, and the merge (whose clock holds them) still writes them, unlinked."""
    inputs = _case(tmp_path, "ts_beyond_range")
    rc, out, err = cli("info", "--collectives", *inputs)
    assert (rc, err) == (0, "")
    assert "0 instance(s)" in out and "explained" not in out
    assert out.count("collective or ProfilerStep event(s) left out") == 2
    rc, _, err = cli("merge", "--link-collectives", *inputs, "-o", tmp_path / "m.json", "-q")
    assert (rc, err) == (0, "")
    merged = json.loads((tmp_path / "m.json").read_bytes())["traceEvents"]
    assert sum(1 for e in merged if e.get("cat") == "kernel") == 2


def test_integers_beyond_64_bits_in_the_report(tmp_path: Path) -> None:
    """A step number or rank of 2**64: orjson refused them (exit 70); the page's JSON
    now says them exactly, as info --json does."""
    inputs = _case(tmp_path, "step_2_64")
    rc, out, err = cli("report", *inputs, "-o", tmp_path / "p.html")
    assert rc == 0 and "internal" not in err
    page = json.loads(DATA_RE.search((tmp_path / "p.html").read_text()).group(1))  # type: ignore[union-attr]
    info = json.loads(cli("info", "--json", "--collectives", *inputs)[1])
    assert [r["step"] for r in page["collectives"]["by_step"]] == [2**64]
    assert [r["step"] for r in info["collectives"]["by_step"]] == [2**64]
    inputs = _case(tmp_path, "rank_2_64")
    rc, out, err = cli("report", *inputs, "-o", tmp_path / "q.html")
    assert rc == 0 and "internal" not in err
    page = json.loads(DATA_RE.search((tmp_path / "q.html").read_text()).group(1))  # type: ignore[union-attr]
    assert [r["rank"] for r in page["collectives"]["ranks"]] == [0, 2**64]
    assert page["collectives"]["hosts"] == {"0": None, str(2**64): None}
    rc, _, err = cli("merge", "--link-collectives", *inputs, "-o", tmp_path / "m.json", "-q")
    assert (rc, err.strip()) == (
        1,
        f"tracefuse: error: {inputs[1]}: rank {2**64} is outside 0..214746, the range the pid rule supports",
    )


# ------------------------------------------------------------------ the page, in a browser
@pytest.mark.parametrize("host", ["__proto__", "constructor", "hasOwnProperty", "a\x01b"])
def test_browser_draws_a_host_named_like_an_objects_key(host: str, tmp_path: Path) -> None:
    """``host_name: "__proto__"``: the page was blank (gIndex["__proto__"] is
    Object.prototype), not even its "could not draw" message."""
    from test_report_page import body_attrs, cells, dump_dom

    inputs = write_run(tmp_path, CASES["host_proto"]["events"], host=host)
    assert cli("report", *inputs, "-o", tmp_path / "p.html")[0] == 0
    dom = dump_dom(tmp_path / "p.html")
    attrs = body_attrs(dom)
    assert (attrs.get("data-rendered"), attrs.get("data-errors")) == ("ok", "0"), attrs.get("data-error-text")
    assert sorted((c["rank"], c["step"]) for c in cells(dom)) == [(0, "1"), (1, "1")]
    assert "could not draw" not in dom


def test_browser_an_error_reading_the_data_says_could_not_draw(tmp_path: Path) -> None:
    """An exception before drawing (here: ``by_step`` not a list) shows the message too."""
    from test_report_page import body_attrs, dump_dom

    from tracefuse_stream.report.page import render_page

    page = tmp_path / "bad.html"
    page.write_text(render_page({"collectives": {"ranks": [{"rank": 0}], "by_step": 5}, "page": {}}))
    dom = dump_dom(page)
    assert body_attrs(dom).get("data-rendered") == "error"
    assert "the page could not draw itself: TypeError" in dom


# ------------------------------------------------------------------ selections (item 4)
SELECTIONS = {
    "report-steps": (["report", "--steps", "7"], "step 7 not found in "),
    "report-range": (["report", "--steps", "1:60"], "step 60 not found in "),
    "report-cycle": (["report", "--cycle", "2"], "--cycle 2: "),
    "report-ranks": (["report", "--ranks", "9"], "--ranks asks for rank(s) 9 but the inputs have ranks 0-1"),
    "info-ranks": (["info", "--collectives", "--json", "--ranks", "9"], "--ranks asks for rank(s) 9 "),
    "diff-steps": (["diff", "--steps", "1:7"], "step 7 not found in BASE ("),
    "diff-new-steps": (["diff", "--new-steps", "3"], "step 3 not found in NEW ("),
    "diff-cycle": (["diff", "--new-cycle", "2"], "--cycle 2: "),
}


@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_selections_that_do_not_exist(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step, cycle or rank that is not there: exit 2 with merge's words, no page, on
    both paths alike (report and diff took 'nothing matched' or part of a range)."""
    inputs = write_run(tmp_path, lambda i: [step(1, 0), collective(10 + 5 * i)])
    args, words = SELECTIONS[name]
    where = [tmp_path, tmp_path] if args[0] == "diff" else inputs
    out = ["-o", tmp_path / "p.html"] if args[0] == "report" else []
    answers = []
    for kernel in ("0", "1") if native.kernel is not None else ("0",):
        monkeypatch.setenv("TRACEFUSE_KERNEL", kernel)
        answers.append(cli(*args, *where, *out, "-j", "1"))
    rc, stdout, stderr = answers[0]
    assert (rc, stdout) == (2, "") and stderr.startswith(f"tracefuse: error: {words}"), answers[0]
    assert not (tmp_path / "p.html").exists()
    assert all(a == answers[0] for a in answers)

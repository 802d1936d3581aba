"""Malformed numbers get one answer (issue 21, item 3).

A ``ts`` or ``dur`` that is a string, ``null``, a boolean, NaN/Infinity or beyond any
clock (int64 nanoseconds) is malformed. Strict mode: the merge fails with the input
error that names the file and the event; ``--salvage``: that one event is dropped and
counted, everything else of the rank is merged. The answer must not depend on the
options (``--window``, ``--steps``), on the rank's time shift, on which other ranks
are merged, or on whether the compiled kernel or the Python path rewrites the rank.

Each case writes two small ranks as JSON text (so every value form is written as it
would appear in a file): rank 1 holds the malformed value in its 4th event (a CPU op,
the 2nd of its kind; index 4 counting the metadata event), rank 0 is a clean partner
whose base is earlier (rank 1 shifted), later (rank 1 not shifted) or absent (an old
epoch-``ts`` trace).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
from conftest import run_cli

import tracefuse_stream
from tracefuse_stream import native
from tracefuse_stream.errors import InputError

BASE = 1_700_000_000_000_000_000
BAD_INDEX = 4  # the malformed event's index in traceEvents (0: the metadata event)

#: the value forms, as JSON text; NaN/Infinity are not JSON (the strict readers say
#: "invalid JSON" at that event; salvage turns them into null, then drops the event)
FORMS = {
    "string": '"1101.5"',
    "null": "null",
    "true": "true",
    "false": "false",
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
    "1e30": "1e30",
    "-1e30": "-1e30",
    "int>int64ns": "100000000000000000000",
    "object": '{"us": 1}',
}
NOT_JSON = {"NaN", "Infinity", "-Infinity"}

#: options under which the answer must stay the same
OPTIONS: Dict[str, Dict[str, Any]] = {
    "plain": {},
    "window": {"window_ms": (0, 10)},  # all of it: the filter runs, the first event moves with the partner
    "steps": {"steps": (1, 3), "step_rank": 1},
    "pyfunc+args-none": {"include_pyfunc": True, "args": "none"},
}
#: rank 0's base: rank 1 (base BASE) shifted, unshifted, or next to an epoch-ts trace
PARTNERS = {"shifted": BASE - 1000, "unshifted": BASE + 1000, "epoch": None}


def _events(epoch: bool) -> List[Dict[str, Any]]:
    t0 = 1_700_000_000_000_000 if epoch else 1000  # epoch us for an old trace
    evs: List[Dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}
    ]
    for i in range(5):
        evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                    "ts": t0 + i * 100, "dur": 90.5})  # fmt: skip
        evs.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
                    "ts": t0 + 1.5 + i * 100, "dur": 10.25})  # fmt: skip
    return evs


def _write(path: Path, rank: int, base: Optional[int], bad: Optional[str] = None, field: str = "ts") -> None:
    evs = _events(epoch=base is None)
    parts = []
    for i, ev in enumerate(evs):
        text = json.dumps(ev)
        if i == BAD_INDEX and bad is not None:
            ev = dict(ev, **{field: "@@"})
            text = json.dumps(ev).replace('"@@"', bad)
        parts.append(text)
    head: Dict[str, Any] = {"distributedInfo": {"rank": rank, "world_size": 2}}
    if base is not None:
        head["baseTimeNanoseconds"] = base
    path.write_text(json.dumps(head)[:-1] + ', "traceEvents": [\n' + ",\n".join(parts) + "\n]}\n")


@pytest.fixture(params=["kernel", "python"])
def path_kind(request: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "kernel":
        if not native.available():
            pytest.skip("the compiled kernel is not built here: only the Python path runs")
        monkeypatch.setenv("TRACEFUSE_KERNEL", "1")
    else:
        monkeypatch.setenv("TRACEFUSE_KERNEL", "0")
    return str(request.param)


def _inputs(tmp: Path, form: str, field: str, partner: str) -> List[str]:
    r0, r1 = tmp / "r0.json", tmp / "r1.json"
    _write(r0, 0, PARTNERS[partner])
    _write(r1, 1, BASE, FORMS[form], field)
    return [str(r0), str(r1)]


@pytest.mark.parametrize("option", sorted(OPTIONS))
@pytest.mark.parametrize("field", ["ts", "dur"])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_strict_names_file_and_event(
    tmp_path: Path, path_kind: str, form: str, field: str, option: str
) -> None:
    inputs = _inputs(tmp_path, form, field, "shifted")
    with pytest.raises(InputError) as err:
        tracefuse_stream.merge(inputs, str(tmp_path / "out.json"), jobs=1, progress=False, **OPTIONS[option])
    e = err.value
    assert e.path == inputs[1]
    what = "invalid JSON" if form in NOT_JSON else f"bad {field} "
    assert what in e.problem, str(e)
    # the event by its index, or (a --steps bound is not the malformed one) by name
    assert e.event_index == BAD_INDEX, str(e)
    assert not (tmp_path / "out.json").exists()


def _rank1(out: Path) -> List[Dict[str, Any]]:
    data = json.loads(out.read_bytes())
    return [e for e in data["traceEvents"] if e["ph"] != "M" and e["args"]["rank"] == 1]


@pytest.mark.parametrize("option", sorted(OPTIONS))
@pytest.mark.parametrize("field", ["ts", "dur"])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_salvage_drops_and_counts_the_event(
    tmp_path: Path, path_kind: str, form: str, field: str, option: str
) -> None:
    """The same rank-1 events (all but the malformed one) with every partner, and the
    salvage record counts exactly that one event."""
    kept = None
    for partner in PARTNERS:
        d = tmp_path / partner
        d.mkdir()
        out = d / "out.json"
        s = tracefuse_stream.merge(
            _inputs(d, form, field, partner),
            str(out),
            jobs=1,
            progress=False,
            salvage=True,
            **OPTIONS[option],
        )
        (r1,) = [r for r in s.ranks if r.rank == 1]
        assert r1.salvage is not None and r1.salvage["events_skipped"] == 1, r1.salvage
        # which events of rank 1 survived: by name and original order (ts moves with the base)
        names = [(e["name"], e["dur"]) for e in _rank1(out)]
        if kept is None:
            kept = names
        assert names == kept, partner
    assert kept is not None
    window = OPTIONS[option].get("window_ms") or OPTIONS[option].get("steps")
    if window is None:  # nothing else dropped: 9 of 10 slices, the 2nd aten::add missing
        assert kept == [
            (e["name"], e["dur"]) for i, e in enumerate(_events(False)) if i not in (0, BAD_INDEX)
        ]


@pytest.mark.parametrize("form", ["string", "null", "1e30", "NaN"])
def test_cli_exit_codes(tmp_path: Path, form: str) -> None:
    """No input gives exit 70: 1 with the input error, 4 when salvaged (under every option)."""
    inputs = _inputs(tmp_path, form, "ts", "shifted")
    for opts in ([], ["--window", "0:1"], ["--steps", "1:3", "--step-rank", "0"]):
        out = str(tmp_path / "out.json")
        r = run_cli("merge", *inputs, "-o", out, "--force", "-q", *opts)
        err = r.stderr_text  # type: ignore[attr-defined]
        assert r.returncode == 1 and "r1.json" in err and "event #4" in err, (opts, err)
        r = run_cli("merge", *inputs, "-o", out, "--force", "-q", "--salvage", *opts)
        assert r.returncode == 4, (opts, r.stderr_text)  # type: ignore[attr-defined]


def test_kernel_and_python_write_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not native.available():
        pytest.skip("the compiled kernel is not built here: nothing to compare with")
    outs = []
    for k in ("1", "0"):
        monkeypatch.setenv("TRACEFUSE_KERNEL", k)
        d = tmp_path / k
        d.mkdir()
        for field in ("ts", "dur"):
            out = d / f"{field}.json"
            tracefuse_stream.merge(
                _inputs(d, "null", field, "shifted"), str(out), jobs=1, progress=False, salvage=True
            )
            outs.append(out.read_bytes().split(b'"tracefuse":')[0])
    assert outs[:2] == outs[2:]

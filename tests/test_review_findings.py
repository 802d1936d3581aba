"""Issue 21, item 5: the review's smaller findings, one test (or a few) each.

- ids of -1 and null: what docs/rewrite-rules.md says they do;
- input-validation errors carry the kind of what is wrong (BAD_EVENT for valid JSON
  with a bad id, not INVALID_JSON);
- an event dropped by ``--salvage`` leaves no empty named process behind;
- a kernel copy (copy_file_range) failing midway never duplicates bytes;
- a ``filter_fn`` that cannot be pickled under the spawn start method runs in-process
  with a clear warning, never a pickling traceback;
- temporaries of a killed merge (SIGKILL) are removed by the next merge to that output;
- the default worker count honours CPU affinity and the cgroup CPU quota.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from conftest import REPO, load_output, run_cli

from tracefuse_stream import merge, native, workers
from tracefuse_stream.errors import ErrorKind, InputError
from tracefuse_stream.write import atomic, splice

SAMPLE = REPO / "fixtures" / "sample_run"
KERNEL_MODES = [
    pytest.param("1", id="kernel"),
    pytest.param("0", id="python"),
]


def _paths(monkeypatch: pytest.MonkeyPatch, kernel: str) -> None:
    """Select the C kernel or the Python path for merges in this process."""
    if kernel == "1" and native.kernel is None:
        pytest.skip("the C kernel is not built here (python setup.py build_ext --inplace)")
    monkeypatch.setenv("TRACEFUSE_KERNEL", kernel)


def _write(path: Path, events: List[Dict[str, Any]], rank: int = 0, **top: Any) -> Path:
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": rank}, **top}))
    return path


def _op(name: str, pid: int = 1, ts: int = 0, **args: Any) -> Dict[str, Any]:
    ev: Dict[str, Any] = {"ph": "X", "cat": "cpu_op", "name": name, "pid": pid, "tid": 1, "ts": ts, "dur": 1}
    if args:
        ev["args"] = args
    return ev


# --------------------------------------------------------------------------- ids of -1 / null
@pytest.mark.parametrize("kernel", KERNEL_MODES)
def test_minus_one_and_null_ids_as_documented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    """docs/rewrite-rules.md: null is kept in every link arg; -1 (Kineto's "unknown")
    is kept in the link args that carry it; in the args that must be ids
    (correlation, External id) and in a flow's id it is an input error naming the file
    and event (BAD_EVENT), and --salvage drops that event and counts it."""
    _paths(monkeypatch, kernel)
    kept_args = {
        "wait_on_cuda_event_record_corr_id": -1,
        "Python parent id": -1,
        "Python id": -1,
        "wait_on_cuda_event_id": -1,
        "correlation": None,
        "External id": None,
    }
    ok = [_op("first", ts=0), _op("kept", ts=1, **kept_args)]
    for r in (0, 1):
        _write(tmp_path / f"r{r}.json", ok, rank=r)
    out = tmp_path / "m.json"
    merge([tmp_path / "r0.json", tmp_path / "r1.json"], str(out), force=True)
    got = [ev["args"] for ev in load_output(out)["traceEvents"] if ev.get("name") == "kept"]
    assert got == [{**kept_args, "rank": 0}, {**kept_args, "rank": 1}]

    flow = {"ph": "s", "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 2, "id": -1, "bp": "e"}
    for bad, what in [
        (_op("bad", ts=2, correlation=-1), "args['correlation'] -1"),
        (_op("bad", ts=2, **{"External id": -1}), "args['External id'] -1"),
        (flow, "flow id -1"),
    ]:
        src = _write(tmp_path / "bad.json", [_op("first"), bad])
        with pytest.raises(InputError) as ei:
            merge([src], str(tmp_path / "x.json"), force=True)
        e = ei.value
        assert (e.kind, e.event_index, e.path) == (ErrorKind.BAD_EVENT, 1, str(src)), str(e)
        assert what in str(e) and "salvage=True" in str(e)
        summary = merge([src], str(out), force=True, salvage=True)
        assert [ev.get("name") for ev in load_output(out)["traceEvents"] if ev.get("ph") != "M"] == ["first"]
        r0 = summary.ranks[0]
        assert (r0.events_out - r0.metadata_out, r0.salvage["events_skipped"]) == (1, 1), r0


# --------------------------------------------------------------------------- error kinds
def test_validation_errors_carry_their_kind(tmp_path: Path) -> None:
    """Decisions read the kind (errors.py): a well-formed file with a bad value is
    not INVALID_JSON."""

    def kind_of(name: str, text: str) -> ErrorKind:
        p = tmp_path / name
        p.write_text(text)
        with pytest.raises(InputError) as ei:
            merge([p], str(tmp_path / "out.json"), force=True)
        assert ei.value.path == str(p)
        return ei.value.kind

    ev = json.dumps(_op("a"))
    cases = {
        "bad_id.json": ('{"traceEvents": [%s]}' % json.dumps(_op("a", correlation="x")), ErrorKind.BAD_EVENT),
        "flow_no_id.json": (
            '{"traceEvents": [{"ph": "s", "cat": "c", "name": "n", "pid": 1, "tid": 1, "ts": 1}]}',
            ErrorKind.BAD_EVENT,
        ),
        "not_object.json": ('{"traceEvents": [%s, 7]}' % ev, ErrorKind.BAD_EVENT),
        "args_list.json": (
            '{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "args": [1]}]}',
            ErrorKind.BAD_EVENT,
        ),
        "base.json": ('{"baseTimeNanoseconds": "soon", "traceEvents": [%s]}' % ev, ErrorKind.BAD_VALUE),
        "top_number.json": ("42", ErrorKind.NOT_A_TRACE),
        "events_object.json": ('{"traceEvents": {"a": 1}}', ErrorKind.NOT_A_TRACE),
        "no_events.json": ('{"schemaVersion": 1}', ErrorKind.NOT_A_TRACE),
        "syntax.json": ('{"traceEvents": [%s, {"ph": "X" "name": 1}]}' % ev, ErrorKind.INVALID_JSON),
        "cut.json": ('{"traceEvents": [%s, {"ph": "X", "na' % ev, ErrorKind.TRUNCATED),
    }
    got = {name: kind_of(name, text) for name, (text, _) in cases.items()}
    assert got == {name: kind for name, (_, kind) in cases.items()}
    with pytest.raises(InputError) as ei:
        merge([tmp_path / "absent.json"], str(tmp_path / "out.json"), force=True)
    assert ei.value.kind is ErrorKind.MISSING
    assert InputError("f", "x", event_index=3).kind is ErrorKind.BAD_EVENT  # the default with an event
    assert InputError("f", "x").kind is ErrorKind.INVALID_JSON


# --------------------------------------------------------------------------- salvage leaves no empty process
@pytest.mark.parametrize("kernel", KERNEL_MODES)
def test_salvage_drop_leaves_no_empty_named_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    _paths(monkeypatch, kernel)
    events = [
        _op("good", pid=1),
        _op("bad id", pid=2, ts=1, correlation=-1),  # pid 2's only event
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "pid": 8, "tid": 3, "ts": 2},  # no id: pid 8's only event
        {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "two"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 1, "args": {"name": "main"}},
        _op("later", pid=3, ts=3),
        _op("bad again", pid=3, ts=4, correlation=-1),  # pid 3 keeps its earlier event
    ]
    src = _write(tmp_path / "s.json", events)
    out = tmp_path / "m.json"
    summary = merge([src], str(out), force=True, salvage=True)
    evs = load_output(out)["traceEvents"]
    assert [ev["name"] for ev in evs if ev.get("ph") != "M"] == ["good", "later"]
    event_pids = {ev["pid"] for ev in evs if ev.get("ph") != "M"}
    assert event_pids == {10001, 10003}
    assert {ev["pid"] for ev in evs if ev.get("ph") == "M"} == event_pids  # no track without events
    r0 = summary.ranks[0]
    assert (r0.events_out - r0.metadata_out, r0.salvage["events_skipped"]) == (2, 3), r0


# --------------------------------------------------------------------------- copy_file_range midway
def test_kernel_copy_failing_midway_never_duplicates_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = getattr(os, "copy_file_range", None)
    if real is None:
        pytest.skip("no os.copy_file_range on this platform")
    expected = tmp_path / "plain.json"
    monkeypatch.setattr(os, "copy_file_range", None, raising=False)
    merge([SAMPLE], str(expected), jobs=1)  # the portable copy only
    calls = {"n": 0, "partial": 0}

    def flaky(src: int, dst: int, count: int, *a: Any) -> int:
        """Copies a first part for real, then fails as a filesystem giving up would."""
        calls["n"] += 1
        if calls["n"] % 2 == 1:
            calls["partial"] += 1
            return real(src, dst, max(1, min(count, 4096) // 2), *a)
        raise OSError(22, "Invalid argument")  # EINVAL: falls back to the portable copy

    monkeypatch.setattr(os, "copy_file_range", flaky)
    out = tmp_path / "flaky.json"
    merge([SAMPLE], str(out), jobs=1)
    assert calls["partial"] >= 4  # every rank's fragment went through the failing copy
    assert out.read_bytes() == expected.read_bytes()

    for codec in (".json.gz",):  # gzip: the CRC and sizes would not match either
        calls["n"] = 0
        merge([SAMPLE], str(tmp_path / f"flaky{codec}"), jobs=1)
        monkeypatch.setattr(os, "copy_file_range", None, raising=False)
        merge([SAMPLE], str(tmp_path / f"plain{codec}"), jobs=1)
        monkeypatch.setattr(os, "copy_file_range", flaky)
        assert gzip.open(tmp_path / f"flaky{codec}").read() == gzip.open(tmp_path / f"plain{codec}").read()


def test_splicer_rewinds_to_the_fragment_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit: bytes before the fragment stay, the partial copy is cut, the
    fragment follows once."""
    real = getattr(os, "copy_file_range", None)
    if real is None:
        pytest.skip("no os.copy_file_range on this platform")
    frag = tmp_path / "frag"
    frag.write_bytes(bytes(range(256)) * 64)
    piece = splice.Piece(
        path=str(frag), data=None, crc=0, length=frag.stat().st_size, size=frag.stat().st_size
    )
    done = []

    def half_then_fail(src: int, dst: int, count: int, *a: Any) -> int:
        if not done:
            done.append(1)
            return real(src, dst, 1000, *a)
        raise OSError(18, "Invalid cross-device link")  # EXDEV

    monkeypatch.setattr(os, "copy_file_range", half_then_fail)
    with open(tmp_path / "out", "wb") as f:
        s = splice.Splicer(f, "json")
        s._w(b"HEAD")
        s.add(piece)
        s._w(b"TAIL")
        s.finish()
    assert (tmp_path / "out").read_bytes() == b"HEAD" + frag.read_bytes() + b"TAIL"
    assert s.size == 8 + len(frag.read_bytes())


# --------------------------------------------------------------------------- filter_fn under spawn
def _spawn_context() -> Any:
    return multiprocessing.get_context("spawn")


def test_unpicklable_filter_fn_under_spawn_runs_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """macOS' default start method pickles what workers get: a lambda cannot be. The
    merge then runs in this process, says why once, and writes the same bytes."""
    expected = tmp_path / "one.json"
    merge([SAMPLE], str(expected), jobs=1, filter_fn=lambda ev: ev.get("cat") != "cpu_instant_event")
    monkeypatch.setattr(workers, "_context", _spawn_context)
    out = tmp_path / "spawn.json"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = merge([SAMPLE], str(out), jobs=2, filter_fn=lambda ev: ev.get("cat") != "cpu_instant_event")
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "filter_fn cannot be sent to worker processes" in msgs[0]
    assert "'spawn'" in msgs[0] and "module level" in msgs[0]
    assert out.read_bytes() == expected.read_bytes()
    assert summary.events_out > 0


def test_picklable_work_under_spawn_is_not_refused() -> None:
    assert workers._unpicklable(len, [(1,), (2,)]) is None
    why = workers._unpicklable(len, [lambda: 0])
    assert why is not None and "lambda" in why


# --------------------------------------------------------------------------- leftovers of a killed merge
def _leftovers(d: Path) -> List[str]:
    return sorted(
        p.name
        for p in d.iterdir()
        if p.name.endswith(atomic.TMP_SUFFIX) or p.name.startswith(atomic.FRAG_PREFIX)
    )


def test_sigkilled_merge_leftovers_are_removed_by_the_next_merge(tmp_path: Path) -> None:
    """SIGKILL (the OOM killer) leaves the temporary output and the fragment directory;
    their names carry the owner's pid and host, and the next merge to that output
    removes them because that pid is gone."""
    d = tmp_path / "out"
    d.mkdir()
    target = d / "merged.json.gz"
    p = run_cli(
        "merge", SAMPLE, "-o", target, "-q", "-j", "1", env={"TRACEFUSE_TEST_SIGNAL_AFTER_BYTES": "SIGKILL:1"}
    )
    assert p.returncode == -signal.SIGKILL, p.stderr_text
    left = _leftovers(d)
    assert any(n.startswith(".merged.json.gz.") for n in left) and any(
        n.startswith(atomic.FRAG_PREFIX) for n in left
    )
    assert not target.exists()
    tag = re.escape(atomic.owner_tag().split("@")[1])
    assert all(re.search(r"[.-][0-9]+@" + tag + r"[.-]", n) for n in left), left
    # someone else's live work in the same folder stays: another target, a live pid, another host
    live = os.getppid()
    keep = [
        f".other.json.{live}@{atomic.owner_tag().split('@')[1]}.abcdefgh{atomic.TMP_SUFFIX}",  # another output
        f".merged.json.gz.{live}@{atomic.owner_tag().split('@')[1]}.abcdefgh{atomic.TMP_SUFFIX}",  # a live merge
        f".merged.json.gz.{_dead_pid()}@elsewhere-host.abcdefgh{atomic.TMP_SUFFIX}",  # another host's
        f"{atomic.FRAG_PREFIX}{live}@{atomic.owner_tag().split('@')[1]}-abcdefgh",
    ]
    for n in keep:
        (d / n).mkdir() if n.startswith(atomic.FRAG_PREFIX) else (d / n).write_bytes(b"x")
    p = run_cli("merge", SAMPLE, "-o", target, "-q")
    assert p.returncode == 0, p.stderr_text
    assert _leftovers(d) == sorted(keep)
    assert load_output(target)["traceEvents"]


def _dead_pid() -> int:
    """A pid that existed a moment ago and is gone now (its process was reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_rules(tmp_path: Path) -> None:
    dead = _dead_pid()
    host = atomic.owner_tag().split("@")[1]
    prefix = atomic.temp_prefix("t.json", str(tmp_path))
    assert prefix == f".t.json.{os.getpid()}@{host}."
    stale = tmp_path / f".t.json.{dead}@{host}.a1b2c3d4{atomic.TMP_SUFFIX}"
    stale_frag = tmp_path / f"{atomic.FRAG_PREFIX}{dead}@{host}-zz_9yy8x"
    mine = tmp_path / f"{prefix}q1w2e3r4{atomic.TMP_SUFFIX}"  # this process: alive
    odd = tmp_path / f".t.json.{dead}@{host}.short{atomic.TMP_SUFFIX}"  # not our pattern
    for f in (stale, mine, odd):
        f.write_bytes(b"x")
    stale_frag.mkdir()
    (stale_frag / "rank0.0.part").write_bytes(b"x")
    removed = atomic.remove_stale_temporaries("t.json", str(tmp_path))
    assert sorted(removed) == sorted([str(stale), str(stale_frag)])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, odd.name])


# --------------------------------------------------------------------------- default worker count
def _fake_cgroup(tmp_path: Path, files: Dict[str, str], proc: str) -> Tuple[str, str]:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    pc = tmp_path / "proc_self_cgroup"
    pc.write_text(proc)
    return str(root), str(pc)


@pytest.mark.parametrize(
    "files, proc, want",
    [
        ({"cpu.max": "400000 100000\n"}, "0::/\n", 4),  # cgroup v2 in a container: 4 CPUs
        ({"job/cpu.max": "max 100000\n", "cpu.max": "250000 100000\n"}, "0::/job\n", 3),  # parent's 2.5 -> 3
        ({"slurm/uid_1/job_7/cpu.max": "200000 100000\n"}, "0::/slurm/uid_1/job_7\n", 2),
        ({"cpu.max": "max 100000\n"}, "0::/\n", 128),  # no quota
        (
            {"cpu,cpuacct/cpu.cfs_quota_us": "400000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
            "4:cpu,cpuacct:/\n0::/\n",
            4,
        ),  # cgroup v1 (docker --cpus=4)
        ({"cpu/job/cpu.cfs_quota_us": "-1\n", "cpu/job/cpu.cfs_period_us": "100000\n"}, "3:cpu:/job\n", 128),
        ({}, "", 128),  # no cgroup information at all
    ],
    ids=["v2-root", "v2-parent", "v2-slurm", "v2-max", "v1-quota", "v1-unlimited", "none"],
)
def test_default_workers_honour_the_cgroup_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: Dict[str, str], proc: str, want: int
) -> None:
    monkeypatch.setattr(
        os, "sched_getaffinity", lambda pid: set(range(128)), raising=False
    )  # a 128-core node
    root, pc = _fake_cgroup(tmp_path, files, proc)
    assert workers.usable_cores(root, pc) == want


def test_default_workers_honour_the_affinity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """taskset / Slurm binding: 4 of 128 cores allowed gives 4, and a quota above the
    affinity does not raise it."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 17, 64, 100}, raising=False)
    root, pc = _fake_cgroup(tmp_path, {"cpu.max": "1600000 100000\n"}, "0::/\n")
    assert workers.usable_cores(root, pc) == 4
    monkeypatch.setattr(workers, "CGROUP_ROOT", root)
    monkeypatch.setattr(workers, "PROC_CGROUP", pc)
    assert workers.resolve_jobs(None, 100) == 4  # what merge(jobs=None) and -j default use
    assert workers.resolve_jobs(None, 2) == 2


def test_usable_cores_here_is_sane() -> None:
    n = workers.usable_cores()
    assert 1 <= n <= (os.cpu_count() or 1)


def test_killed_stdout_merge_fragments_are_removed_from_the_temp_dir(tmp_path: Path) -> None:
    """``-o -`` keeps its fragments in the system temp directory (TMPDIR): a killed
    merge's directory there is removed by the next merge that makes one."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp), "TRACEFUSE_TEST_SIGNAL_AFTER_BYTES": "SIGKILL:1"}
    p = run_cli("merge", SAMPLE, "-o", "-", "-q", "-j", "1", env=env)
    assert p.returncode == -signal.SIGKILL
    left = _leftovers(tmp)
    assert len(left) == 1 and left[0].startswith(atomic.FRAG_PREFIX), left
    p = run_cli("merge", SAMPLE, "-o", "-", "-q", "-j", "1", env={"TMPDIR": str(tmp)})
    assert p.returncode == 0 and json.loads(p.stdout)["traceEvents"]
    assert _leftovers(tmp) == []


def test_function_of_an_interactive_session_is_not_sent_to_spawned_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Jupyter on macOS: a filter defined in a cell pickles (by name) but a spawned
    worker cannot import the notebook's ``__main__`` to find it — in-process instead."""
    fake_main = type(sys)("__main__")  # an interactive session's __main__: no __file__

    def in_a_cell(ev: Dict[str, Any]) -> bool:
        return True

    in_a_cell.__module__ = "__main__"
    in_a_cell.__qualname__ = "in_a_cell"
    fake_main.in_a_cell = in_a_cell
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    why = workers._unpicklable(len, [(in_a_cell,)])
    assert why is not None and "in_a_cell" in why and "interactive session" in why
    fake_main.__file__ = "/work/script.py"  # a script: spawn re-imports it
    assert workers._unpicklable(len, [(in_a_cell,)]) is None

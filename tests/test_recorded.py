"""The core merge on the REAL Kineto traces recorded in the repository
(tests/data/recorded, see its README.md), so a fresh clone tests it too:

* ``ddp4``: 4-rank gloo DDP with record_shapes, with_stack and profile_memory;
* ``ddp4_samepid``: the same job with every rank in its own pid namespace, so every
  event of every rank has OS pid 1 (and the tids collide too): only
  ``distributedInfo.rank`` tells the ranks apart.

Every expectation comes from the input files (conftest's independent ``check_merge``:
exact kept counts per rank in input order, absolute ns per event, pids and flow ids
unique per rank, regenerated labels, header). One merge per job and codec/jobs
setting is made once (module fixtures) and shared by the assertions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Tuple

import pytest

from tracefuse_stream import merge

JOBS = ("ddp4", "ddp4_samepid")
CODECS = (".json", ".json.gz", ".json.zst")


@pytest.fixture(scope="module", params=JOBS)
def job(request: Any, rec_ddp4_by_rank: Dict[int, Path], rec_samepid_by_rank: Dict[int, Path]):
    return request.param, (rec_ddp4_by_rank if request.param == "ddp4" else rec_samepid_by_rank)


@pytest.fixture(scope="module")
def merged(job, tmp_path_factory: pytest.TempPathFactory) -> Tuple[str, Dict[int, Path], Dict[Any, Any]]:
    """``(job name, {rank: file}, {(codec, jobs): (summary, raw bytes)})``: the job's
    folder merged with every codec, by one process and by two workers."""
    name, by_rank = job
    d = tmp_path_factory.mktemp(name)
    runs: Dict[Any, Any] = {}
    for ext in CODECS:
        for jobs in (1, 2):
            out = d / f"j{jobs}" / f"merged{ext}"
            out.parent.mkdir(exist_ok=True)
            summary = merge([str(by_rank[0].parent)], str(out), jobs=jobs)
            runs[(ext, jobs)] = (summary, out.read_bytes())
    return name, by_rank, runs


def test_exact_merge_checked_event_by_event(merged, h):
    name, by_rank, runs = merged
    summary, raw = runs[(".json", 1)]
    out = h.strict_loads(raw, exact=True)
    facts = h.check_merge(out, by_rank)
    sections = h.split_by_rank(out)
    assert sorted(sections) == [0, 1, 2, 3]
    for r, path in by_rank.items():
        evs = h.cached_input(path)["traceEvents"]
        n_pyfunc = sum(1 for e in evs if e.get("cat") == "python_function")
        n_kept = sum(1 for e in evs if e["ph"] != "M" and e.get("cat") != "python_function")
        assert n_pyfunc > 600, f"precondition: {path.name} was recorded with_stack"
        assert facts[r]["kept"] == n_kept == len(h.non_meta(sections[r]))
        rs = summary.ranks[r]
        assert (rs.rank, rs.events_in, rs.dropped, rs.events_out) == (r, len(evs), n_pyfunc, len(sections[r]))
        assert out["tracefuse"]["ranks"][str(r)]["rank_from"] == "distributedInfo"
    assert summary.events_out == len(out["traceEvents"])


def test_kineto_content_survives(merged, h):
    """What record_shapes / profile_memory / DDP put in the trace is in the output:
    shapes in args, the [memory] instants, the gloo collectives, fwdbwd flows."""
    _, by_rank, runs = merged
    out = h.strict_loads(runs[(".json", 1)][1], exact=True)
    sections = h.split_by_rank(out)
    for r in by_rank:
        sec = sections[r]
        names = [e.get("name") for e in sec]
        assert names.count("c10d::allreduce_") == 2 and names.count("gloo:all_reduce") == 2
        assert sum(e.get("name") == "[memory]" and e.get("ph") == "i" for e in sec) > 50
        assert any("Input Dims" in e.get("args", {}) for e in sec if e.get("cat") == "cpu_op")
        flows = [e for e in sec if e.get("cat") == "fwdbwd"]
        assert {e["ph"] for e in flows} == {"s", "f"} and all(e["id"] >> 32 == r for e in flows)


def test_one_cpu_process_per_rank_with_its_label(merged, h):
    """Each rank's CPU process gets its own pid, the name ``RANK r - CPU`` and the
    ORIGINAL pid in its ``process_labels`` (``rank r, host H, pid P, python, CPU``);
    for the same-pid job P is 1 on every rank and still 4 distinct processes come out."""
    name, by_rank, runs = merged
    out = h.strict_loads(runs[(".json", 1)][1], exact=True)
    os_pids = {}
    cpu_out = {}
    for r, path in by_rank.items():
        evs = h.cached_input(path)["traceEvents"]
        int_pids = {e["pid"] for e in evs if type(e.get("pid")) is int}
        assert len(int_pids) == 1, f"precondition: one OS process per rank file, {int_pids}"
        os_pids[r] = int_pids.pop()
        labels = [
            (m["pid"], m["args"]["name"])
            for m in out["traceEvents"]
            if m.get("name") == "process_name"
            and m["args"]["rank"] == r
            and m["args"]["name"].endswith(" - CPU")
        ]
        assert labels == [(labels[0][0], f"RANK {r} - CPU")], labels
        detail = [
            m["args"]["labels"]
            for m in out["traceEvents"]
            if m.get("name") == "process_labels" and m["pid"] == labels[0][0]
        ]
        assert len(detail) == 1 and f", pid {os_pids[r]}, python" in detail[0], detail
        cpu_out[r] = labels[0][0]
        # every event of that OS pid went to that one output process
        assert {e["pid"] for e in h.split_by_rank(out)[r] if e.get("tid") == os_pids[r]} <= {cpu_out[r]}
    assert len(set(cpu_out.values())) == 4, f"ranks share a CPU process: {cpu_out}"
    if name == "ddp4_samepid":
        assert set(os_pids.values()) == {1}
        assert cpu_out == {r: (r + 1) * 10000 + 1 for r in range(4)}
    else:
        assert len(set(os_pids.values())) == 4


def test_same_pid_job_threads_stay_apart(merged, h):
    """The colliding tids (main thread 1, gloo threads 3/4/5 on every rank) end up
    in four different processes: no output (pid, tid) holds two ranks' events."""
    _, _, runs = merged
    out = h.strict_loads(runs[(".json", 1)][1], exact=True)
    owner: Dict[Tuple[int, int], int] = {}
    for e in out["traceEvents"]:
        if "tid" in e:
            key = (e["pid"], e["tid"])
            assert owner.setdefault(key, e["args"]["rank"]) == e["args"]["rank"], key


def test_two_workers_give_the_same_bytes(merged):
    _, _, runs = merged
    for ext in CODECS:
        assert runs[(ext, 2)][1] == runs[(ext, 1)][1], f"-j 2 differs from -j 1 for {ext}"


def test_three_codecs_hold_the_same_json(merged, h):
    _, _, runs = merged
    plain = runs[(".json", 1)][1]
    gz = runs[(".json.gz", 1)][1]
    zst = runs[(".json.zst", 1)][1]
    assert gz[:2] == b"\x1f\x8b" and zst[:4] == b"\x28\xb5\x2f\xfd" and plain[:1] == b"{"
    assert h.gunzip_one_member(gz) == plain  # one gzip member, Perfetto reads it whole
    assert h.unzstd(zst) == plain  # every zstd frame

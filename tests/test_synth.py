"""Tests of the synthetic trace generator (``tracefuse_synth``).

The generator is the source of every large test and benchmark input, so these tests
pin down the properties other tests rely on: byte-for-byte determinism, strict JSON,
the three Kineto key orders, consistent ids and flows, properly nested slices,
collective end times that agree across ranks (up to jitter and exactly up to the
clock offset), flat memory, and a committed sample that cannot drift.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import zstandard

import tracefuse_synth.generator as synth
from tracefuse_synth.generator import DEFAULT_BASE_TIME_NS, main, write_rank_trace, write_run

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO / "fixtures" / "sample_run"
PERIOD_NS = 7_889_238 * 1_000_000_000


def _raw(path: Path) -> bytes:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    if data[:4] == b"\x28\xb5\x2f\xfd":
        return zstandard.ZstdDecompressor().stream_reader(data).read()
    return data


def _reject(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _load(path: Path) -> Dict[str, Any]:
    """Strict parse (no NaN/Infinity, no control characters), exact decimals."""
    return json.loads(_raw(path), parse_float=Decimal, parse_constant=_reject)


def _ns(us: Any) -> int:
    return int(Decimal(us) * 1000)


def _abs_ns(doc: Dict[str, Any], us: Any) -> int:
    return doc["baseTimeNanoseconds"] + _ns(us)


@pytest.fixture(scope="module")
def run4(tmp_path_factory: pytest.TempPathFactory) -> Tuple[List[Path], List[Dict[str, Any]]]:
    """4 ranks on 2 hosts, all key orders and compressions, host 1's clock off."""
    out = tmp_path_factory.mktemp("run4")
    summaries: List[Dict[str, Any]] = []
    paths = write_run(
        out,
        4,
        steps=4,
        seed=7,
        layers=1,
        hosts=2,
        host_clock_offsets_ns=[0, 777_777_123],
        compress=[None, "gzip", "zstd", None],
        key_orders=["base_first", "base_after", "distinfo_after"],
        first_steps=[0, 0, 5, 3],
        summaries=summaries,
    )
    return paths, sorted(summaries, key=lambda s: s["rank"])


@pytest.fixture(scope="module")
def docs4(run4: Tuple[List[Path], List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    return [_load(p) for p in run4[0]]


# ---------------------------------------------------------------------------------------
def test_same_arguments_same_bytes(tmp_path: Path) -> None:
    for compress in (None, "gzip", "zstd"):
        a, b = tmp_path / "a", tmp_path / "b"
        a.mkdir(exist_ok=True)
        b.mkdir(exist_ok=True)
        kw = dict(
            steps=2,
            seed=3,
            layers=1,
            compress=compress,
            kernel_jitter_ns=900,
            clock_offset_ns=-5000,
            key_order="base_after",
        )
        write_rank_trace(a / "t.json", 1, 4, **kw)  # type: ignore[arg-type]
        write_rank_trace(b / "t.json", 1, 4, **kw)  # type: ignore[arg-type]
        assert (a / "t.json").read_bytes() == (b / "t.json").read_bytes(), compress
    write_rank_trace(b / "t.json", 1, 4, steps=2, seed=4, layers=1, compress="zstd")
    assert _raw(a / "t.json") != _raw(b / "t.json")
    # no temporary files left behind
    assert sorted(p.name for p in a.iterdir()) == ["t.json"]


def test_gzip_header_is_deterministic(tmp_path: Path) -> None:
    p = tmp_path / "t.json.gz"
    write_rank_trace(p, 0, 2, steps=1, layers=1, compress="gzip")
    head = p.read_bytes()[:10]
    assert head[:3] == b"\x1f\x8b\x08"
    assert head[3] == 0  # no FNAME: nothing path-dependent
    assert head[4:8] == b"\0\0\0\0"  # mtime 0


def test_strict_json_and_top_level(
    run4: Tuple[List[Path], List[Dict[str, Any]]], docs4: List[Dict[str, Any]]
) -> None:
    for r, (_path, doc) in enumerate(zip(run4[0], docs4)):
        assert doc["distributedInfo"]["rank"] == r
        assert doc["distributedInfo"]["world_size"] == 4
        assert doc["distributedInfo"]["backend"] == "nccl"
        assert doc["host_name"] == f"node{r // 2}"
        assert doc["baseTimeNanoseconds"] == DEFAULT_BASE_TIME_NS
        assert len(doc["deviceProperties"]) == 8
        assert doc["schemaVersion"] == 1 and doc["displayTimeUnit"] == "ms"
    names = [p.name for p in run4[0]]
    assert names == [
        "node0_11777.0.pt.trace.json",
        "node0_11778.1.pt.trace.json.gz",
        "node1_11779.2.pt.trace.json.zst",
        "node1_11780.3.pt.trace.json",
    ]


@pytest.mark.parametrize("order", synth.KEY_ORDERS)
def test_key_order_in_raw_text(tmp_path: Path, order: str) -> None:
    p = tmp_path / "t.json"
    write_rank_trace(p, 0, 2, steps=1, layers=1, key_order=order)
    text = p.read_text()
    pos = {
        k: text.index(f'"{k}":')
        for k in (
            "traceEvents",
            "traceName",
            "baseTimeNanoseconds",
            "distributedInfo",
            "displayTimeUnit",
            "schemaVersion",
            "deviceProperties",
        )
    }
    ev = pos["traceEvents"]
    assert pos["schemaVersion"] < pos["deviceProperties"] < ev < pos["traceName"]
    if order == "base_first":
        assert pos["distributedInfo"] < pos["displayTimeUnit"] < pos["baseTimeNanoseconds"] < ev
    elif order == "base_after":
        assert pos["distributedInfo"] < ev
        assert ev < pos["traceName"] < pos["displayTimeUnit"] < pos["baseTimeNanoseconds"]
    else:
        assert ev < pos["distributedInfo"] < pos["traceName"] < pos["baseTimeNanoseconds"]
    assert text.count('"baseTimeNanoseconds":') == 1
    json.loads(text, parse_constant=_reject)


def test_ts_and_dur_have_three_decimals(run4: Tuple[List[Path], List[Dict[str, Any]]]) -> None:
    for path in run4[0]:
        text = _raw(path).decode()
        vals = re.findall(r'"(ts|dur)": ([-0-9.eE+]+)', text)
        assert len(vals) > 1000
        for key, v in vals:
            assert re.fullmatch(r"[0-9]+\.[0-9]{3}", v), (key, v)
            if key == "ts":
                assert Decimal(v) < 2**43


def test_event_content(docs4: List[Dict[str, Any]]) -> None:
    doc = docs4[0]
    evs = doc["traceEvents"]
    cats = Counter(e.get("cat") for e in evs)
    for cat in (
        "cpu_op",
        "cuda_runtime",
        "kernel",
        "python_function",
        "cpu_instant_event",
        "gpu_memcpy",
        "gpu_memset",
        "user_annotation",
        "ac2g",
        "fwdbwd",
        "Trace",
        "gpu_user_annotation",
    ):
        assert cats[cat] > 0, cat
    assert cats["python_function"] > 0.15 * len(evs)
    steps = [
        e["name"] for e in evs if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    ]
    assert steps == [f"ProfilerStep#{i}" for i in range(4)]
    steps2 = [
        e["name"]
        for e in docs4[2]["traceEvents"]
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    ]
    assert steps2 == [f"ProfilerStep#{i}" for i in range(5, 9)]  # first_step=5
    spans = [e for e in evs if e.get("pid") == "Spans"]
    assert {(e["ph"], e.get("cat"), e["tid"]) for e in spans} == {
        ("X", "Trace", "PyTorch Profiler"),
        ("M", None, 0),
    }
    assert any(e.get("pid") == "Traces" and e["name"] == "Iteration Start: PyTorch Profiler" for e in evs)
    assert any(e.get("pid") == "" and e["name"] == "Record Window End" for e in evs)
    for e in evs:
        if e.get("cat") == "cpu_op":
            assert isinstance(e["args"]["External id"], int) and "Ev Idx" in e["args"]
        if e.get("cat") == "cpu_instant_event":
            assert e["ph"] == "i" and e["name"] == "[memory]"
    assert any("Input Dims" in e.get("args", {}) for e in evs)
    # collective CPU ops carry the comm args, incl. a uint64 "Comms Id" beyond int64
    rpc = [e for e in evs if e.get("name") == "record_param_comms"]
    assert rpc and all(e["args"]["Comms Id"] >= 2**63 for e in rpc)
    assert all(e["args"]["Process Group Name"] == "0" for e in rpc)


def test_metadata_at_end(docs4: List[Dict[str, Any]]) -> None:
    for r, doc in enumerate(docs4):
        evs = doc["traceEvents"]
        first_m = next(i for i, e in enumerate(evs) if e["ph"] == "M")
        assert all(e["ph"] in ("M", "X", "i") for e in evs[first_m:])
        assert all(e.get("cat") not in ("kernel", "cpu_op") for e in evs[first_m:])
        labels = {e["pid"]: e["args"]["labels"] for e in evs if e.get("name") == "process_labels"}
        assert labels[11777 + r] == "CPU"
        assert all(labels[k] == f"GPU {k}" for k in range(8))
        dev = r % 2  # local rank on its host
        assert {e["pid"] for e in evs if e.get("cat") == "kernel"} == {dev}
        names = [(e["pid"], e["tid"]) for e in evs if e.get("name") == "thread_name"]
        assert (dev, 7) in names and (dev, 20) in names


def test_ac2g_flows_match_correlation(docs4: List[Dict[str, Any]]) -> None:
    for doc in docs4:
        evs = doc["traceEvents"]
        rt = {e["args"]["correlation"]: e for e in evs if e.get("cat") == "cuda_runtime"}
        dev = {
            e["args"]["correlation"]: e for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        }
        s = [e for e in evs if e.get("cat") == "ac2g" and e["ph"] == "s"]
        f = [e for e in evs if e.get("cat") == "ac2g" and e["ph"] == "f"]
        assert s and len({e["id"] for e in s}) == len(s)
        for e in s:
            launch = rt[e["id"]]
            assert launch["name"] in (
                "cudaLaunchKernel",
                "cudaLaunchKernelExC",
                "cudaMemcpyAsync",
                "cudaMemsetAsync",
            )
            assert (e["pid"], e["tid"], e["ts"]) == (launch["pid"], launch["tid"], launch["ts"])
            k = dev[e["id"]]
            assert k["args"]["External id"] == launch["args"]["External id"]
            assert k["ts"] > launch["ts"]
        s_ids = {e["id"] for e in s}
        for e in f:
            assert e["bp"] == "e" and e["name"] == "ac2g"
            target = dev.get(e["id"]) if e["pid"] != "Spans" else None
            if e["id"] in s_ids:
                assert (e["pid"], e["tid"], e["ts"]) == (target["pid"], target["tid"], target["ts"])
            else:  # "f" without "s": a runtime call without device work, or the orphan kernel
                other = rt.get(e["id"]) or dev.get(e["id"])
                assert other is not None
                assert (e["pid"], e["tid"], e["ts"]) == (other["pid"], other["tid"], other["ts"])
        assert s_ids <= {e["id"] for e in f}
        # fwdbwd: one s (forward op, main thread) and one f (backward op, autograd thread)
        fb_s = {e["id"]: e for e in evs if e.get("cat") == "fwdbwd" and e["ph"] == "s"}
        fb_f = {e["id"]: e for e in evs if e.get("cat") == "fwdbwd" and e["ph"] == "f"}
        assert fb_s and set(fb_s) == set(fb_f)
        for i, e in fb_s.items():
            assert fb_f[i]["tid"] != e["tid"] and _ns(fb_f[i]["ts"]) > _ns(e["ts"])
            assert fb_f[i]["bp"] == "e"


def test_ids_are_the_same_numbers_on_every_rank(docs4: List[Dict[str, Any]]) -> None:
    def ids(doc: Dict[str, Any]) -> Tuple[List[int], List[int]]:
        evs = doc["traceEvents"]
        return (
            [e["args"]["correlation"] for e in evs if e.get("cat") == "kernel"],
            [e["id"] for e in evs if e.get("ph") == "s"],
        )

    first = ids(docs4[0])
    assert min(first[0]) == 1
    for doc in docs4[1:]:
        assert ids(doc) == first


def test_slices_nest_on_every_thread(docs4: List[Dict[str, Any]]) -> None:
    for doc in docs4:
        by_thread: Dict[Any, List[Tuple[int, int]]] = defaultdict(list)
        for e in doc["traceEvents"]:
            if e["ph"] == "X":
                t = _ns(e["ts"])
                by_thread[(e["pid"], e["tid"])].append((t, t + _ns(e["dur"])))
        for key, spans in by_thread.items():
            spans.sort(key=lambda x: (x[0], -x[1]))
            stack: List[int] = []
            for start, end in spans:
                assert end >= start
                while stack and stack[-1] <= start:
                    stack.pop()
                assert not stack or end <= stack[-1], (key, start, end, stack[-1])
                stack.append(end)


def _collective_ends(doc: Dict[str, Any]) -> Dict[Tuple[str, str, int], Tuple[int, int]]:
    out = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"].startswith("nccl"):
            a = e["args"]
            key = (a["Process Group Name"], a["Collective name"], a["Seq"])
            start = _abs_ns(doc, e["ts"])
            out[key] = (start, start + _ns(e["dur"]))
    return out


def test_collective_ends_agree_across_ranks(
    run4: Tuple[List[Path], List[Dict[str, Any]]], docs4: List[Dict[str, Any]]
) -> None:
    offsets = [0, 0, 777_777_123, 777_777_123]
    colls = [_collective_ends(d) for d in docs4]
    assert set(colls[0]) and all(set(c) == set(colls[0]) for c in colls)
    seqs = sorted(k[2] for k in colls[0])
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # Seq increases by 1
    assert len(seqs) == sum(1 for e in docs4[0]["traceEvents"] if e.get("name") == "record_param_comms")
    for key in colls[0]:
        true_ends = {c[key][1] - off for c, off in zip(colls, offsets)}
        assert len(true_ends) == 1, key  # no jitter: exactly equal once offset removed
        starts = {c[key][0] - off for c, off in zip(colls, offsets)}
        assert len(starts) > 1  # ranks arrive at different times
    assert [s["n_collectives"] for s in run4[1]] == [len(seqs)] * 4


def test_collective_jitter_and_base_straddling(tmp_path: Path) -> None:
    jitter = 2500
    bases = [DEFAULT_BASE_TIME_NS, DEFAULT_BASE_TIME_NS + PERIOD_NS]
    paths = write_run(
        tmp_path,
        4,
        steps=3,
        seed=11,
        layers=1,
        kernel_jitter_ns=jitter,
        rank_base_times_ns=bases,
        hosts=2,
        host_clock_offsets_ns=[0, -3_000_000],
    )
    docs = [_load(p) for p in paths]
    assert [d["baseTimeNanoseconds"] for d in docs] == bases * 2
    colls = [_collective_ends(d) for d in docs]
    offsets = [0, 0, -3_000_000, -3_000_000]
    spread = []
    for key in colls[0]:
        ends = [c[key][1] - off for c, off in zip(colls, offsets)]
        assert max(ends) - min(ends) <= 2 * jitter
        spread.append(max(ends) - min(ends))
        for c in colls:
            assert c[key][1] > c[key][0]
    assert max(spread) > 0
    # all ranks' ts stay in range even though two bases differ by a whole period
    for d in docs:
        assert all(0 <= e["ts"] < 2**43 for e in d["traceEvents"])


def test_summary_counts_match_file(
    run4: Tuple[List[Path], List[Dict[str, Any]]], docs4: List[Dict[str, Any]]
) -> None:
    for summary, path, doc in zip(run4[1], run4[0], docs4):
        evs = doc["traceEvents"]
        assert summary["events"] == len(evs)
        assert summary["bytes"] == len(_raw(path))
        assert summary["file_bytes"] == path.stat().st_size
        assert summary["n_steps"] == 4
        assert summary["by_ph"] == dict(Counter(e["ph"] for e in evs))
        assert summary["by_cat"] == dict(Counter(e.get("cat", "") for e in evs))
        assert set(summary) >= {"by_ph_cat", "n_collectives", "path", "rank"}


def test_target_bytes(tmp_path: Path) -> None:
    s = write_rank_trace(tmp_path / "t.json", 0, 2, target_bytes=1_500_000, layers=1)
    per_step = s["bytes"] / s["n_steps"]
    assert 1_500_000 <= s["bytes"] < 1_500_000 + 2 * per_step
    paths = write_run(tmp_path / "run", 3, mb_per_rank=0.6, layers=1, summaries=(sums := []))
    assert len(paths) == 3 and len({x["n_steps"] for x in sums}) == 1
    assert all(x["bytes"] > 550_000 for x in sums)


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_rank_trace(tmp_path / "t.json", 0, 1)
    with pytest.raises(ValueError):
        write_rank_trace(tmp_path / "t.json", 0, 1, steps=1, key_order="nope")
    with pytest.raises(ValueError):
        write_rank_trace(tmp_path / "t.json", 2, 2, steps=1)
    with pytest.raises(ValueError):
        write_run(tmp_path, 3, steps=1, hosts=2)
    with pytest.raises(ValueError):
        write_run(tmp_path, 2, steps=1, file_pattern="same.json")
    assert not list(tmp_path.iterdir())


def test_same_pid_and_patterns(tmp_path: Path) -> None:
    paths = write_run(
        tmp_path,
        2,
        steps=1,
        layers=1,
        same_pid=True,
        file_pattern="{host}_{pid}.{time_ns}.pt.trace.json",
        compress="gzip",
    )
    assert all(p.name.startswith("node0_542.") and p.name.endswith(".json.gz") for p in paths)
    assert "1" not in {p.name.split(".")[1] for p in paths}
    for r, p in enumerate(paths):
        doc = _load(p)
        assert doc["distributedInfo"]["rank"] == r
        assert {e["pid"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op"} == {542}


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                str(tmp_path),
                "--ranks",
                "2",
                "--steps",
                "1",
                "--layers",
                "1",
                "--zstd",
                "--hosts",
                "2",
                "--host-offset-us",
                "1200",
                "--seed",
                "5",
            ]
        )
        == 0
    )
    assert "MB/s" in capsys.readouterr().out
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["node0_11777.0.pt.trace.json.zst", "node1_11778.1.pt.trace.json.zst"]
    d0, d1 = (_load(f) for f in files)
    c0, c1 = _collective_ends(d0), _collective_ends(d1)
    assert all(c1[k][1] - c0[k][1] == 1_200_000 for k in c0)
    assert main([str(tmp_path), "--ranks", "3", "--hosts", "2", "--steps", "1", "-q"]) == 2


def test_committed_sample_equals_regeneration(tmp_path: Path) -> None:
    """fixtures/sample_run must be exactly what ``--sample`` writes (see its README).
    gzip files are compared decompressed: the deflate bytes depend on the zlib build."""
    assert main([str(tmp_path), "--sample", "-q"]) == 0
    fresh = sorted(p.name for p in tmp_path.iterdir())
    committed = sorted(p.name for p in SAMPLE_DIR.iterdir() if p.name != "README.md")
    assert fresh == committed
    assert sum(n.endswith(".json") for n in fresh) == 2
    assert sum(n.endswith(".json.gz") for n in fresh) == 2
    total = 0
    for name in fresh:
        assert _raw(tmp_path / name) == _raw(SAMPLE_DIR / name), name
        total += (SAMPLE_DIR / name).stat().st_size
        assert 150_000 <= len(_raw(SAMPLE_DIR / name)) <= 400_000
    assert total < 1_000_000
    orders = set()
    for name in fresh:
        text = _raw(SAMPLE_DIR / name).decode()
        ev, base = text.index('"traceEvents"'), text.index('"baseTimeNanoseconds"')
        dist = text.index('"distributedInfo"')
        orders.add("base_first" if base < ev else "distinfo_after" if dist > ev else "base_after")
    assert orders == set(synth.KEY_ORDERS)


#: the generator in a process of its own: its peak RSS (VmHWM, reset after the
#: warm-up through /proc/self/clear_refs) is the generator's, not the pytest process's
#: (whose other tests' memory, freed or not, would count)
_FLAT_SCRIPT = """
import sys
from pathlib import Path
from tracefuse_synth.generator import write_rank_trace

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

d = Path(sys.argv[1])
write_rank_trace(d / "warm.json", 0, 2, steps=2)  # imports and caches
before = status("VmRSS")
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
except OSError:
    pass  # the peak then includes the warm-up's: the growth is an upper bound
s = write_rank_trace(d / "big.json", 0, 2, target_bytes=20_000_000)
print(s["bytes"], status("VmHWM") - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux /proc/self/status")
def test_streaming_memory_is_flat(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _FLAT_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],  # the repository: tracefuse_synth importable
    )
    assert out.returncode == 0, out.stderr[-2000:]
    written, growth = map(int, out.stdout.split())
    assert written >= 20_000_000
    assert growth < 12_000_000, f"RSS grew by {growth / 1e6:.1f} MB for a 20 MB trace"


def test_parallel_jobs_write_the_same_bytes(tmp_path: Path) -> None:
    kw = dict(steps=2, seed=2, layers=2, compress=[None, "zstd"], kernel_jitter_ns=700)
    serial = write_run(tmp_path / "serial", 3, **kw)  # type: ignore[arg-type]
    parallel = write_run(tmp_path / "parallel", 3, jobs=2, **kw)  # type: ignore[arg-type]
    for a, b in zip(serial, parallel):
        assert a.name == b.name and a.read_bytes() == b.read_bytes()
    test_slices_nest_on_every_thread([_load(p) for p in serial])


# --------------------------------------------------------------------------- pinned bytes
#: sha256 of plain-JSON runs that take other paths than the committed sample (same pid,
#: first step numbers, a size target, jitter, the distinfo_after order, two bases and a
#: name pattern, host offsets). Recorded from the generator before its split into
#: modules (issue 22): the split, and any later tidying, must not change one byte.
PINNED = {
    "same_pid_first_steps": (
        dict(world_size=2, steps=2, layers=2, seed=7, same_pid=True, first_steps=[5, 9]),
        {
            "node0_542.0.pt.trace.json": "6dd694e20ae45afbfbbaa7bf05224acd5c69b7d7c27ff689df8c004d3e0310df",
            "node0_542.1.pt.trace.json": "7aebaa32d6cff2ddd2465e035ecf32cc2f77b9dbc84b76c10b96e625fedb2940",
        },
    ),
    "by_size_jitter_distinfo_after": (
        dict(world_size=3, mb_per_rank=0.6, seed=3, key_orders=["distinfo_after"], kernel_jitter_ns=20000),
        {
            "node0_11777.0.pt.trace.json": "8627ed32bce56a919d86fa7900e92154357af0c246f3cec225b241653f76dc7c",
            "node0_11778.1.pt.trace.json": "b96bfc8926c6143912e0d6bb3e7f2624ddf22887208be4b207e6012e704302dc",
            "node0_11779.2.pt.trace.json": "14bdac35963c19a76c6749beac2791b8acfe53c1a52c480de5eb4e929510124d",
        },
    ),
    "two_bases_pattern": (
        dict(
            world_size=2,
            steps=1,
            layers=1,
            seed=1,
            rank_base_times_ns=[DEFAULT_BASE_TIME_NS, DEFAULT_BASE_TIME_NS + PERIOD_NS],
            file_pattern="worker{local_rank}.{time_ns}.pt.trace.json",
            hosts=2,
            host_clock_offsets_ns=[0, 2_500_000],
            key_orders=["base_after", "base_first"],
        ),
        {
            "worker0.1798746743919023757.pt.trace.json": "b2270d624560ecec901d2f8bd97d3edafd4a10c4e07f033d7338e9a6ad4526b6",
            "worker0.1798746751838047514.pt.trace.json": "9b5e9e6b8671c753067497816025918088923cc3df42a2f12613a233edb39744",
        },
    ),
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_pinned_runs_are_byte_identical(tmp_path, name):
    import hashlib

    cfg, want = PINNED[name]
    paths = write_run(tmp_path, **cfg)
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths} == want

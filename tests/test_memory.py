"""Bounded memory: a ~200 MB (uncompressed) 4-rank input is merged in a subprocess
under an address-space cap, and its peak RSS is far below the input size.

The input is generated inside the test, streaming, from REAL Kineto output: each
rank repeats the events of its own rank of the recorded 4-rank DDP job
(tests/data/recorded/ddp4: CPU ops, python_function stacks, memory instants, fwdbwd
flows) with increasing timestamps and ids, counting while it writes. The merged
output is then counted by streaming it (ijson), per rank, against what was written.
(There is one generator, and it runs: no fallback that a test never reaches.)
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Tuple

import orjson
import pytest

RANKS = 4
MB_PER_RANK = 48  # ~200 MB in all: 6x the ~30 MB peak RSS measured, 1.3x the RSS limit
HEADROOM_MB = 150
RSS_LIMIT_MB = 150
BASE_NS = 1751410836000000000


def _ns(ts: Decimal) -> int:
    return int(ts * 1000)


def _fmt_us(ns: int) -> orjson.Fragment:
    return orjson.Fragment(f"{ns // 1000}.{ns % 1000:03d}".encode())


def generate_rank(src: Dict[str, Any], path: Path, rank: int, target_bytes: int) -> Tuple[int, int, int]:
    """Write one rank: repeated blocks of the source's events, each block later by
    the block's span and with ids moved past the previous block's. Returns
    ``(events written, non-metadata events a default merge keeps, python_function
    events)`` counted while writing."""
    evs = [e for e in src["traceEvents"] if e.get("ph") != "M"]
    metas = [e for e in src["traceEvents"] if e.get("ph") == "M"]
    t0 = min(_ns(e["ts"]) for e in evs)
    t1 = max(_ns(e["ts"]) + _ns(e.get("dur", Decimal(0))) for e in evs)
    span = t1 - t0 + 1_000_000
    id_stride = 1 + max(
        [e["id"] for e in evs if "id" in e]
        + [e["args"][k] for e in evs for k in ("correlation", "External id") if k in (e.get("args") or {})]
    )
    head = {k: v for k, v in src.items() if k not in ("traceEvents", "baseTimeNanoseconds", "metadata")}
    head["distributedInfo"] = dict(src.get("distributedInfo") or {}, rank=rank, world_size=RANKS)
    head["baseTimeNanoseconds"] = BASE_NS
    pre = orjson.dumps(head, default=lambda d: orjson.Fragment(str(d).encode()))[:-1] + b',"traceEvents":[\n'
    n = kept = pyfunc = 0
    written = 0
    with open(path, "wb") as f:
        f.write(pre)
        written += len(pre)
        k = 0
        first = True
        while written < target_bytes:
            chunk: List[bytes] = []
            for e in evs:
                o = dict(e)
                o["ts"] = _fmt_us(_ns(e["ts"]) + k * span)
                if "dur" in e:
                    o["dur"] = _fmt_us(_ns(e["dur"]))
                if "id" in e:
                    o["id"] = e["id"] + k * id_stride
                a = e.get("args")
                if a:
                    a = dict(a)
                    for key in ("correlation", "External id"):
                        if key in a:
                            a[key] = a[key] + k * id_stride
                    o["args"] = a
                chunk.append(orjson.dumps(o, default=float))
                n += 1
                if e.get("cat") != "python_function":
                    kept += 1
                else:
                    pyfunc += 1
            data = (b"" if first else b",\n") + b",\n".join(chunk)
            first = False
            f.write(data)
            written += len(data)
            k += 1
        tail = b",\n" + b",\n".join(orjson.dumps(m, default=float) for m in metas) + b"\n]}\n"
        n += len(metas)
        f.write(tail)
    assert k * id_stride < 2**32
    return n, kept, pyfunc


@pytest.fixture(scope="module")
def big_run(tmp_path_factory, rec_ddp4_by_rank, h):
    """``(dir, paths in rank order, {rank: (events, kept non-metadata, python_function)})``."""
    d = tmp_path_factory.mktemp("big")
    counts = {}
    paths = []
    for r in range(RANKS):
        src = h.cached_input(rec_ddp4_by_rank[r], exact=True)
        p = d / f"rank{r}.pt.trace.json"
        counts[r] = generate_rank(src, p, r, MB_PER_RANK << 20)
        paths.append(p)
    return d, paths, counts


def _idle_address_space_kb() -> int:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import tracefuse_stream.pipeline.orchestrate\n"
            "for l in open('/proc/self/status'):\n"
            "    if l.startswith('VmPeak:'): print(l.split()[1])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out.strip())


MERGE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from tracefuse_stream.pipeline.orchestrate import merge
    s = merge(sys.argv[1:-1], sys.argv[-1], jobs=1)
    status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
    print(json.dumps({
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forked parent
        # (pytest) across exec, VmHWM is this process's own peak RSS
        "hwm_kb": int(status["VmHWM"].split()[0]),
        "vmpeak_kb": int(status["VmPeak"].split()[0]),
        "ranks": [[r.rank, r.events_in, r.events_out, r.dropped] for r in s.ranks],
    }))
    """
)


def test_merge_of_200mb_stays_in_bounded_memory(big_run, tmp_path, h):
    d, paths, counts = big_run
    total_in = sum(p.stat().st_size for p in paths)
    assert total_in >= RANKS * MB_PER_RANK * 10**6, "generator wrote less than intended"
    idle_kb = _idle_address_space_kb()
    cap = (idle_kb << 10) + (HEADROOM_MB << 20)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    out = tmp_path / "merged.json.gz"
    env = dict(os.environ)
    # a memory measurement of the merge alone (conftest: such a test unsets it); the
    # output is counted below, rank by rank, by streaming it
    env.pop("TRACEFUSE_VERIFY", None)
    proc = subprocess.run(
        [sys.executable, "-c", MERGE_SCRIPT, *map(str, paths), str(out)],
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, (
        f"merge under a {cap >> 20} MB address-space cap (idle {idle_kb >> 10} MB + {HEADROOM_MB} MB) "
        f"failed with {proc.returncode}: {proc.stderr[-2000:]}"
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    rss_mb = report["hwm_kb"] / 1024
    print(
        f"input {total_in / 1e6:.0f} MB, cap {cap >> 20} MB, peak RSS {rss_mb:.0f} MB, VmPeak {report['vmpeak_kb'] >> 10} MB"
    )
    assert rss_mb < RSS_LIMIT_MB, f"peak RSS {rss_mb:.0f} MB for {total_in / 1e6:.0f} MB of input"
    assert rss_mb * 1e6 < total_in / 2
    # the merge's own count of what it read and kept
    for r, n_in, _n_out, dropped in report["ranks"]:
        n, kept, pyfunc = counts[r]
        assert n_in == n
        assert dropped == pyfunc  # python_function events are dropped by default
        assert pyfunc > 0 and kept > 0

    # the output, counted by streaming it (the test must stay bounded too)
    import zlib

    import ijson

    per_rank: Dict[int, int] = {}
    per_rank_meta: Dict[int, int] = {}
    raw = out.open("rb")
    dec = zlib.decompressobj(31)

    class _Gz:
        """Streaming gunzip of ONE member that honours read(n) (ijson's buffer)."""

        pending = b""

        def read(self, n: int) -> bytes:
            while len(self.pending) < n and not dec.eof:
                chunk = raw.read(1 << 20)
                self.pending += dec.decompress(chunk) if chunk else dec.flush()
                if not chunk:
                    break
            out, self.pending = self.pending[:n], self.pending[n:]
            return out

    # use_float=False: exact numbers (Kineto's uint64 ids may exceed int64)
    for ev in ijson.items(_Gz(), "traceEvents.item", use_float=False, buf_size=1 << 18):
        r = ev["args"]["rank"]
        if ev.get("ph") == "M":
            per_rank_meta[r] = per_rank_meta.get(r, 0) + 1
        else:
            per_rank[r] = per_rank.get(r, 0) + 1
    assert raw.read() == b"", "bytes after the gzip member's end"
    raw.close()
    assert dec.eof and dec.unused_data == b"", "the gzip output is not ONE member"
    assert per_rank == {r: counts[r][1] for r in range(RANKS)}
    for r, _n_in, n_out, _dropped in report["ranks"]:
        assert n_out == per_rank[r] + per_rank_meta[r]

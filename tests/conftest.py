"""Shared test helpers: where the real traces are, strict readers for inputs and
outputs, and an independent re-implementation of the event selection rule.

Nothing here imports the engine: every expected number a test asserts is derived
from the input files with ``json``/``gzip`` and the rules of docs/OUTPUT_FORMAT.md.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import re
import subprocess
import sys
import zlib
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterable, List, Optional

import pytest
from hypothesis import settings as hypothesis_settings

REPO = Path(__file__).resolve().parents[1]

# Random tests are random where they run (hypothesis keeps what failed in its database,
# .hypothesis/, and replays it first); under CI they are derandomized, so a CI run
# replays the examples of the last one and fails only for a change in the code.
hypothesis_settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")

# Every merge the suite makes is checked by ``verify --against`` its inputs: with
# TRACEFUSE_VERIFY=1, a merge not told ``verify=`` is verified. The package never reads
# that variable; the switch (and the fault-injection signal of test_faults.py) live in
# tests/site_hooks/tracefuse_testhooks.py, patched in here and, through its
# sitecustomize.py on PYTHONPATH, into every CLI subprocess. A test that needs a merge
# without it (a timing or memory measurement) unsets the variable itself.
SITE_HOOKS = REPO / "tests" / "site_hooks"
os.environ.setdefault("TRACEFUSE_VERIFY", "1")
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(SITE_HOOKS)]
    + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(SITE_HOOKS)]
)
sys.path.insert(0, str(SITE_HOOKS))
import tracefuse_testhooks  # noqa: E402  (needs SITE_HOOKS on sys.path)

tracefuse_testhooks.install()
DEFAULT_SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"
PERIOD_NS = 7_889_238 * 10**9  # Kineto's baseTimeNanoseconds period
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def shared_fixtures_dir() -> Path:
    env = os.environ.get("TRACEFUSE_SHARED_FIXTURES")
    return Path(env) if env else DEFAULT_SHARED_FIXTURES


# --------------------------------------------------------------------------- reading
def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name!r} (strict JSON has no NaN/Infinity)")


def strict_loads(data: bytes, exact: bool = False) -> Any:
    """Strict JSON: NaN/Infinity raise; ``exact`` parses floats as Decimal (the text)."""
    if exact:
        return json.loads(data, parse_constant=_reject_constant, parse_float=Decimal)
    return json.loads(data, parse_constant=_reject_constant)


def gunzip_one_member(raw: bytes) -> bytes:
    """Decompress a gzip file and assert it is exactly ONE member (Perfetto reads
    only the first member of a multi-member file)."""
    d = zlib.decompressobj(31)
    out = d.decompress(raw) + d.flush()
    assert d.eof, "gzip stream does not end (no final block / trailer)"
    assert d.unused_data == b"", (
        f"gzip output has {len(d.unused_data)} bytes after its first member: "
        "Perfetto would read only the first member"
    )
    return out


def unzstd(raw: bytes) -> bytes:
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw), read_across_frames=True) as r:
        return r.read()


def decompress_bytes(raw: bytes) -> bytes:
    if raw[:2] == GZIP_MAGIC:
        return gunzip_one_member(raw)
    if raw[:4] == ZSTD_MAGIC:
        return unzstd(raw)
    return raw


def read_bytes(path: Any) -> bytes:
    """Decompressed bytes of a .json / .json.gz / .json.zst file (by content)."""
    return decompress_bytes(Path(path).read_bytes())


def load_input(path: Any, exact: bool = False) -> Any:
    """An input trace (inputs may be multi-member gzip, so use the gzip module)."""
    raw = Path(path).read_bytes()
    if raw[:2] == GZIP_MAGIC:
        data = gzip.decompress(raw)
    elif raw[:4] == ZSTD_MAGIC:
        data = unzstd(raw)
    else:
        data = raw
    if exact:
        return json.loads(data, parse_float=Decimal)
    return json.loads(data)


def load_output(path: Any, exact: bool = False) -> Dict[str, Any]:
    obj = strict_loads(read_bytes(path), exact=exact)
    assert isinstance(obj, dict), "merged output must be one JSON object"
    return obj


def events_of(trace: Any) -> List[Dict[str, Any]]:
    return trace["traceEvents"] if isinstance(trace, dict) else trace


# --------------------------------------------------------------------------- rules
def is_meta(ev: Dict[str, Any]) -> bool:
    return ev.get("ph") == "M"


def kept(
    ev: Dict[str, Any],
    include_pyfunc: bool = False,
    keep_cat: Optional[Iterable[str]] = None,
    drop_cat: Iterable[str] = (),
    name_regex: Optional[str] = None,
    fn: Optional[Callable[[Dict[str, Any]], bool]] = None,
) -> bool:
    """The selection rule for a NON-metadata event, written from the docs."""
    cat = ev.get("cat")
    if cat == "python_function" and not include_pyfunc:
        return False
    if cat in set(drop_cat):
        return False
    if keep_cat is not None and cat not in set(keep_cat):
        return False
    if name_regex is not None:
        name = ev.get("name")
        if not isinstance(name, str) or not re.search(name_regex, name):
            return False
    if fn is not None and not fn(ev):
        return False
    return True


def kept_events(events: Iterable[Dict[str, Any]], **flt: Any) -> List[Dict[str, Any]]:
    return [e for e in events if not is_meta(e) and kept(e, **flt)]


def split_by_rank(out: Dict[str, Any]) -> Dict[int, List[Dict[str, Any]]]:
    """Output events per ``args.rank``, asserting every event has one and that each
    rank is ONE contiguous section, ranks in increasing order."""
    sections: Dict[int, List[Dict[str, Any]]] = {}
    order: List[int] = []
    for i, ev in enumerate(out["traceEvents"]):
        args = ev.get("args")
        assert isinstance(args, dict) and "rank" in args, f"event #{i} has no args.rank: {ev!r:.200}"
        r = args["rank"]
        assert type(r) is int
        if not order or order[-1] != r:
            assert r not in sections, f"rank {r} is not one contiguous section (event #{i})"
            order.append(r)
        sections.setdefault(r, []).append(ev)
    assert order == sorted(order), f"rank sections are not in rank order: {order}"
    return sections


def non_meta(events: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [e for e in events if not is_meta(e)]


def meta(events: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [e for e in events if is_meta(e)]


def to_ns(us: Any) -> Decimal:
    """Microseconds (int or Decimal from the raw text) -> nanoseconds, exactly."""
    assert isinstance(us, (int, Decimal)) and not isinstance(us, bool), f"ts is {us!r}"
    d = Decimal(us) * 1000
    return d


def abs_ns(base: Optional[int], ts: Any) -> int:
    d = Decimal(base or 0) + to_ns(ts)
    assert d == d.to_integral_value(), f"ts {ts} is not a whole number of ns"
    return int(d)


def default_sigint() -> None:
    """``preexec_fn`` of a child that a test interrupts with SIGINT: SIGINT back to its
    default action, so the child's Python turns it into KeyboardInterrupt even when the
    suite runs with SIGINT ignored (a shell's background job, ``pytest ... &``, ignores
    it, and children inherit that)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(
    *args: Any,
    cwd: Any = None,
    timeout: float = 120,
    env: Optional[Dict[str, str]] = None,
    input: Optional[bytes] = None,
) -> subprocess.CompletedProcess:
    """``python -m tracefuse_stream ARGS`` in a subprocess (bytes stdout, text stderr)."""
    e = dict(os.environ)
    e.pop("TRACEFUSE_DEBUG", None)
    if env:
        e.update(env)
    p = subprocess.run(
        [sys.executable, "-m", "tracefuse_stream", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        timeout=timeout,
        env=e,
        input=input,
    )
    p.stderr_text = p.stderr.decode("utf-8", "replace")  # type: ignore[attr-defined]
    return p


# --------------------------------------------------------------------------- writing inputs
def json_text(v: Any) -> str:
    """JSON text with every Decimal written with its own digits (json.dumps cannot),
    ", "/": " separators like json.dumps: an exact round trip of parsed inputs."""
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {json_text(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(json_text(x) for x in v) + "]"
    return json.dumps(v)


def _decimal_default(obj: Any) -> Any:
    import orjson

    if isinstance(obj, Decimal):
        return orjson.Fragment(str(obj).encode())
    raise TypeError(type(obj).__name__)


def write_trace(
    obj: Dict[str, Any], path: Any, key_order: Optional[List[str]] = None, indent: bool = True
) -> Path:
    """Write a (Decimal-parsed) trace with every number's digits kept, the top-level
    keys in ``key_order`` (others after, in their order), gzip when the name ends .gz."""
    import orjson

    path = Path(path)
    if key_order is not None:
        ordered = {k: obj[k] for k in key_order if k in obj}
        ordered.update({k: v for k, v in obj.items() if k not in ordered})
        obj = ordered
    data = orjson.dumps(obj, default=_decimal_default, option=orjson.OPT_INDENT_2 if indent else 0)
    if path.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=1)
    path.write_bytes(data)
    return path


def shifted_copy(trace: Dict[str, Any], shift_ns: int, rank: Optional[int] = None) -> Dict[str, Any]:
    """A copy whose baseTimeNanoseconds is ``shift_ns`` later and every ts ``shift_ns``
    earlier (same absolute times); ``rank`` sets distributedInfo.rank."""
    import copy

    out = copy.deepcopy(trace)
    out["baseTimeNanoseconds"] = trace["baseTimeNanoseconds"] + shift_ns
    d = Decimal(shift_ns) / 1000
    for ev in out["traceEvents"]:
        if "ts" in ev:
            ev["ts"] = ev["ts"] - d
    if rank is not None:
        out["distributedInfo"] = dict(out.get("distributedInfo") or {}, rank=rank)
    return out


# --------------------------------------------------------------------------- checking
def expected_pid_map(
    kept_evs: Iterable[Dict[str, Any]], rank: int, all_evs: Iterable[Dict[str, Any]] = ()
) -> Dict[Any, int]:
    """docs/OUTPUT_FORMAT.md pid rule: ``(r+1)*10000 + p`` for integer pids 0..4999,
    ``(r+1)*10000 + 5000 + i`` for the others, i in order of first appearance (among
    the kept events: for the real traces and filters used here that is also the order
    in the file, since the CPU pid comes first and the string pids are kept or
    dropped together). A blank string pid (Kineto's "Record Window End") takes the CPU
    process's output pid (labelled "CPU" in ``all_evs``' metadata, else the first OS
    pid) when that came first."""
    kept_evs = list(kept_evs)
    labelled = [
        e.get("pid")
        for e in all_evs
        if e.get("ph") == "M"
        and e.get("name") == "process_labels"
        and "CPU" in str((e.get("args") or {}).get("labels"))
    ]
    m: Dict[Any, int] = {}
    slot = 5000
    for e in kept_evs:
        p = e.get("pid")
        key = (type(p).__name__, p)
        if key in m:
            continue
        if type(p) is str and not p.strip():
            cpu = [c for c in labelled if (type(c).__name__, c) in m]
            cpu = cpu or [c for c in m if c[0] == "int" and c[1] >= 5000][:1]
            if cpu:
                c = cpu[0]
                m[key] = m[c if isinstance(c, tuple) else (type(c).__name__, c)]
                continue
        if type(p) is int and 0 <= p < 5000:
            m[key] = (rank + 1) * 10000 + p
        else:
            m[key] = (rank + 1) * 10000 + slot
            slot += 1
    return m


def pkey(p: Any) -> Any:
    return (type(p).__name__, p)


def expected_tid(t: Any) -> Optional[int]:
    """The doc's tid rule; None = a synthetic tid (1_000_000_000 + i) is expected."""
    if type(t) is int:
        if 0 <= t < 2**32:
            return t
        if -(2**32) < t < 0:
            return -t
    return None


def norm(v: Any) -> Any:
    """Numbers compared by value: Decimal -> float (for args/headers, not ts/dur)."""
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    if isinstance(v, list):
        return [norm(x) for x in v]
    return v


# the link args the merge rewrites (tracefuse_stream.rewrite.rules.LINK_ID_ARGS, restated)
LINK_ARGS = (
    "correlation",
    "External id",
    "external id",
    "wait_on_cuda_event_record_corr_id",
    "wait_on_cuda_event_id",
    "Python id",
    "Python parent id",
)
GPU_LABEL = re.compile(r"^GPU (\d+)$")


def check_rank_section(
    section: List[Dict[str, Any]],
    inp: Any,
    rank: int,
    out_base: int,
    **flt: Any,
) -> Dict[str, Any]:
    """Check one rank's output section against its input (parsed with Decimal floats),
    event by event: the kept events in input order, every rewrite rule exact, then
    the regenerated metadata. Returns facts for further checks."""
    r = rank
    in_events = events_of(inp)
    in_base = inp.get("baseTimeNanoseconds") if isinstance(inp, dict) else None
    K = kept_events(in_events, **flt)
    n = len(K)
    assert len(section) >= n
    body, tail = section[:n], section[n:]
    bad = [i for i, e in enumerate(body) if is_meta(e)]
    assert not bad, f"rank {r}: metadata inside the event body (kept {n}, first at {bad[:3]})"
    bad = [i for i, e in enumerate(tail) if not is_meta(e)]
    assert not bad, f"rank {r}: {len(non_meta(section))} non-metadata events out, {n} expected from the input"
    pidmap = expected_pid_map(K, r, in_events)
    synth: Dict[Any, int] = {}
    synth_threads = set()
    for i, (k, o) in enumerate(zip(K, body)):
        where = f"rank {r} kept event #{i} ({k.get('ph')} {k.get('name')!r:.60})"
        extra = set(o) - set(k)
        assert extra <= {"args", "tid"}, f"{where}: unexpected keys {extra}"
        assert set(k) <= set(o), f"{where}: lost keys {set(k) - set(o)}"
        for key, v in k.items():
            if key in ("pid", "tid", "ts", "id", "args"):
                continue
            assert o[key] == v and type(o[key]) is type(v), f"{where}: {key} {o[key]!r} != {v!r}"
        assert o["pid"] == pidmap[pkey(k.get("pid"))], f"{where}: pid {o['pid']} for {k.get('pid')!r}"
        te = expected_tid(k.get("tid"))
        if te is not None:
            assert o["tid"] == te, f"{where}: tid {o['tid']} for {k.get('tid')!r}"
        else:
            t = o["tid"]
            assert type(t) is int and 1_000_000_000 <= t < 2**32, f"{where}: tid {t!r}"
            assert synth.setdefault(pkey(k.get("tid")), t) == t, f"{where}: tid mapping not stable"
            # thread_name = the original value; ``tid ''`` for an empty string (docs)
            synth_threads.add((o["pid"], t, str(k.get("tid")) or "tid ''"))
        if "ts" in k:
            assert abs_ns(out_base, o["ts"]) == abs_ns(in_base, k["ts"]), (
                f"{where}: absolute time changed: out {out_base} + {o['ts']} us vs in {in_base} + {k['ts']} us"
            )
        if "id" in k:
            assert type(k["id"]) is int
            assert o["id"] == (r << 32) + k["id"] and o["id"] % 2**32 == k["id"], f"{where}: id {o['id']}"
        exp_args = dict(k.get("args") or {})
        for a in LINK_ARGS:
            if type(exp_args.get(a)) is int and 0 <= exp_args[a] < 2**32:  # -1 etc.: no id, kept
                exp_args[a] = (r << 32) + exp_args[a]
                assert o["args"][a] % 2**32 == k["args"][a]
        exp_args["rank"] = r
        assert norm(o["args"]) == norm(exp_args), f"{where}: args {o['args']!r:.300} != {exp_args!r:.300}"
    assert len(set(synth.values())) == len(synth), f"rank {r}: two original tids share a synthetic tid"

    # ---- metadata
    kept_pids = {o["pid"] for o in body}
    inv: Dict[int, Any] = {}
    for k, v in pidmap.items():
        inv.setdefault(v, k[1])  # pid "" shares the CPU process: the CPU pid is its original
    for m in tail:
        assert m["pid"] in kept_pids, f"rank {r}: metadata {m!r:.200} for a process without kept events"
        assert m["args"]["rank"] == r
    per_pid: Dict[str, Dict[int, List[Any]]] = {}
    for m in tail:
        per_pid.setdefault(m["name"], {}).setdefault(m["pid"], []).append(m)
    for what in ("process_name", "process_sort_index"):
        got = per_pid.get(what, {})
        if not kept_pids:
            assert not got
            continue
        assert sorted(got) == sorted(kept_pids), (
            f"rank {r}: {what} for pids {sorted(got)} != {sorted(kept_pids)}"
        )
        dup = {p: len(v) for p, v in got.items() if len(v) != 1}
        assert not dup, f"rank {r}: {what} more than once: {dup}"
    in_meta = meta(in_events)
    labels = {pkey(e["pid"]): e["args"].get("labels") for e in in_meta if e.get("name") == "process_labels"}
    in_names = {pkey(e["pid"]): e["args"].get("name") for e in in_meta if e.get("name") == "process_name"}
    gpu_event_pids = {e.get("pid") for e in K if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    kinds: Dict[int, Any] = {}
    out_labels = {m["pid"]: m["args"]["labels"] for m in tail if m["name"] == "process_labels"}
    for pid in kept_pids:
        orig = inv[pid]
        sort = per_pid["process_sort_index"][pid][0]["args"]["sort_index"]
        assert type(sort) is int and -(2**31) <= sort < 2**31, f"sort index {sort!r} is not an int32"
        lab = labels.get(pkey(orig))
        gm = GPU_LABEL.match(lab or "")
        if isinstance(orig, str):
            kinds[pid] = ("OTHER", None)
            assert r * 1000 + 900 <= sort < (r + 1) * 1000, f"{orig!r}: sort {sort}"
        elif gm:
            kinds[pid] = ("GPU", int(gm.group(1)))
            assert sort == r * 1000 + 100 + int(gm.group(1)), f"{orig!r}: sort {sort}"
        elif lab == "CPU" or (lab is None and type(orig) is int and orig >= 0 and orig not in gpu_event_pids):
            # no process_labels (old traces): a process without GPU work is the CPU
            kinds[pid] = ("CPU", None)
            assert r * 1000 <= sort < r * 1000 + 100, f"{orig!r}: sort {sort}"
        else:
            raise AssertionError(f"rank {r}: test does not know the kind of pid {orig!r} (labels {lab!r})")
        # the detail is in process_labels: the original pid and name, Kineto's label
        detail = out_labels.get(pid, "")
        assert detail.startswith(f"rank {r}, "), f"rank {r}: process_labels {detail!r}"
        assert (f"pid {orig!r}" if isinstance(orig, str) else f"pid {orig}") in detail, (
            f"{detail!r} lacks the pid"
        )
        if in_names.get(pkey(orig)):
            assert in_names[pkey(orig)] in detail, f"{detail!r} lacks the original name"
        if lab:
            assert detail.endswith(", " + lab), f"{detail!r} lacks Kineto's label {lab!r}"
    n_gpus = sum(1 for k in kinds.values() if k[0] == "GPU")
    for pid, (kind, dev) in kinds.items():
        # TraceLens' convention, exactly: RANK r - CPU / RANK r - GPU (index only if several)
        name = per_pid["process_name"][pid][0]["args"]["name"]
        orig = inv[pid]
        if kind == "CPU":
            want = f"RANK {r} - CPU"
        elif kind == "GPU":
            want = f"RANK {r} - GPU {dev}" if n_gpus > 1 else f"RANK {r} - GPU"
        else:
            want = f"RANK {r} - {orig}" if orig else name  # "": any readable spelling
            assert name.startswith(f"RANK {r} - "), name
        assert name == want, f"rank {r}: process_name {name!r}, expected {want!r}"
    # original thread names / sort indexes of kept pids are kept (remapped)
    import collections

    def tid_out(t: Any) -> Any:
        te = expected_tid(t)
        return te if te is not None else synth.get(pkey(t))

    exp_tn = collections.Counter(
        (pidmap[pkey(e["pid"])], tid_out(e.get("tid")), e["args"]["name"])
        for e in in_meta
        if e.get("name") == "thread_name" and pkey(e["pid"]) in pidmap
    )
    got_tn = collections.Counter(
        (m["pid"], m.get("tid"), m["args"]["name"]) for m in tail if m["name"] == "thread_name"
    )
    missing = exp_tn - got_tn
    assert not missing, f"rank {r}: thread names lost: {dict(missing)}"
    for pid, tid, nm in got_tn - exp_tn:
        assert (pid, tid, nm) in synth_threads, f"rank {r}: unexpected thread_name {(pid, tid, nm)}"
    for pid, tid, nm in synth_threads:
        assert got_tn[(pid, tid, nm)] >= 1, f"rank {r}: synthetic tid {tid} has no thread_name {nm!r}"
    exp_ts = collections.Counter(
        (pidmap[pkey(e["pid"])], tid_out(e.get("tid")), e["args"]["sort_index"])
        for e in in_meta
        if e.get("name") == "thread_sort_index" and pkey(e["pid"]) in pidmap
    )
    got_ts = collections.Counter(
        (m["pid"], m.get("tid"), m["args"]["sort_index"]) for m in tail if m["name"] == "thread_sort_index"
    )
    assert got_ts == exp_ts, f"rank {r}: thread_sort_index {got_ts} != {exp_ts}"
    allowed = {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}
    assert {m["name"] for m in tail} <= allowed
    return {
        "kept": n,
        "pidmap": pidmap,
        "kinds": kinds,
        "sort": {p: v[0]["args"]["sort_index"] for p, v in per_pid.get("process_sort_index", {}).items()},
        "in_base": in_base,
    }


#: the output base rule of docs/OUTPUT_FORMAT.md ("Timestamps"), written out again
BASE_LEAD_NS, BASE_FLOOR_NS, SMALL_TS_NS = 10 * 10**9, 10**6, 2**32 * 1000


def expected_output_base(ins: Dict[int, Any], bases: Dict[int, Optional[int]], **flt: Any) -> int:
    """B: the smallest base of the ranks with events when their first events sit less
    than 2**32 us after it, else the earliest rank's first timed event (file order)
    minus 10 s, floored to a whole ms; lowered to the earliest written event (floored)
    when one lies before that; never negative."""
    zeros, starts, written = [], [], []
    for r, t in ins.items():
        evs = events_of(t)
        zero = bases[r] or 0
        timed = [e for e in evs if e.get("ph") != "M" and type(e.get("ts")) in (int, Decimal)]
        if bases[r] is not None or timed:
            zeros.append(zero)
        if timed:
            starts.append(zero + int(timed[0]["ts"] * 1000))
        kept_evs = [e for e in timed if kept(e, **flt)]
        pids = {e.get("pid") for e in kept_evs}
        written += [zero + int(e["ts"] * 1000) for e in kept_evs]
        written += [zero + int(e["ts"] * 1000) for e in evs if e.get("ph") == "M" and e.get("pid") in pids
                    and type(e.get("ts")) in (int, Decimal)]  # fmt: skip
    base = min(zeros, default=0)
    if starts and not 0 <= min(starts) - base < SMALL_TS_NS:
        lead = min(starts) - BASE_LEAD_NS
        base = lead - lead % BASE_FLOOR_NS
    base = max(base, 0)
    if base > 0 and written and min(written) < base:
        base = max(0, min(written) - min(written) % BASE_FLOOR_NS)
    return base


def check_merge(out: Dict[str, Any], inputs: Dict[int, Any], **flt: Any) -> Dict[int, Dict[str, Any]]:
    """Check a whole merged trace (parsed with ``exact=True``) against ``{rank: input
    path}``: sections, bases, every event, metadata, header, global uniqueness."""
    assert set(out) == {"schemaVersion", "displayTimeUnit", "baseTimeNanoseconds", "traceEvents", "tracefuse"}
    tf = out["tracefuse"]
    ins = {r: cached_input(p, exact=True) for r, p in inputs.items()}
    bases = {r: (t.get("baseTimeNanoseconds") if isinstance(t, dict) else None) for r, t in ins.items()}
    B = expected_output_base(ins, bases, **flt)
    assert out["baseTimeNanoseconds"] == B and type(out["baseTimeNanoseconds"]) is int
    assert tf["base_time_ns"] == B
    assert tf["ranks_merged"] == sorted(inputs)
    sections = split_by_rank(out)
    assert set(sections) <= set(inputs), f"ranks in output {sorted(sections)} not in {sorted(inputs)}"
    facts: Dict[int, Dict[str, Any]] = {}
    for r, path in sorted(inputs.items()):
        inp = ins[r]
        # a rank that keeps no event has no section at all (no metadata either)
        f = check_rank_section(sections.get(r, []), inp, r, B, **flt)
        facts[r] = f
        rh = tf["ranks"][str(r)]
        assert rh["rank"] == r
        assert os.path.samefile(rh["source"], path), f"rank {r}: source {rh['source']!r} is not {path}"
        assert rh["base_time_ns"] == bases[r]
        assert rh["shift_ns"] == (bases[r] or 0) - B
        exp_header = {k: v for k, v in inp.items() if k != "traceEvents"} if isinstance(inp, dict) else {}
        assert sorted(rh["header"]) == sorted(exp_header), f"rank {r}: header keys {sorted(rh['header'])}"
        assert norm(rh["header"]) == norm(exp_header), f"rank {r}: header differs from the input's keys"
        assert rh["pids"] == [[k[1], v] for k, v in f["pidmap"].items()]
        assert rh["events_in"] == len(events_of(inp))
        assert rh["events_out"] == len(sections.get(r, []))
    # global: pids, flows, sort order
    pid_ranks: Dict[Any, set] = {}
    flow_ranks: Dict[Any, set] = {}
    for ev in out["traceEvents"]:
        r = ev["args"]["rank"]
        p = ev["pid"]
        assert type(p) is int and 1 <= p <= 2**31 - 1, f"pid {p!r}"
        assert p // 10000 - 1 == r, f"pid {p} in rank {r}"
        pid_ranks.setdefault(p, set()).add(r)
        if ev.get("ph") in ("s", "t", "f"):
            flow_ranks.setdefault((ev.get("cat"), ev.get("name"), ev.get("id")), set()).add(r)
    assert all(len(v) == 1 for v in pid_ranks.values())
    shared = {k: v for k, v in flow_ranks.items() if len(v) > 1}
    assert not shared, f"flow keys shared by ranks: {list(shared.items())[:3]}"
    sort_of = {}
    for r, f in facts.items():
        for p, s in f["sort"].items():
            sort_of[p] = (s, r, f["kinds"][p])
    assert len({v[0] for v in sort_of.values()}) == len(sort_of), "two processes share a sort index"
    by_sort = [sort_of[p] for p in sorted(sort_of, key=lambda p: sort_of[p][0])]
    assert [v[1] for v in by_sort] == sorted(v[1] for v in by_sort), "processes of ranks interleave"
    order_rank = {"CPU": 0, "GPU": 1, "OTHER": 2}
    for r in facts:
        kinds_in_order = [v[2] for v in by_sort if v[1] == r]
        keyed = [(order_rank[k], d if d is not None else -1) for k, d in kinds_in_order]
        assert keyed == sorted(keyed), (
            f"rank {r}: processes not ordered CPU, GPU 0.., others: {kinds_in_order}"
        )
    return facts


# --------------------------------------------------------------------------- fixtures
SHARED_REASON = "needs the real GPU traces in ../shared/fixtures (set TRACEFUSE_SHARED_FIXTURES)"


def require_shared(*parts: str) -> Path:
    """The shared fixtures folder (or ``parts`` inside it) for a test that needs it.

    The GPU traces in ../shared/fixtures are extra coverage, not part of the
    repository: a fresh clone without them must pass, so the test SKIPS with a
    reason there. Where the environment variable ``CI`` is set they are required
    and a missing folder FAILS the test loudly. Every test that needs the folder
    comes through here (directly or through the ``shared_fixtures`` fixture)."""
    d = shared_fixtures_dir()
    p = d.joinpath(*parts)
    if not ((d / "ddp4_transformer_tb").is_dir() and (d / "real").is_dir() and p.exists()):
        msg = f"{SHARED_REASON}: {p} not found"
        if os.environ.get("CI"):
            pytest.fail(f"{msg}; they are required when CI is set", pytrace=False)
        pytest.skip(msg)
    return p


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    return require_shared()


@pytest.fixture(scope="session")
def ddp4_dir(shared_fixtures: Path) -> Path:
    return shared_fixtures / "ddp4_transformer_tb"


@pytest.fixture(scope="session")
def ddp4_files(ddp4_dir: Path) -> List[Path]:
    files = sorted(ddp4_dir.glob("*.json.gz"))
    if len(files) != 4:
        pytest.fail(f"{ddp4_dir} should hold 4 rank traces, found {len(files)}", pytrace=False)
    return files


@pytest.fixture(scope="session")
def real_dir(shared_fixtures: Path) -> Path:
    return shared_fixtures / "real"


_INPUT_CACHE: Dict[Any, Any] = {}


def cached_input(path: Any, exact: bool = False) -> Any:
    """Inputs parsed once per session (tests must not mutate them)."""
    key = (str(path), exact)
    if key not in _INPUT_CACHE:
        _INPUT_CACHE[key] = load_input(path, exact=exact)
    return _INPUT_CACHE[key]


@pytest.fixture(scope="session")
def ddp4_by_rank(ddp4_files: List[Path]) -> Dict[int, Path]:
    """rank -> file, from each file's distributedInfo (the names carry no rank)."""
    out: Dict[int, Path] = {}
    for f in ddp4_files:
        r = cached_input(f)["distributedInfo"]["rank"]
        assert r not in out
        out[r] = f
    assert sorted(out) == [0, 1, 2, 3]
    return out


# --------------------------------------------------------------------------- recorded traces
RECORDED = REPO / "tests" / "data" / "recorded"


def recorded(name: str) -> Path:
    """A folder of tests/data/recorded (real Kineto output, part of the repository:
    missing is a broken checkout, so it fails, never skips)."""
    d = RECORDED / name
    if not d.is_dir():
        pytest.fail(f"recorded traces {d} missing (see tests/data/recorded/README.md)", pytrace=False)
    return d


def by_rank(files: Iterable[Path]) -> Dict[int, Path]:
    """rank -> file, from each file's ``distributedInfo.rank`` (names carry no rank)."""
    out: Dict[int, Path] = {}
    for f in files:
        r = cached_input(f)["distributedInfo"]["rank"]
        assert r not in out, f"two files claim rank {r}: {out[r]} and {f}"
        out[r] = f
    return dict(sorted(out.items()))


@pytest.fixture(scope="session")
def rec_ddp4_by_rank() -> Dict[int, Path]:
    out = by_rank(sorted(recorded("ddp4").glob("*.json.gz")))
    assert sorted(out) == [0, 1, 2, 3]
    return out


@pytest.fixture(scope="session")
def rec_samepid_by_rank() -> Dict[int, Path]:
    out = by_rank(sorted(recorded("ddp4_samepid").glob("*.json.gz")))
    assert sorted(out) == [0, 1, 2, 3]
    return out


def _job(name: str, d: Path) -> SimpleNamespace:
    files = sorted(d.glob("*.json.gz"))
    ranks = by_rank(files)
    assert len(files) == 4 and sorted(ranks) == [0, 1, 2, 3], d
    return SimpleNamespace(name=name, dir=d, files=files, by_rank=ranks)


@pytest.fixture(scope="session", params=["recorded", "shared"])
def ddp4_job(request: Any) -> SimpleNamespace:
    """A real 4-rank gloo DDP job (shapes, stacks, memory): the one recorded in the
    repository (always) and the shared one (when present; see require_shared).
    For claims about the data that both show; ``dir``, ``files`` (by name), ``by_rank``."""
    if request.param == "recorded":
        return _job("recorded", recorded("ddp4"))
    return _job("shared", require_shared("ddp4_transformer_tb"))


@pytest.fixture(scope="session")
def rec_ddp4() -> SimpleNamespace:
    """The recorded 4-rank job alone: for claims about behaviour (errors, overwrite
    protection, clean-up) that do not depend on which real job is merged."""
    return _job("recorded", recorded("ddp4"))


H = SimpleNamespace(
    strict_loads=strict_loads,
    gunzip_one_member=gunzip_one_member,
    unzstd=unzstd,
    read_bytes=read_bytes,
    load_input=load_input,
    cached_input=cached_input,
    load_output=load_output,
    events_of=events_of,
    is_meta=is_meta,
    kept=kept,
    kept_events=kept_events,
    split_by_rank=split_by_rank,
    non_meta=non_meta,
    meta=meta,
    to_ns=to_ns,
    abs_ns=abs_ns,
    run_cli=run_cli,
    write_trace=write_trace,
    shifted_copy=shifted_copy,
    expected_pid_map=expected_pid_map,
    expected_tid=expected_tid,
    norm=norm,
    check_rank_section=check_rank_section,
    check_merge=check_merge,
    expected_output_base=expected_output_base,
    by_rank=by_rank,
    recorded=recorded,
    require_shared=require_shared,
    PERIOD_NS=PERIOD_NS,
    REPO=REPO,
)


@pytest.fixture(scope="session")
def h() -> SimpleNamespace:
    """The helpers above, as one object (tests do not import conftest)."""
    return H


def fuzz_seed(pinned: int) -> int:
    """A fuzz test's seed: ``TRACEFUSE_FUZZ_SEED`` replays one, ``CI`` pins ``pinned``,
    else a fresh random one (each test prints it)."""
    if os.environ.get("TRACEFUSE_FUZZ_SEED"):
        return int(os.environ["TRACEFUSE_FUZZ_SEED"])
    if os.environ.get("CI"):
        return pinned
    return random.SystemRandom().randrange(1 << 32)

"""Perfetto's own view of a trace file, from ``trace_processor_shell`` (the engine
inside the Perfetto UI): the judge of how a merged trace renders, where one is installed.

``trace_processor()`` finds the binary: ``$TRACEFUSE_TRACE_PROCESSOR``, else
``trace_processor_shell`` or ``trace_processor`` on ``PATH`` (the names of Perfetto's
own release binaries and installs). Nothing else: no package registry ships it, so
where it is absent the calling test SKIPS with the reason — with ``CI`` set too. Every
property these tests check is also checked, in every run, on the merged JSON itself by
the importer model (``tests/importer_model.py``): ``judge_view`` gives the same
:class:`View` from either judge.

``view(path)`` loads a trace once and runs ONE query whose rows are ``(kind, a, b, c,
value)`` facts (a single CSV result is simple to parse exactly), turned into a
:class:`View`: import-error stats, slices / flows / first slice per process, flows
between processes, global instants, machines.

Timestamps: for JSON, trace_processor's ``ts`` is the event's ``ts`` (µs) as integer
ns, with nothing added: it ignores the top-level ``baseTimeNanoseconds``. So the
wall-clock time of a slice is ``baseTimeNanoseconds of its file + ts`` (or ``ts``
alone for old traces without a base, whose ``ts`` is epoch µs).
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

REPO = Path(__file__).resolve().parents[1]
TRACE_PROCESSOR_NAMES = ("trace_processor_shell", "trace_processor")
JUDGES = ("model", "trace_processor")  # parametrize a test over both
RANK_NAME = re.compile(r"^RANK (\d+) - ")

# One query, one CSV table of facts. Slices on thread tracks (overflow tracks of
# overlapping X events included) are attributed to their thread's process; global
# instants (Kineto's "Iteration Start", "Record Window End") belong to no process.
FACTS_SQL = """
with sp as (
  select s.id as sid, s.ts as ts, t.upid as upid, coalesce(s.category, '') as cat
  from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
)
select 'stat' as kind, name as a, coalesce(idx, '') as b, severity as c, value
  from stats where severity in ('error', 'data_loss') and value > 0
union all
select 'slices', p.upid, p.pid, coalesce(p.name, ''), count(*) from sp join process p using (upid) group by p.upid
union all
select 'slices_no_pyfunc', p.upid, p.pid, '', count(*) from sp join process p using (upid)
  where sp.cat != 'python_function' group by p.upid
union all
select 'first_ts', p.upid, p.pid, coalesce(p.name, ''), min(sp.ts) from sp join process p using (upid) group by p.upid
union all
select 'flows', o.upid, i.upid, '', count(*)
  from flow f join sp o on f.slice_out = o.sid join sp i on f.slice_in = i.sid group by o.upid, i.upid
union all
select 'all_flows', '', '', '', count(*) from flow
union all
select 'all_slices', '', '', '', count(*) from slice
union all
select 'thread_slices', '', '', '', count(*) from sp
union all
select 'global_slices', '', '', '', count(*)
  from slice s join track t on s.track_id = t.id where t.type = 'legacy_chrome_global_instants'
union all
select 'global_first_ts', '', '', '', min(s.ts)
  from slice s join track t on s.track_id = t.id where t.type = 'legacy_chrome_global_instants'
union all
select 'machine', id, coalesce(name, ''), '', 1 from machine
union all
select 'process', upid, coalesce(pid, ''), coalesce(name, ''), 1 from process;
"""


def find_trace_processor() -> Optional[str]:
    """``$TRACEFUSE_TRACE_PROCESSOR`` if set, else Perfetto's binary names on PATH."""
    env = os.environ.get("TRACEFUSE_TRACE_PROCESSOR")
    if env:
        path = Path(env)
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    for name in TRACE_PROCESSOR_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def trace_processor() -> str:
    """Path of trace_processor, or skip with the reason (also under CI: it cannot be
    installed from a package registry, and the model checks the same properties)."""
    found = find_trace_processor()
    if found:
        return found
    env = os.environ.get("TRACEFUSE_TRACE_PROCESSOR")
    where = (
        f"TRACEFUSE_TRACE_PROCESSOR={env} is not an executable file"
        if env
        else (
            "neither TRACEFUSE_TRACE_PROCESSOR is set nor trace_processor_shell / trace_processor is on PATH"
        )
    )
    pytest.skip(
        f"Perfetto's trace_processor not available ({where}); the same properties are checked "
        "on the merged JSON by tests/importer_model.py"
    )
    raise AssertionError("unreachable")  # pragma: no cover


def run_query(trace: Path, sql: str, timeout: float = 120) -> List[Dict[str, str]]:
    """Rows of ``sql`` (one statement) on ``trace`` as dicts of strings (CSV cells;
    SQL NULL is the text ``[NULL]``). A failing trace_processor fails the test."""
    tp = trace_processor()
    with tempfile.TemporaryDirectory(prefix="tracefuse-tp-") as d:
        qfile = Path(d) / "query.sql"  # beside nothing of the trace's: inputs may be read-only
        qfile.write_text(sql)
        p = subprocess.run(
            [tp, "-q", str(qfile), str(trace)], capture_output=True, timeout=timeout, text=True
        )
    assert p.returncode == 0, f"trace_processor failed on {trace} (exit {p.returncode}): {p.stderr[-2000:]}"
    out = p.stdout.strip("\n")
    return list(csv.DictReader(io.StringIO(out)))


@dataclass
class View:
    """What Perfetto makes of one trace file."""

    path: Path
    error_stats: Dict[str, int] = field(default_factory=dict)  # "name[idx]" -> value
    process_names: Dict[int, str] = field(default_factory=dict)  # upid -> process name
    slices_by_upid: Dict[int, int] = field(default_factory=dict)
    slices_no_pyfunc_by_upid: Dict[int, int] = field(default_factory=dict)  # without python_function
    first_ts_by_upid: Dict[int, int] = field(default_factory=dict)
    flows_between: Dict[Tuple[int, int], int] = field(default_factory=dict)  # (upid out, upid in)
    all_flows: int = 0
    all_slices: int = 0
    thread_slices: int = 0
    global_slices: int = 0
    global_first_ts: Optional[int] = None
    machines: List[str] = field(default_factory=list)

    # -- per rank, through the merged trace's process names "RANK r - ..." ----------
    def rank_of(self, upid: int) -> Optional[int]:
        m = RANK_NAME.match(self.process_names.get(upid, ""))
        return int(m.group(1)) if m else None

    def slices_by_rank(self, no_pyfunc: bool = False) -> Dict[int, int]:
        out: Counter = Counter()
        for upid, n in (self.slices_no_pyfunc_by_upid if no_pyfunc else self.slices_by_upid).items():
            out[self._rank_or_fail(upid)] += n
        return dict(out)

    def flows_by_rank(self) -> Dict[int, int]:
        out: Counter = Counter()
        for (o, _i), n in self.flows_between.items():
            out[self._rank_or_fail(o)] += n
        return dict(out)

    def first_ts_by_rank(self) -> Dict[int, int]:
        out: Dict[int, int] = {}
        for upid, ts in self.first_ts_by_upid.items():
            r = self._rank_or_fail(upid)
            out[r] = min(ts, out.get(r, ts))
        return out

    def cross_rank_flows(self) -> Dict[Tuple[int, int], int]:
        """Flows whose two slices are in different ranks' processes."""
        out: Dict[Tuple[int, int], int] = {}
        for (o, i), n in self.flows_between.items():
            ro, ri = self._rank_or_fail(o), self._rank_or_fail(i)
            if ro != ri:
                out[(ro, ri)] = out.get((ro, ri), 0) + n
        return out

    def _rank_or_fail(self, upid: int) -> int:
        r = self.rank_of(upid)
        assert r is not None, (
            f"{self.path}: process upid {upid} named {self.process_names.get(upid)!r} has slices "
            "but no 'RANK r - ' name"
        )
        return r

    # -- the whole file ---------------------------------------------------------------
    def first_ts(self) -> Optional[int]:
        """Earliest slice ts on a thread (trace_processor ns = JSON ts x 1000)."""
        return min(self.first_ts_by_upid.values(), default=None)


def _int(s: str) -> int:
    return int(s)


def view(trace: Path) -> View:
    """Load ``trace`` in trace_processor once and collect its :class:`View`."""
    v = View(path=Path(trace))
    for row in run_query(Path(trace), FACTS_SQL):
        kind, a, b, c, value = row["kind"], row["a"], row["b"], row["c"], row["value"]
        if kind == "stat":
            v.error_stats[f"{a}[{b}]" if b else a] = _int(value)
        elif kind == "process":
            v.process_names[_int(a)] = "" if c == "[NULL]" else c
        elif kind == "slices":
            v.slices_by_upid[_int(a)] = _int(value)
        elif kind == "slices_no_pyfunc":
            v.slices_no_pyfunc_by_upid[_int(a)] = _int(value)
        elif kind == "first_ts":
            v.first_ts_by_upid[_int(a)] = _int(value)
        elif kind == "flows":
            v.flows_between[(_int(a), _int(b))] = _int(value)
        elif kind == "all_flows":
            v.all_flows = _int(value)
        elif kind == "all_slices":
            v.all_slices = _int(value)
        elif kind == "thread_slices":
            v.thread_slices = _int(value)
        elif kind == "global_slices":
            v.global_slices = _int(value)
        elif kind == "global_first_ts":
            v.global_first_ts = None if value == "[NULL]" else _int(value)
        elif kind == "machine":
            v.machines.append(b)
        else:  # pragma: no cover
            raise AssertionError(f"unknown fact kind {kind!r}")
    return v


def summed_error_stats(views: List[View]) -> Dict[str, int]:
    """Import-error stats of several traces added up (what a merge may have at most)."""
    out: Counter = Counter()
    for v in views:
        out.update(v.error_stats)
    return dict(out)


def judge_view(judge: str, trace: Path) -> View:
    """The :class:`View` of ``trace`` by ``judge``: ``"model"`` (the importer model, on
    the JSON itself: always) or ``"trace_processor"`` (skips where it is absent)."""
    if judge == "trace_processor":
        return view(trace)
    from importer_model import model_view  # importer_model imports this module

    return model_view(trace)

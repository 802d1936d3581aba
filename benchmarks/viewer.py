#!/usr/bin/env python3
"""What a merged trace costs the viewer: load time and peak RSS in Perfetto's trace_processor.

Needs Perfetto's trace_processor (TRACEFUSE_TRACE_PROCESSOR=/path, or trace_processor_shell on PATH).

    python benchmarks/viewer.py [--case a100x8,ddp4_tb,...] [--outputs all,slim,none] [--reps 3]
                                [--no-mmap] [--json results.json] [--fit]

For each case (real traces only: copies of the shared GPU traces, the shared 4-rank job
alone and twice over as 8 ranks, the recorded jobs) and each output kind, the merge is
written once, then loaded ``--reps`` times by ``trace_processor_shell -q`` (a trivial
query: the cost is the import) under ``/usr/bin/time -f '%e %M'``; the empty trace is
loaded the same way, interleaved, and every RSS is also reported *above* the empty
trace's (the number the viewer estimate models). Medians are reported. The merge's own
``viewer_memory_bytes`` estimate is printed beside the measurement with its error.

``trace_processor_shell`` maps the whole file and its JSON tokenizer copies each mapped
slice (up to 128 MB) into a buffer of its own, so ~1-2x the file's bytes are in its peak
RSS as text; the UI passes the file to the engine in 32 MB slices, so there at most a
slice is held as text. ``--no-mmap`` (``TRACE_PROCESSOR_NO_MMAP=1``: read in 1 MB chunks)
measures the engine without the file: the sorter's queue and the tables.

``--fit`` refits the coefficients of :mod:`tracefuse_stream.report.viewer` by least
squares on relative error over the cases of ``FIT_CASES`` and prints them with the error
on every case (those fitted on and the others).

Output kinds are the registry :data:`OUTPUTS`: name -> (file suffix, merge keywords).
The Perfetto v58 archive is ``archive`` / ``archive.gz`` / ``archive.slim``
(``--outputs all,slim,archive``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tracefuse_stream import merge  # noqa: E402
from tracefuse_stream.plan.planner import plan_file  # noqa: E402
from tracefuse_stream.report.viewer import COEFFICIENTS, ViewerCounts, estimate_viewer_bytes  # noqa: E402

SHARED = Path(os.environ.get("TRACEFUSE_SHARED_FIXTURES", REPO.parent / "shared" / "fixtures"))
NEEDS = (
    "needs Perfetto's trace_processor (e.g. trace_processor_shell from Perfetto's releases): "
    "set TRACEFUSE_TRACE_PROCESSOR=/path/to/trace_processor_shell or put it on PATH"
)


def _find_trace_processor() -> Optional[Path]:
    env = os.environ.get("TRACEFUSE_TRACE_PROCESSOR")
    if env:
        return Path(env) if Path(env).is_file() and os.access(env, os.X_OK) else None
    found = shutil.which("trace_processor_shell") or shutil.which("trace_processor")
    return Path(found) if found else None


TRACE_PROCESSOR = _find_trace_processor() or Path("trace_processor_shell")
RECORDED = REPO / "tests" / "data" / "recorded"

#: output kind -> (suffix of the written file, extra merge keywords)
OUTPUTS: Dict[str, Tuple[str, Dict[str, Any]]] = {
    "all": (".json", {"args": "all"}),
    "slim": (".json", {"args": "slim"}),
    "none": (".json", {"args": "none"}),
    "all.gz": (".json.gz", {"args": "all"}),
    "slim.gz": (".json.gz", {"args": "slim"}),
    "archive": (".perfetto.tar", {"args": "all"}),  # Perfetto v58 archive (write/archive.py)
    "archive.gz": (".perfetto.tar.gz", {"args": "all"}),
    "archive.slim": (".perfetto.tar", {"args": "slim"}),
}


Inputs = Union[List[Path], Dict[int, Path]]


def _copies(name: str, n: int) -> Callable[[Path], Inputs]:
    """n byte-identical copies of one real single-rank trace (merged with rank_from=order)."""

    def build(tmp: Path) -> List[Path]:
        src = SHARED / "real" / name
        d = tmp / f"{name.split('.')[0]}x{n}"
        d.mkdir(exist_ok=True)
        out = []
        for r in range(n):
            p = d / f"rank_{r}.json.gz"
            if not p.exists():
                shutil.copyfile(src, p)
            out.append(p)
        return out

    return build


def _dir(path: Path) -> Callable[[Path], Inputs]:
    return lambda tmp: [path]


def _twice(path: Path) -> Callable[[Path], Inputs]:
    """A real job's ranks twice over: rank r (its distributedInfo.rank) and r + world size
    read the same file (explicit ``{rank: path}`` inputs), so an n-rank job merges as 2n."""

    def build(tmp: Path) -> Inputs:
        files = sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")))
        ranks = {int(plan_file(p, i).header["distributedInfo"]["rank"]): p for i, p in enumerate(files)}
        return {**ranks, **{r + len(ranks): p for r, p in ranks.items()}}

    return build


#: case -> (inputs builder, merge keywords)
CASES: Dict[str, Tuple[Callable[[Path], Inputs], Dict[str, Any]]] = {
    "a100x8": (_copies("a100_nccl_rank0.json.gz", 8), {"rank_from": "order", "include_pyfunc": True}),
    "mi300x4": (_copies("mi300_resnet_rank0.json.gz", 4), {"rank_from": "order", "include_pyfunc": True}),
    "h100x8": (_copies("h100_bert_small.json.gz", 8), {"rank_from": "order", "include_pyfunc": True}),
    "a100epochx8": (
        _copies("a100_no_distinfo_epoch_ts.json.gz", 8),
        {"rank_from": "order", "include_pyfunc": True},
    ),
    "ddp4_tb": (_dir(SHARED / "ddp4_transformer_tb"), {"include_pyfunc": True}),
    "ddp4_tb_nopy": (_dir(SHARED / "ddp4_transformer_tb"), {}),
    "ddp4_tbx2": (_twice(SHARED / "ddp4_transformer_tb"), {"include_pyfunc": True}),
    "ddp8_rec": (_dir(RECORDED / "ddp8_straggler"), {"include_pyfunc": True}),
    "ddp4_rec": (_dir(RECORDED / "ddp4"), {"include_pyfunc": True}),
}
DEFAULT_CASES = [
    "a100x8",
    "mi300x4",
    "h100x8",
    "a100epochx8",
    "ddp4_tb",
    "ddp4_tb_nopy",
    "ddp4_tbx2",
    "ddp8_rec",
    "ddp4_rec",
]
#: the merges the estimate's coefficients are fitted on (the others check it)
FIT_CASES = ["mi300x4", "ddp4_tb", "ddp4_rec"]

COUNT_SQL = (
    "select (select count(*) from slice) as slices, (select count(*) from flow) as flows, "
    "(select count(*) from args) as args;"
)


#: environment of the trace_processor runs (``--no-mmap`` adds TRACE_PROCESSOR_NO_MMAP=1)
TP_ENV: Dict[str, str] = dict(os.environ)


def load_cost(trace: Path, query: Path) -> Tuple[float, int]:
    """(seconds, peak RSS bytes) of one trace_processor import of ``trace``."""
    p = subprocess.run(
        ["/usr/bin/time", "-f", "%e %M", str(TRACE_PROCESSOR), "-q", str(query), str(trace)],
        capture_output=True,
        text=True,
        timeout=1800,
        env=TP_ENV,
    )
    if p.returncode != 0:
        raise SystemExit(f"trace_processor failed on {trace}: {p.stderr[-1000:]}")
    secs, kb = p.stderr.strip().splitlines()[-1].split()
    return float(secs), int(kb) * 1024


def tp_counts(trace: Path, tmp: Path) -> Dict[str, int]:
    q = tmp / "counts.sql"
    q.write_text(COUNT_SQL)
    p = subprocess.run(
        [str(TRACE_PROCESSOR), "-q", str(q), str(trace)],
        capture_output=True,
        text=True,
        timeout=1800,
        env=TP_ENV,
    )
    header, row = p.stdout.strip().splitlines()[-2:]
    return {k.strip('"'): int(v) for k, v in zip(header.split(","), row.split(","))}


def run(cases: List[str], outputs: List[str], reps: int, tmp: Path) -> Dict[str, Any]:
    query = tmp / "q.sql"
    query.write_text("select 1;\n")
    empty = tmp / "empty.json"
    empty.write_text('{"traceEvents": []}\n')
    version = subprocess.run(
        [str(TRACE_PROCESSOR), "--version"], capture_output=True, text=True
    ).stdout.strip()
    rows: List[Dict[str, Any]] = []
    empties: List[int] = []
    empty_secs: List[float] = []
    for case in cases:
        build, kw = CASES[case]
        built = build(tmp)
        inputs: Any = (
            {r: str(p) for r, p in built.items()} if isinstance(built, dict) else [str(p) for p in built]
        )
        for kind in outputs:
            suffix, extra = OUTPUTS[kind]
            out = tmp / f"{case}.{kind}{suffix}"
            s = merge(inputs, str(out), jobs=1, force=True, **kw, **extra)
            secs: List[float] = []
            rss: List[int] = []
            for _ in range(reps):
                e_s, e_r = load_cost(empty, query)
                empties.append(e_r)
                empty_secs.append(e_s)
                t, r = load_cost(out, query)
                secs.append(t)
                rss.append(r)
            row: Dict[str, Any] = {
                "case": case,
                "output": kind,
                "file_bytes": out.stat().st_size,
                "json_bytes": s.json_bytes,
                "events_out": s.events_out,
                "load_s": statistics.median(secs),
                "peak_rss": statistics.median(rss),
                "empty_rss": statistics.median(empties[-reps:]),
                "estimate": getattr(s, "viewer_memory_bytes", None),
                "counts": {"events": s.events_out, "json_bytes": s.json_bytes},
            }
            row.update(tp_counts(out, tmp))
            rows.append(row)
            out.unlink()
            print(_fmt(row), flush=True)
    return {
        "trace_processor": version,
        "mmap": TP_ENV.get("TRACE_PROCESSOR_NO_MMAP") != "1",
        "empty_rss": statistics.median(empties),
        "empty_load_s": statistics.median(empty_secs),
        "rows": rows,
    }


def _fmt(r: Dict[str, Any]) -> str:
    above = r["peak_rss"] - r["empty_rss"]
    est = r.get("estimate")
    err = f"{(est - above) / above * 100:+.0f}%" if est and above > 0 else "-"
    return (
        f"| {r['case']} | {r['output']} | {r['file_bytes'] / 1e6:,.1f} MB | {r['load_s']:.2f} s | "
        f"{r['peak_rss'] / 1e6:,.0f} MB | {above / 1e6:,.0f} MB | "
        f"{(est or 0) / 1e6:,.0f} MB ({err}) | {r['slices']:,} | {r['flows']:,} | {r['args']:,} |"
    )


HEADER = (
    "| case | output | file | load | peak RSS | above empty | estimate (error) | slices | flows | args |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def ratios(res: Dict[str, Any]) -> List[str]:
    """slim / all and none / all of the memory above the empty trace, per case."""
    out = []
    by = {(r["case"], r["output"]): r for r in res["rows"]}
    for case in dict.fromkeys(r["case"] for r in res["rows"]):
        a = by.get((case, "all"))
        if not a:
            continue
        base = a["peak_rss"] - a["empty_rss"]
        parts = [
            f"{k} {((by[(case, k)]['peak_rss'] - by[(case, k)]['empty_rss']) / base):.2f}x"
            for k in ("slim", "none")
            if (case, k) in by
        ]
        tparts = [
            f"{k} {by[(case, k)]['load_s'] / a['load_s']:.2f}x" for k in ("slim", "none") if (case, k) in by
        ]
        out.append(f"{case}: memory above empty {', '.join(parts)}; load time {', '.join(tparts)} (of all)")
    return out


def fit(res: Dict[str, Any]) -> None:
    """Least squares on relative error of the estimate's linear model over FIT_CASES."""
    import numpy as np

    names = list(COEFFICIENTS)
    rows = [r for r in res["rows"] if r["output"] in ("all", "slim", "none") and r["counts"]]
    X = np.array([[r["counts"][n] for n in names] for r in rows], dtype=float)
    y = np.array([r["peak_rss"] - r["empty_rss"] for r in rows], dtype=float)
    fit_mask = np.array([r["case"] in FIT_CASES for r in rows])
    w = 1.0 / y[fit_mask]
    coef, *_ = np.linalg.lstsq(X[fit_mask] * w[:, None], np.ones(fit_mask.sum()), rcond=None)
    print("fitted:", {n: round(float(c), 3) for n, c in zip(names, coef)})
    for r, x, yy, used in zip(rows, X, y, fit_mask):
        print(
            f"  {'fit ' if used else 'test'} {r['case']:>12} {r['output']:>5}: measured {yy / 1e6:7.1f} MB, "
            f"refit {float(x @ coef) / 1e6:7.1f} MB ({(float(x @ coef) - yy) / yy * 100:+4.0f}%), "
            f"current {estimate_viewer_bytes(ViewerCounts(**{n: r['counts'][n] for n in names})) / 1e6:7.1f} MB"
        )


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default=",".join(DEFAULT_CASES), help=f"comma separated, of {', '.join(CASES)}")
    ap.add_argument("--outputs", default="all,slim,none", help=f"comma separated, of {', '.join(OUTPUTS)}")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--report", help="re-print the results of an earlier --json")
    ap.add_argument("--fit", action="store_true", help="refit the estimate's coefficients (needs numpy)")
    ap.add_argument(
        "--no-mmap", action="store_true", help="TRACE_PROCESSOR_NO_MMAP=1: the engine without the mapped file"
    )
    a = ap.parse_args(argv)
    if a.no_mmap:
        TP_ENV["TRACE_PROCESSOR_NO_MMAP"] = "1"
    if a.report:
        res = json.loads(Path(a.report).read_text())
    else:
        if _find_trace_processor() is None:
            print(f"viewer.py: {NEEDS}; nothing measured", file=sys.stderr)
            return 0
        print(HEADER, flush=True)
        with tempfile.TemporaryDirectory(prefix="tfviewer-") as d:
            res = run(a.case.split(","), a.outputs.split(","), a.reps, Path(d))
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1))
    how = "" if res.get("mmap", True) else " (TRACE_PROCESSOR_NO_MMAP=1)"
    print(
        f"\n{res['trace_processor']}{how}; empty trace: {res['empty_rss'] / 1e6:.0f} MB, "
        f"{res['empty_load_s']:.2f} s"
    )
    if a.report:
        print(HEADER)
        for r in res["rows"]:
            print(_fmt(r))
    for line in ratios(res):
        print(line)
    if a.fit:
        fit(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())

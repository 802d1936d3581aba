#!/usr/bin/env python3
"""Benchmark suite of issue 3: the streaming merger side by side with the parse floor
and a naive load-everything baseline, in the same run, on generated multi-rank inputs.

    python benchmarks/bench.py --case small|8x64|8x256|4g|all [--case ...] [--reps N]
                               [--keep-data] [--json results.json]

For each case the inputs are generated once (``benchmarks/generate.py``, cached in
``/tmp/tfbench/<case>``, ``--data-root`` to change). Every measured command runs in its
own subprocess; while it runs, the RSS of its whole process tree (the command and all
its descendants, e.g. merge workers) is sampled every ~50 ms with psutil and summed
(``peak tree RSS``); the largest single-process RSS seen is kept too, and the kernel's
``ru_maxrss`` / CPU time of the child come from ``wait4``. Repetitions are interleaved
(floor, ours-json, ours-gz, ... then again, in a rotated order) so the noise of a
shared machine hits every command alike; the table shows medians, and the ratios
(ours / floor, ours / baseline, ...) are computed from those medians (the
per-repetition and best-of ratios are printed beside them). Every command imports one
pinned commit of ``tracefuse_stream`` (``--code``, default HEAD at start, exported to
``DATA_ROOT/code-<sha>``), because other people commit to this checkout during a run.

Commands (``ours`` = ``python -m tracefuse_stream merge DIR -o OUT -q --force``):

=============  ==============================================================
floor          ``benchmarks/parse_floor.py DIR``: ijson ``traceEvents.item``,
               ``use_float=True`` (redone exact on "integer overflow", as the
               merger does), nothing else
ours-json      ours ``-o out.json -j 1 --include-pyfunc``
ours-gz        ours ``-o out.json.gz -j 1 --include-pyfunc``
ours-zst       ours ``-o out.json.zst -j 1 --include-pyfunc``
ours-j2        ours ``-o out.json -j 2 --include-pyfunc``
ours-nopy      ours ``-o out.json -j 1`` (the default filter: python_function dropped)
baseline       ``benchmarks/naive_tracefuse.py DIR -o out.json.gz`` (orjson
               load-all, rewrite, ``json.dump(indent=4)`` through gzip level 9)
=============  ==============================================================

Targets (checked from the medians of this run; PASS/FAIL printed at the end):
ours-json >= 80% of the floor's MB/s; ours-gz <= 1.25x and ours-zst <= 1.10x the
wall time of ours-json; ours-j2 >= 1.7x the MB/s of ours-json; peak RSS <= 100 MB per
worker; peak RSS flat between the smallest (~130 MB) and the 4 GB case; ours-gz >= 8x
the baseline's MB/s with >= 20x less peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

try:
    import psutil
except ImportError:  # pragma: no cover
    sys.exit("bench.py needs psutil: pip install psutil (or pip install -e '.[bench]')")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable
MB = 1e6
POLL_S = 0.05

#: name -> ranks, MB per rank, repetitions, repetitions that include the baseline, commands
ALL_CMDS = ("floor", "ours-json", "ours-gz", "ours-zst", "ours-j2", "ours-nopy", "baseline")
CASES: Dict[str, dict] = {
    "small": dict(ranks=8, mb=16, reps=3, baseline_reps=3, cmds=ALL_CMDS),
    "8x64": dict(ranks=8, mb=64, reps=3, baseline_reps=2, cmds=ALL_CMDS),
    "8x256": dict(ranks=8, mb=256, reps=2, baseline_reps=1, cmds=ALL_CMDS),
    "4g": dict(ranks=8, mb=512, reps=1, baseline_reps=0, cmds=("floor", "ours-json", "ours-gz", "ours-j2")),
    # Optional (not in "all"): the same inputs with every integer beyond int64 (the
    # synthetic uint64 "Comms Id") replaced by value % 2**63, so that yajl's float path
    # is used end to end (no exact re-parse) -- what traces without uint64 ids get.
    "small-i64": dict(
        ranks=8,
        mb=16,
        reps=3,
        baseline_reps=0,
        from_case="small",
        cmds=("floor", "ours-json", "ours-gz", "ours-zst", "ours-j2"),
    ),
    "8x64-i64": dict(
        ranks=8,
        mb=64,
        reps=3,
        baseline_reps=0,
        from_case="8x64",
        cmds=("floor", "ours-json", "ours-gz", "ours-zst", "ours-j2"),
    ),
}
MAIN_CASES = ("small", "8x64", "8x256", "4g")
OUT_EXT = {
    "ours-json": ".json",
    "ours-gz": ".json.gz",
    "ours-zst": ".json.zst",
    "ours-j2": ".json",
    "ours-nopy": ".json",
    "baseline": ".json.gz",
}
#: the baseline's peak RSS / input size measured so far (used to decide whether it fits)
BASELINE_RSS_FACTOR_DEFAULT = 6.0


# ---------------------------------------------------------------------------- data
def input_dir(root: Path, case: str) -> Path:
    return root / case


_BIG_INT = re.compile(rb"(?<![\w.\"])(\d{19,})(?![\w.])")


def _mask_line(line: bytes) -> bytes:
    def sub(m: re.Match[bytes]) -> bytes:
        v = int(m.group(1))
        return m.group(1) if v < 2**63 else str(v % 2**63).encode()

    return _BIG_INT.sub(sub, line)


def ensure_data(root: Path, case: str, spec: dict) -> Path:
    """Generate the case's inputs unless a complete copy is cached."""
    d = input_dir(root, case)
    marker = d / ".complete"
    if marker.exists():
        return d
    tmp = root / f".{case}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    if spec.get("from_case"):
        src = ensure_data(root, spec["from_case"], CASES[spec["from_case"]])
        print(f"[{case}] writing {src} with integers beyond int64 masked to 63 bits", flush=True)
        tmp.mkdir()
        for f in sorted(src.glob("*.json")):  # plain JSON, line by line: flat memory
            with open(f, "rb") as fin, open(tmp / f.name, "wb") as fout:
                for line in fin:
                    fout.write(_mask_line(line) if b"Id" in line else line)
        tmp.rename(d)
        marker.write_text("ok\n")
        return d
    cmd = [
        PY,
        str(HERE / "generate.py"),
        str(tmp),
        "--ranks",
        str(spec["ranks"]),
        "--mb-per-rank",
        str(spec["mb"]),
        "--jobs",
        str(min(2, os.cpu_count() or 1)),
        "-q",
    ]
    print(f"[{case}] generating {spec['ranks']} x {spec['mb']} MB: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=REPO)
    shutil.rmtree(d, ignore_errors=True)
    tmp.rename(d)
    marker.write_text("ok\n")
    print(f"[{case}] generated in {time.perf_counter() - t0:.1f} s", flush=True)
    return d


def input_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir() if p.name.endswith((".json", ".json.gz", ".json.zst")))


# ---------------------------------------------------------------------------- measuring
@dataclass
class Run:
    """One measured execution of one command."""

    cmd: str
    rep: int
    wall_s: float
    cpu_s: float  # user + sys of the child and its reaped descendants (wait4)
    peak_tree_rss: int  # max over samples of the summed RSS of the process tree
    peak_proc_rss: int  # max over samples of the largest single process
    ru_maxrss: int  # wait4: largest RSS of the child or any reaped descendant
    max_procs: int  # most processes seen in the tree at once
    out_bytes: int
    rc: int
    stdout: str = ""
    load1: float = -1.0  # 1-minute load average when the command started (others' work too)


#: environment of every measured command (PYTHONPATH set by ``pin_code``)
ENV: Dict[str, str] = dict(os.environ)
#: working directory of every measured command: NOT the checkout, whose
#: ``tracefuse_stream/`` would shadow the pinned copy (``python -m`` puts the cwd first)
RUN_CWD = "/"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def pin_code(root: Path, code: str) -> Dict[str, str]:
    """Make every measured command import one fixed version of ``tracefuse_stream``.

    Other people commit to this checkout while a suite runs for an hour; a live
    import would measure several versions in one table. ``code`` = a commit (default
    ``HEAD``, resolved once at start) is exported with ``git archive`` into
    ``ROOT/code-<sha>`` and put first on ``PYTHONPATH``; ``worktree`` measures the
    live files (and records whether they differ from HEAD).
    """
    if code == "worktree":
        dirty = (
            subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "tracefuse_stream"], cwd=REPO).returncode
            != 0
        )
        info = {"code": "worktree", "commit": _git("rev-parse", "HEAD"), "dirty": str(dirty)}
    else:
        sha = _git("rev-parse", code)
        dest = root / f"code-{sha[:12]}"
        if not (dest / "tracefuse_stream" / "__init__.py").exists():
            dest.mkdir(parents=True, exist_ok=True)
            archive = subprocess.run(
                ["git", "archive", sha, "tracefuse_stream"], cwd=REPO, check=True, capture_output=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        ENV["PYTHONPATH"] = str(dest) + (os.pathsep + ENV["PYTHONPATH"] if ENV.get("PYTHONPATH") else "")
        info = {"code": code, "commit": sha, "path": str(dest)}
    where = subprocess.run(
        [PY, "-c", "import tracefuse_stream as t; print(t.__file__)"],
        cwd=RUN_CWD,
        env=ENV,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    info["imported_from"] = where
    subject = _git("log", "-1", "--format=%h %ad %s", "--date=format:%Y-%m-%d %H:%M", info["commit"])
    info["subject"] = subject[:120]
    print(f"code under test: {subject[:100]}\n  imported from {where}", flush=True)
    return info


def rss_by_pid(root: psutil.Process) -> Dict[int, int]:
    """RSS of ``root`` and each of its live descendants (one sample; processes that end
    meanwhile are left out)."""
    try:
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return {}
    out: Dict[int, int] = {}
    for p in procs:
        try:
            out[p.pid] = p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def wait_sampling(pid: int, sample: Callable[[], None]) -> Tuple[float, int, Any]:
    """Wait for child ``pid``, calling ``sample`` at its start and every POLL_S while it
    runs: (the moment it ended, on the ``time.perf_counter`` clock; its wait status;
    its rusage). The wait is a blocking ``wait4`` in a thread, so the end is read to
    the microsecond: a loop that polled with WNOHANG between samples saw the end only
    at its next wake-up, so every wall time came out a multiple of ~53 ms (0.105 /
    0.158 s for one start-up, 0.370 s for three commands of different work)."""
    done = threading.Event()
    got: Dict[str, Any] = {}

    def waiter() -> None:
        _pid, status, ru = os.wait4(pid, 0)
        got["end"], got["status"], got["ru"] = time.perf_counter(), status, ru
        done.set()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    while True:
        sample()
        if done.wait(POLL_S):
            break
    thread.join()
    return got["end"], got["status"], got["ru"]


def measure(argv: List[str], out_path: Optional[Path], name: str, rep: int) -> Run:
    """Run ``argv`` in a subprocess, sampling its process tree's RSS every POLL_S."""
    if out_path is not None and out_path.exists():
        out_path.unlink()
    load1 = os.getloadavg()[0]
    t0 = time.perf_counter()
    # stdout/stderr go to files, read at the end: a pipe that nobody drains while the
    # command runs blocks a command that prints more than ~64 KB (``info`` on 4,000 ranks)
    out_f, err_f = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, cwd=RUN_CWD, env=ENV, stdout=out_f, stderr=err_f)
    ps = psutil.Process(proc.pid)
    peak_tree = peak_proc = max_procs = 0

    def sample() -> None:
        nonlocal peak_tree, peak_proc, max_procs
        rss = rss_by_pid(ps)
        peak_proc = max([peak_proc, *rss.values()])
        peak_tree = max(peak_tree, sum(rss.values()))
        max_procs = max(max_procs, len(rss))

    end, status, ru = wait_sampling(proc.pid, sample)
    wall = end - t0
    out_f.seek(0)
    err_f.seek(0)
    out = out_f.read().decode(errors="replace")
    err = err_f.read().decode(errors="replace")
    out_f.close()
    err_f.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        print(f"  !! {name} exited {proc.returncode}: {err.strip()[-2000:]}", flush=True)
    out_bytes = out_path.stat().st_size if out_path is not None and out_path.exists() else 0
    if out_path is not None and out_path.exists():
        out_path.unlink()  # outputs can be GBs: measure, then delete
    return Run(
        cmd=name,
        rep=rep,
        wall_s=wall,
        cpu_s=ru.ru_utime + ru.ru_stime,
        peak_tree_rss=peak_tree,
        peak_proc_rss=peak_proc,
        ru_maxrss=ru.ru_maxrss * 1024,
        max_procs=max_procs,
        out_bytes=out_bytes,
        rc=proc.returncode,
        stdout=out.strip()[-500:],
        load1=load1,
    )


def command(name: str, data: Path, out_dir: Path, case: str):
    """(argv, output path) of a named command."""
    ext = OUT_EXT.get(name)
    out = out_dir / f"{case}.{name}{ext}" if ext else None
    merge = [PY, "-m", "tracefuse_stream", "merge", str(data), "-o", str(out), "-q", "--force"]
    if name == "floor":
        return [PY, str(HERE / "parse_floor.py"), str(data)], None
    if name in ("ours-json", "ours-gz", "ours-zst"):
        return merge + ["-j", "1", "--include-pyfunc"], out
    if name == "ours-j2":
        return merge + ["-j", "2", "--include-pyfunc"], out
    if name == "ours-nopy":
        return merge + ["-j", "1"], out
    if name == "baseline":
        return [PY, str(HERE / "naive_tracefuse.py"), str(data), "-o", str(out)], out
    raise ValueError(name)


def display(argv: Sequence[str]) -> str:
    """The command as a user would type it (repo-relative, ``python``)."""
    parts = []
    for a in argv:
        a = "python" if a == PY else a
        if a.startswith(str(REPO) + os.sep):
            a = os.path.relpath(a, REPO)
        parts.append(a)
    return " ".join(parts)


# ---------------------------------------------------------------------------- summaries
@dataclass
class Row:
    cmd: str
    argv: str
    n: int
    in_mb: float
    wall_s: float
    wall_min: float
    wall_max: float
    cpu_s: float
    mb_s: float
    mb_cpu_s: float
    peak_tree_mb: float
    peak_proc_mb: float
    ru_maxrss_mb: float
    max_procs: int
    out_mb: float
    ok: bool
    note: str = ""


def summarise(name: str, argv: str, runs: List[Run], in_bytes: int) -> Row:
    med = lambda xs: statistics.median(xs)  # noqa: E731
    wall = med([r.wall_s for r in runs])
    cpu = med([r.cpu_s for r in runs])
    return Row(
        cmd=name,
        argv=argv,
        n=len(runs),
        in_mb=in_bytes / MB,
        wall_s=wall,
        wall_min=min(r.wall_s for r in runs),
        wall_max=max(r.wall_s for r in runs),
        cpu_s=cpu,
        mb_s=in_bytes / MB / wall if wall else 0.0,
        mb_cpu_s=in_bytes / MB / cpu if cpu else 0.0,
        peak_tree_mb=med([r.peak_tree_rss for r in runs]) / MB,
        peak_proc_mb=med([r.peak_proc_rss for r in runs]) / MB,
        ru_maxrss_mb=med([r.ru_maxrss for r in runs]) / MB,
        max_procs=max(r.max_procs for r in runs),
        out_mb=med([r.out_bytes for r in runs]) / MB,
        ok=all(r.rc == 0 for r in runs),
    )


def print_table(case: str, rows: List[Row]) -> None:
    hdr = (
        f"{'command':<10} {'n':>2} {'in MB':>8} {'wall s':>8} {'(min-max)':>15} {'MB/s':>7} "
        f"{'CPU s':>8} {'CPU/wall':>8} {'MB/CPUs':>7} {'tree RSS':>9} {'proc RSS':>9} {'maxrss':>8} {'procs':>5} "
        f"{'out MB':>8}"
    )
    print(f"\n== case {case} (medians; RSS in MB; 'tree' = summed over the process tree) ==")
    print(hdr)
    for r in rows:
        rng = f"{r.wall_min:.1f}-{r.wall_max:.1f}"
        flag = "" if r.ok else "  FAILED"
        print(
            f"{r.cmd:<10} {r.n:>2} {r.in_mb:>8.1f} {r.wall_s:>8.2f} {rng:>15} {r.mb_s:>7.1f} "
            f"{r.cpu_s:>8.2f} {r.cpu_s / r.wall_s:>8.2f} {r.mb_cpu_s:>7.1f} {r.peak_tree_mb:>9.1f} {r.peak_proc_mb:>9.1f} "
            f"{r.ru_maxrss_mb:>8.1f} {r.max_procs:>5} {r.out_mb:>8.1f}{flag}{('  ' + r.note) if r.note else ''}"
        )
    for r in rows:
        print(f"  {r.cmd:<10} {r.argv}")


@dataclass
class Check:
    target: str
    case: str
    value: float
    limit: str
    passed: bool
    detail: str = ""
    paired: Optional[float] = None  # median over repetitions of the same-repetition ratio
    best: Optional[float] = None  # ratio of the best (fastest) runs

    @property
    def verdict(self) -> str:
        if self.passed:
            return "PASS"
        others = [v for v in (self.paired, self.best) if v is not None]
        if others and any(_meets(v, self.limit) for v in others):
            return "FAIL*"  # the other estimators pass: within this machine's noise
        return "FAIL"


def _meets(v: float, limit: str) -> bool:
    op, num = limit.split()
    return v >= float(num) if op == ">=" else v <= float(num)


def _paired(runs: Dict[str, List[Run]], a: str, b: str, fn) -> Optional[float]:
    """Median over repetitions of fn(run_a, run_b) for runs of the same repetition."""
    rb = {r.rep: r for r in runs.get(b, [])}
    vals = [fn(r, rb[r.rep]) for r in runs.get(a, []) if r.rep in rb]
    return statistics.median(vals) if vals else None


def _best(runs: Dict[str, List[Run]], name: str) -> float:
    return min(r.wall_s for r in runs[name])


def ratios_and_checks(case: str, rows: Dict[str, Row], runs: Dict[str, List[Run]]) -> List[Check]:
    """The per-case targets. ``value`` (which decides PASS/FAIL) is the ratio of the
    medians, as the issue asks; ``paired`` (ratio within each repetition, then the
    median) and ``best`` (ratio of the fastest runs) are printed beside it because on a
    shared machine a noisy repetition can move one median by 2x."""
    out: List[Check] = []
    wall_ratio = lambda x, y: x.wall_s / y.wall_s  # noqa: E731
    j, fl = rows.get("ours-json"), rows.get("floor")
    if j and fl:
        v = j.mb_s / fl.mb_s
        out.append(
            Check(
                "ours-json MB/s / floor MB/s",
                case,
                v,
                ">= 0.80",
                v >= 0.80,
                f"CPU-time ratio {j.mb_cpu_s / fl.mb_cpu_s:.2f}",
                _paired(runs, "floor", "ours-json", wall_ratio),
                _best(runs, "floor") / _best(runs, "ours-json"),
            )
        )
    for name, lim in (("ours-gz", 1.25), ("ours-zst", 1.10)):
        r = rows.get(name)
        if j and r:
            v = r.wall_s / j.wall_s
            out.append(
                Check(
                    f"{name} wall / ours-json wall",
                    case,
                    v,
                    f"<= {lim:.2f}",
                    v <= lim,
                    f"CPU-time ratio {r.cpu_s / j.cpu_s:.2f}",
                    _paired(runs, name, "ours-json", wall_ratio),
                    _best(runs, name) / _best(runs, "ours-json"),
                )
            )
    j2 = rows.get("ours-j2")
    if j and j2:
        v = j2.mb_s / j.mb_s
        out.append(
            Check(
                "ours-j2 MB/s / ours-json MB/s",
                case,
                v,
                ">= 1.70",
                v >= 1.70,
                f"j2 CPU s {j2.cpu_s:.1f} vs j1 {j.cpu_s:.1f}",
                _paired(runs, "ours-json", "ours-j2", wall_ratio),
                _best(runs, "ours-json") / _best(runs, "ours-j2"),
            )
        )
    for name in ("ours-json", "ours-gz", "ours-zst", "ours-nopy"):
        r = rows.get(name)
        if r:
            out.append(
                Check(
                    f"{name} peak tree RSS MB (1 worker)",
                    case,
                    r.peak_tree_mb,
                    "<= 100",
                    r.peak_tree_mb <= 100,
                )
            )
    if j2:
        per = j2.peak_proc_mb
        out.append(
            Check(
                "ours-j2 peak RSS MB of the largest process",
                case,
                per,
                "<= 100",
                per <= 100,
                f"tree {j2.peak_tree_mb:.1f} MB over {j2.max_procs} processes "
                f"(= {j2.peak_tree_mb / 2:.1f} MB per worker incl. the parent's share)",
            )
        )
    b, gz = rows.get("baseline"), rows.get("ours-gz")
    if b and gz and b.ok:
        v = gz.mb_s / b.mb_s
        out.append(
            Check(
                "ours-gz MB/s / baseline MB/s",
                case,
                v,
                ">= 8",
                v >= 8,
                f"CPU-time ratio {gz.mb_cpu_s / b.mb_cpu_s:.1f}",
                _paired(runs, "baseline", "ours-gz", wall_ratio),
                _best(runs, "baseline") / _best(runs, "ours-gz"),
            )
        )
        v = b.peak_tree_mb / gz.peak_tree_mb
        out.append(
            Check(
                "baseline peak RSS / ours-gz peak RSS",
                case,
                v,
                ">= 20",
                v >= 20,
                f"{b.peak_tree_mb:.0f} MB vs {gz.peak_tree_mb:.0f} MB",
            )
        )
    return out


def flat_checks(results: Dict[str, Dict[str, Row]]) -> List[Check]:
    """Peak RSS of the same command on the smallest vs the largest case run."""
    out: List[Check] = []
    cases = sorted(results, key=lambda c: next(iter(results[c].values())).in_mb)
    if len(cases) < 2:
        return out
    lo, hi = cases[0], cases[-1]
    for name in ("ours-json", "ours-gz", "ours-j2"):
        a, b = results[lo].get(name), results[hi].get(name)
        if not a or not b:
            continue
        key = "peak_proc_mb" if name == "ours-j2" else "peak_tree_mb"
        va, vb = getattr(a, key), getattr(b, key)
        v = vb / va
        out.append(
            Check(
                f"{name} RSS flat: {hi} ({b.in_mb:,.0f} MB in) / {lo} ({a.in_mb:,.0f} MB in)",
                f"{lo}->{hi}",
                v,
                "<= 1.10",
                v <= 1.10,
                f"{vb:.1f} MB vs {va:.1f} MB ({'largest process' if key == 'peak_proc_mb' else 'tree'})",
            )
        )
    return out


def print_checks(checks: List[Check]) -> None:
    print("\n== targets (ratios from the medians of this run) ==")
    for c in checks:
        alt = ""
        if c.paired is not None or c.best is not None:
            alt = (f"; per-repetition {c.paired:.2f}" if c.paired is not None else "") + (
                f"; best-of {c.best:.2f}" if c.best is not None else ""
            )
        print(
            f"{c.verdict:<5} [{c.case}] {c.target}: {c.value:.2f} (target {c.limit}){alt}"
            f"{'  -- ' + c.detail if c.detail else ''}"
        )
    print(
        "(value = ratio of the medians; FAIL* = fails on the medians but passes on the "
        "per-repetition or best-of ratio, i.e. within this machine's noise)"
    )


# ---------------------------------------------------------------------------- main
def run_case(case: str, args, baseline_factor: List[float]):
    spec = CASES[case]
    data = ensure_data(args.data_root, case, spec)
    in_b = input_bytes(data)
    out_dir = args.data_root / f"out-{os.getpid()}"
    out_dir.mkdir(parents=True, exist_ok=True)
    reps = args.reps or spec["reps"]
    cmds = [c for c in spec["cmds"] if not args.only or c in args.only]
    notes: Dict[str, str] = {}
    if "baseline" in cmds and not args.no_baseline:
        factor = max(baseline_factor[1:]) if len(baseline_factor) > 1 else baseline_factor[0]
        need = in_b * factor
        avail = psutil.virtual_memory().available
        if need > 0.6 * avail and not args.force_baseline:
            cmds.remove("baseline")
            print(
                f"[{case}] baseline skipped: projected peak {need / 1e9:.1f} GB "
                f"(input x {factor:.1f}) > 60% of the {avail / 1e9:.1f} GB available "
                "(--force-baseline to run it anyway)",
                flush=True,
            )
    elif "baseline" in cmds:
        cmds.remove("baseline")
    baseline_reps = min(reps, spec["baseline_reps"] if args.baseline_reps is None else args.baseline_reps)
    runs: Dict[str, List[Run]] = {c: [] for c in cmds}
    argvs = {c: command(c, data, out_dir, case) for c in cmds}
    print(
        f"[{case}] {in_b / MB:,.1f} MB in {len(list(data.glob('*.json*')))} files; "
        f"{reps} interleaved repetition(s) of {', '.join(cmds)}",
        flush=True,
    )
    for rep in range(reps):
        order = cmds[rep % len(cmds) :] + cmds[: rep % len(cmds)]  # rotate: no fixed position bias
        for c in order:
            if c == "baseline" and rep >= baseline_reps:
                continue
            argv, out = argvs[c]
            r = measure(argv, out, c, rep)
            runs[c].append(r)
            print(
                f"  [{case} rep {rep + 1}/{reps}] {c:<10} {r.wall_s:8.2f} s wall {r.cpu_s:8.2f} s CPU "
                f"{in_b / MB / r.wall_s:7.1f} MB/s  tree {r.peak_tree_rss / MB:7.1f} MB  "
                f"proc {r.peak_proc_rss / MB:7.1f} MB  out {r.out_bytes / MB:8.1f} MB  "
                f"CPU/wall {r.cpu_s / r.wall_s:4.2f}  load {r.load1:4.2f}"
                f"{'' if r.rc == 0 else f'  rc={r.rc}'}",
                flush=True,
            )
            if c == "baseline" and r.rc == 0:
                baseline_factor.append(r.peak_tree_rss / in_b)
    rows = rows_of(runs, {c: display(argvs[c][0]) for c in cmds}, in_b)
    for c, n in notes.items():
        rows[c].note = n
    print_table(case, list(rows.values()))
    args._raw[case] = {
        "in_bytes": in_b,
        "argv": {c: display(argvs[c][0]) for c in cmds},
        "runs": [asdict(r) for rs in runs.values() for r in rs],
    }
    return rows, runs


def rows_of(runs: Dict[str, List[Run]], argvs: Dict[str, str], in_b: int) -> Dict[str, Row]:
    rows = {c: summarise(c, argvs.get(c, c), rs, in_b) for c, rs in runs.items() if rs}
    fl = runs.get("floor")
    if fl and fl[0].stdout:
        try:
            info = json.loads(fl[0].stdout.splitlines()[-1])
            rows["floor"].note = (
                f"{info['events']:,} events; {info['exact_reparse_ranks']}/{info['ranks']} "
                "ranks re-parsed exact (integer overflow)"
            )
        except (ValueError, KeyError):
            pass
    return rows


def report(path: Path) -> int:
    """Re-print the tables and the targets from a ``--json`` file (no measuring)."""
    doc = json.loads(path.read_text())
    if doc.get("code"):
        print(f"code under test: {doc['code'].get('subject', doc['code'])}")
    results: Dict[str, Dict[str, Row]] = {}
    checks: List[Check] = []
    for case, raw in doc["runs"].items():
        if isinstance(raw, list):  # files written before in_bytes/argv were recorded
            first = next(iter(doc["cases"][case].values()))
            raw = {
                "in_bytes": int(round(first["in_mb"] * MB)),
                "argv": {k: v["argv"] for k, v in doc["cases"][case].items()},
                "runs": raw,
            }
        runs: Dict[str, List[Run]] = {}
        for d in raw["runs"]:
            runs.setdefault(d["cmd"], []).append(Run(**d))
        order = [c for c in ALL_CMDS if c in runs]
        runs = {c: runs[c] for c in order}
        results[case] = rows_of(runs, raw["argv"], raw["in_bytes"])
        print_table(case, list(results[case].values()))
        checks.extend(ratios_and_checks(case, results[case], runs))
    checks.extend(flat_checks(results))
    print_checks(checks)
    return 0 if all(c.passed for c in checks) else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--report",
        type=Path,
        default=None,
        metavar="RESULTS_JSON",
        help="only re-print the tables and targets of an earlier --json file",
    )
    ap.add_argument(
        "--case",
        action="append",
        help="small, 8x64, 8x256, 4g, all (= those four), small-i64, 8x64-i64; repeat or comma-separate",
    )
    ap.add_argument("--reps", type=int, default=None, help="repetitions per command (default per case)")
    ap.add_argument(
        "--baseline-reps",
        type=int,
        default=None,
        help="run the (slow) baseline only in the first N repetitions",
    )
    ap.add_argument(
        "--only",
        type=lambda s: [x for x in s.split(",") if x],
        default=None,
        help=f"run only these commands ({', '.join(ALL_CMDS)})",
    )
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument(
        "--force-baseline",
        action="store_true",
        help="run the baseline even when its projected memory exceeds 60%% of what is free",
    )
    ap.add_argument("--data-root", type=Path, default=Path("/tmp/tfbench"))
    ap.add_argument(
        "--code",
        default="HEAD",
        help="version of tracefuse_stream to measure: a commit (default HEAD, exported "
        "once to DATA_ROOT/code-<sha>) or 'worktree' (the live, possibly changing files)",
    )
    ap.add_argument(
        "--keep-data",
        action="store_true",
        help="keep the generated inputs (default: delete "
        "each case's inputs after it unless they were cached before)",
    )
    ap.add_argument("--json", type=Path, default=None, help="write all runs, medians and checks here")
    args = ap.parse_args(argv)
    if args.report:
        return report(args.report)
    if not args.case:
        ap.error("--case is required (or --report RESULTS_JSON)")
    cases: List[str] = []
    for c in args.case:
        for x in c.split(","):
            x = x.strip()
            if x == "all":
                cases.extend(MAIN_CASES)
            elif x in CASES:
                cases.append(x)
            elif x:
                ap.error(f"unknown case {x!r} (choose from {', '.join(CASES)}, all)")
    cases = list(dict.fromkeys(cases))
    cases.sort(key=lambda c: CASES[c]["ranks"] * CASES[c]["mb"])  # small first
    args._raw = {}
    print(
        f"tracefuse bench: {platform.python_version()} on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.1f} GiB RAM, "
        f"load avg {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    code_info = pin_code(args.data_root, args.code)
    results: Dict[str, Dict[str, Row]] = {}
    checks: List[Check] = []
    baseline_factor = [BASELINE_RSS_FACTOR_DEFAULT]
    t0 = time.perf_counter()
    for case in cases:
        cached = (input_dir(args.data_root, case) / ".complete").exists()
        results[case], runs = run_case(case, args, baseline_factor)
        checks.extend(ratios_and_checks(case, results[case], runs))
        if not args.keep_data and not cached:
            shutil.rmtree(input_dir(args.data_root, case), ignore_errors=True)
    checks.extend(flat_checks(results))
    for case, rows in results.items():
        if len(results) > 1:
            print_table(case, list(rows.values()))
    print_checks(checks)
    print(f"\ntotal bench time {time.perf_counter() - t0:.0f} s; load avg now {os.getloadavg()[0]:.2f}")
    shutil.rmtree(args.data_root / f"out-{os.getpid()}", ignore_errors=True)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "code": code_info,
                    "cases": {c: {k: asdict(v) for k, v in rows.items()} for c, rows in results.items()},
                    "runs": args._raw,
                    "checks": [asdict(c) for c in checks],
                },
                indent=2,
            )
        )
        print(f"wrote {args.json}")
    return 0 if all(c.passed for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())

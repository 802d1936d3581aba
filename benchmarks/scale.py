#!/usr/bin/env python3
"""Issue 14, items 3-5: per-rank overhead, memory at >= 4 GB, and ``-j N`` scaling.

    python benchmarks/scale.py [--parts overhead,memory,jobs] [--data-root /tmp/tfscale]
        [--reps 3] [--big-reps 2] [--tiny 1000,4000] [--big 16x256] [--jobs-case 8x64]
        [--code HEAD|worktree] [--keep-data] [--json results.json]

Three parts, each a set of commands run in interleaved, rotated repetitions (every
repetition runs every command once, starting one further along), reported as medians
and as ratios between commands of the same run (the machine is shared and noisy):

``overhead`` (item 3): ``tiny-<N>`` inputs (N ranks of 24 events, ``hotpath.ensure_tiny``)
merged by a *probe*: this script's hidden ``probe`` sub-command, which calls
``tracefuse_stream.pipeline.orchestrate.merge`` (the API the CLI calls) with timers
monkeypatched around the pipeline's seams (package code is not changed):

* open       ``planner.discover`` + ``planner.plan_file`` (find the files; read each header);
* plan       all of ``plan_inputs`` (open + first-ts peek + cycles/ranks/shifts) and the
             side-pass hooks (``apply_alignment``, ``resolve_window``);
* stream     ``stream_rank`` (read + rewrite + write the rank's fragment): in the parent
             at ``-j 1``; at ``-j 2`` in the workers (their own timers, returned with each
             result), the parent only waits;
* splice     the parent's per-rank loop: ``JsonSink.add_rank`` (copy of the fragment into
             the output, ``copy_file_range``), the rank's own ``file_meta``, the unlink of
             the fragment, and the loop's bookkeeping;
* finalise   the file's ``file_meta`` (the ``tracefuse`` header of all ranks),
             ``JsonSink.end`` (tail + flush), ``AtomicOutput.commit`` (fsync + rename)
             and the fragment directory's removal;
* startup    process wall minus the merge call (interpreter, imports, exit).

Configurations: N in ``--tiny`` x ``-j 1``/``-j 2`` x kernel on/off (``TRACEFUSE_KERNEL=0``),
plus the real CLI (``merge -j1``/``-j2``, kernel on) beside them. One extra run per N
under cProfile (``-j 1`` and ``-j 2``, kernel on) lists the top functions.

``memory`` (item 4): ``--big`` (default 16 ranks x 256 MB = 4.1 GB, ``generate.py``) merged
by the CLI ``-j 1``, ``-j 2``, ``-j 1`` with the kernel off, the tokenize floor
(``tokenize_floor.py``) and a ``-j 1`` probe, while the RSS of every process of the tree
is sampled every 50 ms with psutil: peak RSS per process (parent, each worker) and of the
summed tree. The same numbers for the 512 MB ``--jobs-case`` come from the ``jobs`` part:
their ratio shows whether memory stays flat.

``jobs`` (item 5): ``--jobs-case`` (8 x 64 MB) merged with ``-j 1..4`` (wall, CPU from
``wait4``, CPU/wall) and ``-j 1``/``-j 2`` probes (the serial parts: plan, splice,
finalise, startup), from which the serial fraction s and Amdahl's predicted speed-up on
2/4/8/16 cores are computed. ``nproc`` and the load average (``uptime``) before every run
are recorded.

Every command imports one pinned copy of ``tracefuse_stream`` (``--code``, default HEAD:
``git archive`` into DATA_ROOT/code-<sha>, with the C kernel compiled there using
setup.py's flags), because other people edit this checkout during a run. Raw results go to
``--json`` (default benchmarks/results-<sha>-scale.json); markdown tables to stdout.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable
MB = 1e6
POLL_S = 0.05

#: the parts of the probe's timing breakdown, in table order
PARTS = ("open", "plan", "stream", "splice", "finalise", "startup")


# ============================================================================ probe
# Runs inside the measured subprocess: imports the pinned package, patches timers around
# its seams, merges once, prints one JSON line. Nothing here runs in the driver.


class _Acc:
    """Seconds and call counts per timer name, plus the phase of the merge (so one
    function can be counted under "splice" in the rank loop and "finalise" after it)."""

    def __init__(self) -> None:
        self.s: Dict[str, float] = {}
        self.n: Dict[str, int] = {}
        self.phase = "plan"

    def add(self, name: str, dt: float) -> None:
        self.s[name] = self.s.get(name, 0.0) + dt
        self.n[name] = self.n.get(name, 0) + 1

    def wrap(self, name: str, fn: Callable[..., Any], by_phase: bool = False) -> Callable[..., Any]:
        def timed(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.add(f"{self.phase}.{name}" if by_phase else name, time.perf_counter() - t)

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed


def _install_timers(acc: _Acc) -> None:
    import tracefuse_stream.pipeline.orchestrate as orch
    import tracefuse_stream.plan.planner as planner
    from tracefuse_stream.write.atomic import AtomicOutput, FragmentDir
    from tracefuse_stream.write.sinks import JsonSink

    planner.discover = acc.wrap("open.discover", planner.discover)
    planner.plan_file = acc.wrap("open.header", planner.plan_file)
    planner.peek_first_ts = acc.wrap("plan.first_ts", planner.peek_first_ts)
    orch.plan_inputs = acc.wrap("plan.inputs", orch.plan_inputs)
    orch.apply_alignment = acc.wrap("plan.sidepasses", orch.apply_alignment)
    orch.resolve_window = acc.wrap("plan.sidepasses", orch.resolve_window)
    orch._write_files = acc.wrap("write", orch._write_files)
    orch.sink_for = acc.wrap("write.setup", orch.sink_for)
    orch.file_meta = acc.wrap("file_meta", orch.file_meta, by_phase=True)
    JsonSink.add_rank = acc.wrap("splice.add", JsonSink.add_rank)  # type: ignore[method-assign]
    JsonSink.end = acc.wrap("finalise.end", JsonSink.end)  # type: ignore[method-assign]
    AtomicOutput.commit = acc.wrap("finalise.commit", AtomicOutput.commit)  # type: ignore[method-assign]
    FragmentDir.close = acc.wrap("finalise.fragdir", FragmentDir.close)  # type: ignore[method-assign]
    os.fsync = acc.wrap("finalise.fsync", os.fsync)
    real_unlink = os.unlink

    def unlink(*a: Any, **k: Any) -> None:
        t = time.perf_counter()
        try:
            real_unlink(*a, **k)
        finally:
            if acc.phase == "splice":
                acc.add("splice.unlink", time.perf_counter() - t)

    os.unlink = unlink

    real_stream = orch.stream_rank

    def stream_rank(task: Any, progress: Any = None) -> Any:
        # runs in the worker at -j 2 (forked: this patch is inherited); the timing
        # travels back in the result's __dict__ (a dataclass: pickled with it)
        w, c = time.perf_counter(), time.process_time()
        res = real_stream(task, progress)
        res.__dict__["_probe"] = (time.perf_counter() - w, time.process_time() - c, os.getpid())
        return res

    orch.stream_rank = stream_rank
    real_rio = orch.run_in_order

    def run_in_order(*a: Any, **k: Any) -> Iterator[Any]:
        it = real_rio(*a, **k)
        first = True
        acc.phase = "splice"
        while True:
            t = time.perf_counter()
            try:
                r = next(it)
            except StopIteration:
                acc.add("stream.next", time.perf_counter() - t)
                acc.phase = "finalise"
                return
            dt = time.perf_counter() - t
            acc.add("stream.next", dt)
            if first:
                acc.add("stream.first", dt)
                first = False
            yield r

    orch.run_in_order = run_in_order


def probe_main(argv: Sequence[str]) -> int:
    t_proc = time.perf_counter()
    ap = argparse.ArgumentParser(prog="scale.py probe")
    ap.add_argument("input")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--profile", help="write cProfile stats of the merge call here")
    a = ap.parse_args(argv)
    import tracefuse_stream
    import tracefuse_stream.native as native
    import tracefuse_stream.pipeline.orchestrate as orch

    t_imported = time.perf_counter()
    acc = _Acc()
    _install_timers(acc)
    holder: Dict[str, Any] = {}
    real_write = orch._write_files

    def keep_results(*args: Any, **kw: Any) -> Any:
        out = real_write(*args, **kw)
        holder["results"] = out[0]
        return out

    orch._write_files = keep_results
    t0 = time.perf_counter()
    if a.profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    summary = orch.merge([a.input], a.output, include_pyfunc=True, force=True, jobs=a.jobs)
    if a.profile:
        prof.disable()
        prof.dump_stats(a.profile)
    t1 = time.perf_counter()
    per_rank = [r.__dict__.get("_probe") for r in holder.get("results", [])]
    rec = {
        "package": tracefuse_stream.__file__,
        "kernel": native.available(),
        "ranks": len(summary.ranks),
        "jobs": summary.jobs,
        "bytes_in": summary.bytes_in,
        "bytes_out": summary.bytes_out,
        "import_s": t_imported - t_proc,
        "merge_s": t1 - t0,
        "timers_s": acc.s,
        "timers_n": acc.n,
        "stream_wall_s": sum(p[0] for p in per_rank if p),
        "stream_cpu_s": sum(p[1] for p in per_rank if p),
        "stream_pids": sorted({p[2] for p in per_rank if p}),
        "stream_max_rank_s": max((p[0] for p in per_rank if p), default=0.0),
        "parent_pid": os.getpid(),
    }
    print(json.dumps(rec), flush=True)
    return 0


# ============================================================================ driver
ENV: Dict[str, str] = dict(os.environ)
RUN_CWD = "/"  # not the checkout: its tracefuse_stream/ would shadow the pinned copy


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def pin_code(root: Path, code: str) -> Dict[str, Any]:
    """Export ``code`` (a commit) to ROOT/code-<sha> and compile its C kernel there with
    setup.py's flags; put it first on every command's PYTHONPATH. ``worktree``: the
    live checkout (its already built kernel)."""
    if code == "worktree":
        info: Dict[str, Any] = {"code": "worktree", "commit": _git("rev-parse", "HEAD")}
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "tracefuse_stream"], cwd=REPO)
        info["dirty"] = dirty.returncode != 0
    else:
        sha = _git("rev-parse", code)
        dest = root / f"code-{sha[:12]}"
        if not (dest / ".complete").exists():
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            tar = subprocess.run(
                ["git", "archive", sha, "tracefuse_stream"], cwd=REPO, check=True, capture_output=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
            build = (
                "from setuptools import setup, Extension; setup(name='k', script_args=['build_ext', "
                "'--inplace', '-q'], ext_modules=[Extension('tracefuse_stream._kernel', "
                "['tracefuse_stream/_kernel.c'], extra_compile_args=['-O2', '-std=gnu11'])])"
            )
            subprocess.run([PY, "-c", build], cwd=dest, check=True, capture_output=True)
            shutil.rmtree(dest / "build", ignore_errors=True)
            (dest / ".complete").write_text("ok\n")
        ENV["PYTHONPATH"] = str(dest) + (os.pathsep + ENV["PYTHONPATH"] if ENV.get("PYTHONPATH") else "")
        info = {"code": code, "commit": sha, "path": str(dest)}
    check = "import tracefuse_stream as t, tracefuse_stream.native as n; print(t.__file__, n.available())"
    where = subprocess.run(
        [PY, "-c", check], cwd=RUN_CWD, env=ENV, check=True, capture_output=True, text=True
    ).stdout.split()
    info["imported_from"], info["kernel_available"] = where[0], where[1] == "True"
    info["subject"] = _git("log", "-1", "--format=%h %ad %s", "--date=format:%Y-%m-%d %H:%M", info["commit"])[
        :120
    ]
    if not info["kernel_available"]:
        sys.exit(f"the C kernel is not importable from {where[0]}: kernel-on numbers would be wrong")
    print(f"code under test: {info['subject'][:100]}\n  imported from {where[0]}", flush=True)
    return info


def machine() -> Dict[str, Any]:
    return {
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "uname": platform.platform(),
        "python": platform.python_version(),
        "mem_total_gb": _meminfo_gb("MemTotal"),
    }


def _meminfo_gb(key: str) -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1e6
    return 0.0


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def measure(argv: List[str], env: Dict[str, str], out_path: Optional[Path]) -> Dict[str, Any]:
    """Run ``argv``; sample the RSS of every process of its tree every POLL_S.

    Returns wall, CPU (``wait4``: the command and its reaped descendants, i.e. the
    workers), the peak RSS of each process seen (role ``parent`` or ``child``) and of the
    summed tree, the load average and ``uptime`` before the start, and the stdout."""
    import psutil  # type: ignore[import-untyped]

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench  # the tree sampler (bench.rss_by_pid)

    if out_path is not None and out_path.exists():
        out_path.unlink()
    up, load1 = uptime(), os.getloadavg()[0]
    out_f, err_f = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=RUN_CWD, env=env, stdout=out_f, stderr=err_f)
    root = psutil.Process(proc.pid)
    peaks: Dict[int, int] = {}
    peak_tree = 0

    def sample() -> None:
        nonlocal peak_tree
        rss_now = bench.rss_by_pid(root)
        for pid, rss in rss_now.items():
            peaks[pid] = max(peaks.get(pid, 0), rss)
        peak_tree = max(peak_tree, sum(rss_now.values()))

    end, status, ru = bench.wait_sampling(proc.pid, sample)  # the end read exactly (bench.py)
    wall = end - t0
    out_f.seek(0)
    err_f.seek(0)
    out, err = out_f.read().decode(errors="replace"), err_f.read().decode(errors="replace")
    out_f.close()
    err_f.close()
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        print(f"  !! {' '.join(argv[:6])} exited {rc}: {err.strip()[-2000:]}", flush=True)
    out_bytes = out_path.stat().st_size if out_path is not None and out_path.exists() else 0
    if out_path is not None and out_path.exists():
        out_path.unlink()
    children = sorted((v for k, v in peaks.items() if k != proc.pid), reverse=True)
    return {
        "wall_s": wall,
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "ru_maxrss": ru.ru_maxrss * 1024,
        "peak_tree_rss": peak_tree,
        "peak_parent_rss": peaks.get(proc.pid, 0),
        "peak_child_rss": children,
        "out_bytes": out_bytes,
        "rc": rc,
        "load1": load1,
        "uptime": up,
        "stdout": out.strip()[-4000:],
    }


def display(argv: Sequence[str], env_extra: Dict[str, str]) -> str:
    parts = [f"{k}={v}" for k, v in env_extra.items()]
    for a in argv:
        a = "python" if a == PY else a
        if a.startswith(str(REPO) + os.sep):
            a = os.path.relpath(a, REPO)
        parts.append(a)
    return " ".join(parts)


Cmd = Tuple[List[str], Dict[str, str], Optional[Path]]  # argv, extra env, output to delete


def run_rotated(cmds: Dict[str, Cmd], reps: int, label: str) -> Dict[str, List[Dict[str, Any]]]:
    """Every command once per repetition, the order rotated by one each repetition."""
    names = list(cmds)
    runs: Dict[str, List[Dict[str, Any]]] = {k: [] for k in names}
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            argv, extra, out = cmds[name]
            r = measure(argv, {**ENV, **extra}, out)
            r["rep"] = rep
            if name.startswith("probe") or "probe" in argv:
                try:
                    r["probe"] = json.loads(r["stdout"].splitlines()[-1])
                except (ValueError, IndexError):
                    r["probe"] = None
            runs[name].append(r)
            kids = ",".join(f"{c / MB:.0f}" for c in r["peak_child_rss"])
            print(
                f"  [{label} rep {rep + 1}/{reps}] {name:<16} {r['wall_s']:7.2f} s wall {r['cpu_s']:7.2f} s CPU "
                f"parent {r['peak_parent_rss'] / MB:5.0f} MB children [{kids}] MB load1 {r['load1']:.2f} rc={r['rc']}",
                flush=True,
            )
    return runs


def med(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# ---------------------------------------------------------------------------- probe maths
def breakdown(p: Dict[str, Any], wall_s: float) -> Dict[str, float]:
    """Seconds per part (see PARTS) of one probe run, plus the parent's wait/stream."""
    t, n = p["timers_s"], p["ranks"]
    g = t.get
    open_s = g("open.discover", 0.0) + g("open.header", 0.0)
    plan_s = g("plan.inputs", 0.0) + g("plan.sidepasses", 0.0)
    next_s = g("stream.next", 0.0)
    splice_named = g("splice.add", 0.0) + g("splice.file_meta", 0.0) + g("splice.unlink", 0.0)
    finalise_s = g("finalise.file_meta", 0.0) + g("finalise.end", 0.0) + g("finalise.commit", 0.0)
    finalise_s += g("finalise.fragdir", 0.0)
    # the rank loop's own bookkeeping: what _write_files spent outside every named timer
    loop_other = g("write", 0.0) - g("write.setup", 0.0) - next_s - splice_named - finalise_s
    parallel = p["jobs"] > 1
    return {
        "open": open_s,
        "plan": plan_s,
        "plan_first_ts": g("plan.first_ts", 0.0),
        # -j 1: the parent streams; -j N: the workers' own time (the parent waits meanwhile)
        "stream": p["stream_wall_s"] if parallel else next_s,
        "stream_cpu": p["stream_cpu_s"],
        "parent_wait": next_s if parallel else 0.0,
        "first_result": g("stream.first", 0.0),
        "splice": splice_named + max(loop_other, 0.0),
        "splice_add": g("splice.add", 0.0),
        "splice_meta": g("splice.file_meta", 0.0),
        "splice_unlink": g("splice.unlink", 0.0),
        "splice_loop": max(loop_other, 0.0),
        "finalise": finalise_s,
        "finalise_meta": g("finalise.file_meta", 0.0),
        "finalise_end": g("finalise.end", 0.0),
        "fsync": g("finalise.fsync", 0.0),
        "commit": g("finalise.commit", 0.0),
        "merge_rest": p["merge_s"] - plan_s - g("write", 0.0),
        "merge": p["merge_s"],
        "startup": wall_s - p["merge_s"],
        "wall": wall_s,
        "ranks": n,
        "bytes_out": p["bytes_out"],
    }


def probe_medians(runs: List[Dict[str, Any]]) -> Dict[str, float]:
    bds = [breakdown(r["probe"], r["wall_s"]) for r in runs if r.get("probe")]
    if not bds:
        return {}
    return {k: med([b[k] for b in bds]) for k in bds[0]}


# ---------------------------------------------------------------------------- parts
def _probe_cmd(
    inp: Path, out: Path, jobs: int, extra: Optional[Dict[str, str]] = None, profile: str = ""
) -> Cmd:
    argv = [PY, str(HERE / "scale.py"), "probe", str(inp), "-o", str(out), "-j", str(jobs)]
    if profile:
        argv += ["--profile", profile]
    return argv, dict(extra or {}), out


def _cli_cmd(inp: Path, out: Path, jobs: int, extra: Optional[Dict[str, str]] = None) -> Cmd:
    argv = [PY, "-m", "tracefuse_stream", "merge", "-q", "--force", "--include-pyfunc", str(inp)]
    return argv + ["-o", str(out), "-j", str(jobs)], dict(extra or {}), out


OFF = {"TRACEFUSE_KERNEL": "0"}


def part_overhead(root: Path, tiny_ns: Sequence[int], reps: int, res: Dict[str, Any]) -> None:
    sys.path.insert(0, str(HERE))
    from hotpath import ensure_tiny  # the issue's own tiny-rank case

    out = root / "out"
    out.mkdir(exist_ok=True)
    cmds: Dict[str, Cmd] = {}
    dirs = {n: ensure_tiny(root, n) for n in tiny_ns}
    for n, d in dirs.items():
        for j in (1, 2):
            cmds[f"probe-{n}-j{j}"] = _probe_cmd(d, out / "t.json", j)
            cmds[f"probe-{n}-j{j}-py"] = _probe_cmd(d, out / "t.json", j, OFF)
            cmds[f"cli-{n}-j{j}"] = _cli_cmd(d, out / "t.json", j)
    runs = run_rotated(cmds, reps, "overhead")
    profiles: Dict[str, str] = {}
    for n, d in dirs.items():
        for j in (1, 2):
            stats = str(out / f"prof-{n}-j{j}.pstats")
            argv, extra, o = _probe_cmd(d, out / "t.json", j, profile=stats)
            r = measure(argv, {**ENV, **extra}, o)
            profiles[f"{n}-j{j}"] = _top_functions(stats, 18)
            print(f"  [profile {n} -j{j}] {r['wall_s']:.2f} s (under cProfile)", flush=True)
    res["overhead"] = {
        "argv": {k: display(v[0], v[1]) for k, v in cmds.items()},
        "runs": runs,
        "profiles": profiles,
    }


def _top_functions(stats_path: str, n: int) -> str:
    import io
    import pstats

    buf = io.StringIO()
    st = pstats.Stats(stats_path, stream=buf)
    st.sort_stats("tottime").print_stats(n)
    text = buf.getvalue()
    text = text[text.find("   ncalls") :] if "   ncalls" in text else text
    # who opens the input files (the per-rank cost of planning is mostly opens and re-reads)
    buf = io.StringIO()
    st.stream = buf  # type: ignore[attr-defined]
    st.print_callers(r"io.open\}|sources.py:\d+\(__init__\)|detect_compression")
    callers = buf.getvalue()
    return text.rstrip() + "\n\ncallers:\n" + callers[callers.find("Function") :].rstrip() + "\n"


def ensure_generated(root: Path, spec: str) -> Path:
    ranks, mb = (int(x) for x in spec.split("x"))
    d = root / f"s-{spec}"
    if not (d / ".complete").exists():
        shutil.rmtree(d, ignore_errors=True)
        cmd = [PY, str(HERE / "generate.py"), str(d), "--ranks", str(ranks), "--mb-per-rank", str(mb)]
        cmd += ["--jobs", "2", "-q"]
        print(f"generating {spec}: {display(cmd, {})}", flush=True)
        t = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=REPO)
        (d / ".complete").write_text("ok\n")
        print(f"  generated in {time.perf_counter() - t:.0f} s", flush=True)
    return d


def input_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.glob("*.json"))


def part_memory(root: Path, spec: str, reps: int, res: Dict[str, Any]) -> None:
    d = ensure_generated(root, spec)
    out = root / "out"
    out.mkdir(exist_ok=True)
    o = out / "big.json"
    cmds: Dict[str, Cmd] = {
        "merge-j1": _cli_cmd(d, o, 1),
        "merge-j2": _cli_cmd(d, o, 2),
        "merge-j1-py": _cli_cmd(d, o, 1, OFF),
        "tokenize": ([PY, str(HERE / "tokenize_floor.py"), str(d)], {}, None),
        "probe-j1": _probe_cmd(d, o, 1),
    }
    runs = run_rotated(cmds, reps, "memory")
    res["memory"] = {
        "case": spec,
        "bytes_in": input_bytes(d),
        "argv": {k: display(v[0], v[1]) for k, v in cmds.items()},
        "runs": runs,
    }


def part_jobs(root: Path, spec: str, reps: int, res: Dict[str, Any]) -> None:
    d = ensure_generated(root, spec)
    out = root / "out"
    out.mkdir(exist_ok=True)
    o = out / "jobs.json"
    cmds: Dict[str, Cmd] = {f"merge-j{j}": _cli_cmd(d, o, j) for j in (1, 2, 3, 4)}
    cmds["merge-j1-py"] = _cli_cmd(d, o, 1, OFF)
    cmds["probe-j1"] = _probe_cmd(d, o, 1)
    cmds["probe-j2"] = _probe_cmd(d, o, 2)
    runs = run_rotated(cmds, reps, "jobs")
    res["jobs"] = {
        "case": spec,
        "bytes_in": input_bytes(d),
        "argv": {k: display(v[0], v[1]) for k, v in cmds.items()},
        "runs": runs,
    }


# ---------------------------------------------------------------------------- reports
def _per_rank_ms(m: Dict[str, float], key: str) -> float:
    return 1000 * m[key] / m["ranks"]


def report_overhead(r: Dict[str, Any]) -> None:
    runs = r["runs"]
    print("\n### Per-rank overhead (ms per rank, medians; probe = the API merge with timers)\n")
    print(
        "| ranks | -j | kernel | open | first-ts peek | plan (incl. open, peek) | stream | splice | finalise | startup "
        "| wall | CPU | CLI wall | CLI CPU | s wall |"
    )
    print(
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    for key in runs:
        if not key.startswith("probe-"):
            continue
        _, n, j, *py = key.split("-")
        m = probe_medians(runs[key])
        if not m:
            continue
        ms = functools.partial(_per_rank_ms, m)
        cli = runs.get(f"cli-{n}-{j}") if not py else None
        per = 1000 / m["ranks"]
        cli_ms = f"{per * med([x['wall_s'] for x in cli]):.3f}" if cli else ""
        cli_cpu = f"{per * med([x['cpu_s'] for x in cli]):.3f}" if cli else ""
        cpu = per * med([x["cpu_s"] for x in runs[key]])
        print(
            f"| {n} | {j[1:]} | {'off' if py else 'on'} | {ms('open'):.3f} | {ms('plan_first_ts'):.3f} | "
            f"{ms('plan'):.3f} | {ms('stream'):.3f} | {ms('splice'):.3f} | {ms('finalise'):.3f} | "
            f"{ms('startup'):.3f} | {ms('wall'):.3f} | {cpu:.3f} | {cli_ms} | {cli_cpu} | {m['wall']:.2f} |"
        )
    print("\nsplit of splice / finalise / stream (ms per rank):\n")
    print(
        "| config | add (copy) | rank meta | unlink | loop | file meta | end | fsync | commit | first result | parent wait | stream CPU |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key in runs:
        if not key.startswith("probe-"):
            continue
        m = probe_medians(runs[key])
        ms = functools.partial(_per_rank_ms, m)
        print(
            f"| {key[6:]} | {ms('splice_add'):.3f} | {ms('splice_meta'):.3f} | {ms('splice_unlink'):.3f} | "
            f"{ms('splice_loop'):.3f} | {ms('finalise_meta'):.3f} | {ms('finalise_end'):.3f} | {ms('fsync'):.3f} | "
            f"{ms('commit'):.3f} | {ms('first_result'):.3f} | {ms('parent_wait'):.3f} | {ms('stream_cpu'):.3f} |"
        )
    print("\nratios (medians of this run):")
    ns = sorted({int(k.split("-")[1]) for k in runs if k.startswith("cli-")})
    for n in ns:
        w = {k: med([x["wall_s"] for x in v]) for k, v in runs.items() if k.split("-")[1] == str(n)}
        print(
            f"  {n} ranks: CLI -j2 / -j1 wall = {w[f'cli-{n}-j2'] / w[f'cli-{n}-j1']:.3f} (target <= 1.2); "
            f"probe -j2/-j1 = {w[f'probe-{n}-j2'] / w[f'probe-{n}-j1']:.3f}; "
            f"kernel off/on -j1 = {w[f'probe-{n}-j1-py'] / w[f'probe-{n}-j1']:.3f}"
        )
    if len(ns) >= 2:
        a, b = ns[0], ns[-1]
        for key in ("probe-{}-j1", "probe-{}-j2", "cli-{}-j1", "cli-{}-j2"):
            wa = med([x["wall_s"] for x in runs[key.format(a)]])
            wb = med([x["wall_s"] for x in runs[key.format(b)]])
            print(f"  {key.format('N')}: wall({b}) / wall({a}) = {wb / wa:.2f} (linear: {b / a:.2f})")
    for k, v in r["profiles"].items():
        print(f"\ncProfile, {k} (kernel on, top by tottime):\n{v}")


def _mem_row(name: str, runs: List[Dict[str, Any]], nbytes: int) -> str:
    w = med([x["wall_s"] for x in runs])
    kids = [x["peak_child_rss"] for x in runs]
    worker = max((max(k) for k in kids if k), default=0)
    return (
        f"| {name} | {len(runs)} | {w:.2f} | {nbytes / MB / w:.0f} | {med([x['cpu_s'] for x in runs]):.2f} | "
        f"{max(x['peak_parent_rss'] for x in runs) / MB:.0f} | {worker / MB:.0f} | "
        f"{max(len(k) for k in kids)} | {max(x['peak_tree_rss'] for x in runs) / MB:.0f} | "
        f"{max(x['ru_maxrss'] for x in runs) / MB:.0f} |"
    )


def peak(runs: List[Dict[str, Any]]) -> float:
    """The largest single process over the runs (parent or any worker)."""
    return max(max([x["peak_parent_rss"]] + x["peak_child_rss"]) for x in runs)


def report_memory(res: Dict[str, Any]) -> None:
    print("\n### Memory (peak RSS in MB, max over repetitions; workers = child processes)\n")
    print(
        "| case | command | n | wall s | in MB/s | CPU s | parent | largest worker | workers | tree | ru_maxrss |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for part in ("jobs", "memory"):
        r = res.get(part)
        if not r:
            continue
        for k, v in r["runs"].items():
            if part == "jobs" and k not in ("merge-j1", "merge-j2", "merge-j1-py"):
                continue
            print(f"| {r['case']} " + _mem_row(k, v, r["bytes_in"]))
    m = res.get("memory")
    if m:
        w = {k: med([x["wall_s"] for x in v]) for k, v in m["runs"].items()}
        print(
            f"\n{m['case']}: merge-j1 MB/s / tokenize MB/s = {w['tokenize'] / w['merge-j1']:.3f}; "
            f"merge-j1-py / tokenize = {w['tokenize'] / w['merge-j1-py']:.3f}; "
            f"-j2 speed-up = {w['merge-j1'] / w['merge-j2']:.2f}"
        )
        pm = probe_medians(m["runs"].get("probe-j1", []))
        if pm:
            print(
                f"{m['case']} probe -j1: plan {pm['plan']:.3f} s, stream {pm['stream']:.2f} s, splice "
                f"{pm['splice']:.2f} s, finalise {pm['finalise']:.2f} s (fsync {pm['fsync']:.2f} s), "
                f"startup {pm['startup']:.2f} s, wall {pm['wall']:.2f} s"
            )
            amdahl_table(pm, m["case"])
    j = res.get("jobs")
    if m and j:
        for k in ("merge-j1", "merge-j2", "merge-j1-py"):
            if k in m["runs"] and k in j["runs"]:
                print(
                    f"  {k}: largest process at {m['case']} / at {j['case']} = "
                    f"{peak(m['runs'][k]) / peak(j['runs'][k]):.2f} (input {m['bytes_in'] / j['bytes_in']:.1f}x)"
                )


def amdahl(s: float, n: int) -> float:
    return 1.0 / (s + (1.0 - s) / n)


def report_jobs(r: Dict[str, Any]) -> None:
    runs, nb = r["runs"], r["bytes_in"]
    print(f"\n### -j N scaling on {r['case']} ({nb / MB:.0f} MB), nproc {os.cpu_count()}\n")
    print(
        "| command | n | wall s (min-max) | in MB/s | CPU s | CPU/wall | speed-up vs -j1 | CPU vs -j1 | load1 at start (median) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    w1 = med([x["wall_s"] for x in runs["merge-j1"]])
    c1 = med([x["cpu_s"] for x in runs["merge-j1"]])
    for k, v in runs.items():
        w, c = med([x["wall_s"] for x in v]), med([x["cpu_s"] for x in v])
        print(
            f"| {k} | {len(v)} | {w:.2f} ({min(x['wall_s'] for x in v):.2f}-{max(x['wall_s'] for x in v):.2f}) | "
            f"{nb / MB / w:.0f} | {c:.2f} | {c / w:.2f} | {w1 / w:.2f} | {c / c1:.2f} | {med([x['load1'] for x in v]):.2f} |"
        )
    p1, p2 = probe_medians(runs["probe-j1"]), probe_medians(runs["probe-j2"])
    print("\nprobe breakdown, seconds (medians):\n")
    print(
        "| probe | startup | plan | stream (parent at -j1; workers' sum at -j2) | splice | finalise (fsync) | merge | wall |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for k, p in (("-j1", p1), ("-j2", p2)):
        print(
            f"| {k} | {p['startup']:.3f} | {p['plan']:.3f} | {p['stream']:.2f} | {p['splice']:.3f} | "
            f"{p['finalise']:.3f} ({p['fsync']:.3f}) | {p['merge']:.2f} | {p['wall']:.2f} |"
        )
    amdahl_table(p1, r["case"])


def amdahl_table(p1: Dict[str, float], case: str) -> None:
    """Serial fraction of a ``-j 1`` probe and the speed-ups it predicts for N cores.

    ``s_hi``: everything but the streaming is serial (no overlap at all). ``s_lo``: the
    per-rank splice overlaps the workers' streaming (it does: the parent copies rank i
    while workers stream i+1...), so only startup, plan and finalise (fsync) are serial.
    ``s_cpu``: s_lo with the streaming's CPU time in place of its wall time (what it would
    take on an idle core; the serial parts are I/O: fsync and the copy, not CPU).

    ``pipeline``: Amdahl ignores that the splice is a serial *stage* of its own: the
    parent copies every fragment, so throughput is bounded by the copy rate however
    many workers stream. T(N) = S0 + max(P * ceil(R/N) / R, C) + C / R, with S0 =
    startup + plan + finalise, P = stream, C = splice, R = ranks (the last rank's copy
    cannot overlap anything); T(1) = the measured -j1 wall (S0 + P + C)."""
    T = p1["wall"]
    serial_hi = T - p1["stream"]  # nothing overlaps: startup + plan + splice + finalise + rest
    serial_lo = p1["startup"] + p1["plan"] + p1["finalise"]  # the in-loop splice hidden behind workers
    t_cpu = serial_lo + p1["stream_cpu"] + p1["splice"]
    ranks = int(p1["ranks"])
    s_hi, s_lo, s_cpu = serial_hi / T, serial_lo / T, serial_lo / t_cpu
    P, C = p1["stream"], p1["splice"]
    print(
        f"\n{case}: serial fraction of the -j1 probe (wall {T:.2f} s): s_hi = {s_hi:.3f} (all but stream), "
        f"s_lo = {s_lo:.3f} (startup {p1['startup']:.2f} + plan {p1['plan']:.2f} + finalise {p1['finalise']:.2f} s, "
        f"of which fsync {p1['fsync']:.2f} s), s_cpu = {s_cpu:.3f} (s_lo with stream CPU {p1['stream_cpu']:.2f} s "
        f"in place of stream wall {P:.2f} s); splice C = {C:.2f} s "
        f"({p1.get('bytes_out', 0) / MB / C if C else 0:.0f} MB/s of output copied by the parent)\n"
    )
    print(f"| cores N | Amdahl s_hi | Amdahl s_lo | Amdahl s_cpu | pipeline ({ranks} ranks, splice stage) |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n in (2, 4, 8, 16):
        t_n = serial_lo + max(P * math.ceil(ranks / n) / ranks, C) + C / ranks
        print(
            f"| {n} | {amdahl(s_hi, n):.2f} | {amdahl(s_lo, n):.2f} | {amdahl(s_cpu, n):.2f} | {T / t_n:.2f} |"
        )
    print(
        f"| limit | {1 / s_hi:.2f} | {1 / s_lo:.2f} | {1 / s_cpu:.2f} | "
        f"{T / (serial_lo + max(P / ranks, C) + C / ranks):.2f} |"
    )


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["probe"]:
        return probe_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="overhead,memory,jobs")
    ap.add_argument("--data-root", type=Path, default=Path("/tmp/tfscale"))
    ap.add_argument("--reps", type=int, default=3, help="repetitions of overhead and jobs")
    ap.add_argument("--big-reps", type=int, default=2, help="repetitions of the memory part")
    ap.add_argument("--tiny", default="1000,4000", help="rank counts of the overhead part")
    ap.add_argument("--big", default="16x256", help="RANKSxMB of the memory part (>= 4 GB)")
    ap.add_argument("--jobs-case", default="8x64", help="RANKSxMB of the jobs part")
    ap.add_argument("--code", default="HEAD", help="commit to measure, or 'worktree'")
    ap.add_argument("--keep-data", action="store_true", help="keep the --big inputs (deleted by default)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--report", type=Path, help="only print the tables of a saved results file")
    a = ap.parse_args(argv)
    if a.report:
        res = json.loads(a.report.read_text())
    else:
        a.data_root.mkdir(parents=True, exist_ok=True)
        res = {"machine": machine(), "code": pin_code(a.data_root, a.code), "started": time.ctime()}
        res["uptime_start"] = uptime()
        parts = a.parts.split(",")
        t0 = time.perf_counter()
        if "overhead" in parts:
            part_overhead(a.data_root, [int(x) for x in a.tiny.split(",")], a.reps, res)
        if "jobs" in parts:
            part_jobs(a.data_root, a.jobs_case, a.reps, res)
        if "memory" in parts:
            part_memory(a.data_root, a.big, a.big_reps, res)
            if not a.keep_data:
                shutil.rmtree(a.data_root / f"s-{a.big}", ignore_errors=True)
        res["seconds"] = time.perf_counter() - t0
        path = a.json or HERE / f"results-{res['code']['commit'][:7]}-scale.json"
        path.write_text(json.dumps(res, indent=1) + "\n")
        print(f"\nraw results: {path}")
    print(f"\ncode: {res['code'].get('subject')}; machine: {res['machine']}")
    if "overhead" in res:
        report_overhead(res["overhead"])
    if "memory" in res or "jobs" in res:
        report_memory(res)
    if "jobs" in res:
        report_jobs(res["jobs"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

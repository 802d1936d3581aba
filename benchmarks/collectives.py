#!/usr/bin/env python3
"""``info --collectives`` at merge speed (issue 20, item 6).

    python benchmarks/collectives.py [--reps 3] [--ranks 8] [--mb 20] [--json out.json]

Generates (once, cached in ``/tmp/tfbench/coll-<ranks>x<mb>``) real-like ranks with
``benchmarks/generate.py`` (``tracefuse_synth``: NCCL kernels with ``Seq``, steps, python
stacks), then runs each command in its own subprocess, repetitions interleaved, the
process tree's RSS sampled (``bench.measure``):

* ``merge-j1``: ``merge DIR -o out.json -j 1 -q`` (the default filter);
* ``coll-j1`` / ``coll-j2``: ``info --collectives DIR -j 1`` / ``-j 2``;
* ``all-j1``: ``info --collectives --steps --align DIR -j 1`` (one pass per file for
  all three sections);
* ``coll-small``: ``info --collectives -j 1`` on a quarter of the data per rank (memory
  must not grow with the trace: it holds the collective events only);
* ``start``: ``python -c "import tracefuse_stream.cli.info_cmd"``, the interpreter and
  the imports ``info`` pays before reading a byte (since the start-up work of this
  session's issue 20 follow-up, a command imports only its own modules:
  tests/test_startup.py); ``interp``: ``python -c pass``, the interpreter alone;
* ``burn-j1`` / ``burn-j2``: the control for ``-j``: 8 equal pure-Python CPU tasks in
  one process / in 2 forked workers (the pool ``-j`` uses). Their ratio is the speedup
  the machine gives 2 processes at that moment: on a loaded machine with the kernel's
  autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``), all processes
  of one session share one slice, and even this ideal task gets ~1.0x.

Bytecode: the measured commands write and reuse compiled bytecode under
``/tmp/tfbench/pycache`` (``PYTHONPYCACHEPREFIX``), as an installed package has it;
with ``PYTHONDONTWRITEBYTECODE`` every command would compile the package from source
first (~0.1-0.2 s here), the same for each command, which flattens every ratio.

``--gloo-scale``: instead, time the gloo matching alone (group attribution and per-group
matching, in process) on synthetic scans of 8-64 ranks in the world group and pairs of
sub-groups, 3 collectives a step on two runloop threads per group, rank 5 late.

Targets: ``coll-j1`` <= 0.5 x ``merge-j1`` (best wall times), ``coll-j1 / coll-j2``
>= 1.6, peak RSS of ``coll-j1`` about that of ``coll-small``. Prints PASS/FAIL for each,
whatever the outcome; the numbers depend on the machine's other load (``load1``). Also
printed: the same ratios on CPU time, the ratio of the work after start-up (``start``
subtracted from both), the most ``-j2`` could give with 2 free cores when only the
start-up is serial (Amdahl), and the control's speedup; and ``in process``: the same
``info --collectives`` (planning, the pass over every file, the report) timed inside one
Python process with ``-j 1`` and ``-j 2``, best of ``--reps``: what ``-j`` speeds up,
without the interpreter's start and exit that every command pays once.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402

ROOT = Path("/tmp/tfbench")


def ensure(ranks: int, mb: int) -> Path:
    case = f"coll-{ranks}x{mb}"
    return bench.ensure_data(ROOT, case, dict(ranks=ranks, mb=mb))


BURN = (
    "import multiprocessing as m, sys\n"
    "def f(_):\n    x = 0\n    for i in range(2_000_000): x += i\n    return x\n"
    "j = int(sys.argv[1])\n"
    "if j == 1: [f(i) for i in range(8)]\n"
    "else:\n    with m.get_context('fork').Pool(j) as p: p.map(f, range(8), chunksize=1)\n"
)


def commands(big: Path, small: Path, out: Path) -> Dict[str, List[str]]:
    m = [bench.PY, "-m", "tracefuse_stream"]
    return {
        "merge-j1": m + ["merge", str(big), "-o", str(out), "-j", "1", "-q", "--force"],
        "coll-j1": m + ["info", "--collectives", str(big), "-j", "1"],
        "coll-j2": m + ["info", "--collectives", str(big), "-j", "2"],
        "all-j1": m + ["info", "--collectives", "--steps", "--align", str(big), "-j", "1"],
        "coll-small": m + ["info", "--collectives", str(small), "-j", "1"],
        "start": [bench.PY, "-c", "import tracefuse_stream.cli.info_cmd"],
        "interp": [bench.PY, "-c", "pass"],
        "burn-j1": [bench.PY, "-c", BURN, "1"],
        "burn-j2": [bench.PY, "-c", BURN, "2"],
    }


def _gloo_scans(ranks: int, steps: int) -> tuple:
    """Synthetic gloo scans: world + pair sub-groups, two runloop threads per group."""
    import random

    sys.path.insert(0, str(bench.REPO))
    from tracefuse_stream.align.collectives import CollectiveEvent, RankScan

    rnd = random.Random(1)
    scans, cfgs = {}, {}
    for r in range(ranks):
        sc = RankScan(r, 0)
        world, sub = [1000 * r + 1, 1000 * r + 2], [1000 * r + 11, 1000 * r + 12]
        for s in range(steps):
            t0, late = s * 100_000_000, (50_000_000 if r == 5 else 0)
            for k, (tids, dur) in enumerate([(world, 60_000_000), (sub, 5_000_000), (world, 5_000_000)]):
                at = t0 + k * 30_000_000 + (late if k == 0 else 0)
                start, end = at + rnd.randint(0, 2_000_000), at + dur + 3_000_000
                ev = CollectiveEvent(len(sc.events), "gloo", "gloo:all_reduce", start, end - start,
                                     tids[s % 2], (), None, None, None, True)  # fmt: skip
                sc.events.append(ev)
            sc.steps[s] = (t0, t0 + 99_000_000)
        scans[r] = sc
        cfgs[r] = [("0", tuple(range(ranks))), (str(r // 2 + 1), (r - r % 2, r - r % 2 + 1))]
    return scans, cfgs


def in_process(big: Path, reps: int) -> Dict[int, float]:
    """``info --collectives`` without the process around it: the planning, the pass over
    every file (``-j``) and the report, timed in this process (start-up and exit are the
    same for both and not counted). Best of ``reps`` for jobs 1 and 2, interleaved."""
    import contextlib
    import io
    import time

    sys.path.insert(0, str(bench.REPO))
    from tracefuse_stream.report.collectives import info_collectives
    from tracefuse_stream.report.info import collect_info

    best: Dict[int, float] = {}
    for _ in range(reps + 1):  # the first round warms the page cache and the pool's imports
        for jobs in (1, 2):
            t = time.perf_counter()
            scans: List = []
            plans, _, out, _ = collect_info([str(big)], jobs=jobs, sections=["collectives"], scans_out=scans)
            with contextlib.redirect_stdout(io.StringIO()):
                info_collectives(plans, False, into=out, inputs=[str(big)], scans=scans)
            best[jobs] = min(best.get(jobs, 1e9), time.perf_counter() - t)
    return best


def gloo_scale() -> int:
    import time

    from tracefuse_stream.align.collectives import match_instances

    for ranks, steps in ((8, 100), (32, 100), (64, 200)):
        scans, cfgs = _gloo_scans(ranks, steps)
        t = time.perf_counter()
        table = match_instances(scans, cfgs, {r: "host" for r in scans})
        want = 2 * steps + ranks // 2 * steps
        print(f"{ranks:3d} ranks x {3 * steps} gloo ops: {len(table.instances)} instances (want {want}), "
              f"{table.unmatched_total} unmatched, {time.perf_counter() - t:.2f} s")  # fmt: skip
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=int, default=20)
    ap.add_argument("--json", type=Path, help="write every run here")
    ap.add_argument("--gloo-scale", action="store_true", help="time the gloo matching alone (in process)")
    a = ap.parse_args()
    if a.gloo_scale:
        return gloo_scale()
    os.environ.pop("TRACEFUSE_VERIFY", None)
    bench.ENV.pop("TRACEFUSE_VERIFY", None)
    bench.ENV.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode as installed (module docstring)
    bench.ENV["PYTHONPYCACHEPREFIX"] = str(ROOT / "pycache")
    bench.ENV["PYTHONPATH"] = str(bench.REPO)
    big, small = ensure(a.ranks, a.mb), ensure(a.ranks, max(1, a.mb // 4))
    out = ROOT / "coll-merge-out.json"
    cmds = commands(big, small, out)
    runs: Dict[str, List[bench.Run]] = {k: [] for k in cmds}
    for rep in range(-1, a.reps):  # rep -1: warm-up (bytecode, page cache), not counted
        for name, argv in cmds.items():  # interleaved: load changes hit every command alike
            r = bench.measure(argv, out if name.startswith("merge") else None, name, rep)
            if rep < 0:
                continue
            runs[name].append(r)
            print(f"  rep {rep} {name:10s} {r.wall_s:7.3f} s  cpu {r.cpu_s:6.3f} s  tree RSS "
                  f"{r.peak_tree_rss / 1e6:7.1f} MB  load1 {r.load1:.2f}  rc {r.rc}", flush=True)  # fmt: skip
    best = {k: min(r.wall_s for r in v) for k, v in runs.items()}
    med = {k: statistics.median(r.wall_s for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r.cpu_s for r in v) for k, v in runs.items()}
    rss = {k: max(r.peak_tree_rss for r in v) for k, v in runs.items()}
    size = bench.input_bytes(big)
    print(f"\ninput: {a.ranks} ranks, {size / 1e6:.1f} MB ({big})")
    print(f"{'command':10s} {'best s':>8s} {'median s':>9s} {'cpu s':>7s} {'peak tree RSS MB':>17s}")
    for k in cmds:
        print(f"{k:10s} {best[k]:8.3f} {med[k]:9.3f} {cpu[k]:7.3f} {rss[k] / 1e6:17.1f}")
    ratio = best["coll-j1"] / best["merge-j1"]
    speedup = best["coll-j1"] / best["coll-j2"]
    mem = rss["coll-j1"] / max(rss["coll-small"], 1)
    checks = [
        ("info --collectives -j1 <= 0.5 x merge -j1", ratio, ratio <= 0.5),
        ("info --collectives -j2 >= 1.6 x faster than -j1", speedup, speedup >= 1.6),
        ("peak RSS at 4x the data <= 1.25 x (flat)", mem, mem <= 1.25),
    ]
    for text, value, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {text}: {value:.2f}")
    work = (best["coll-j1"] - best["start"]) / (best["merge-j1"] - best["start"])
    amdahl = best["coll-j1"] / (best["start"] + (best["coll-j1"] - best["start"]) / 2)
    print(f"info/merge on CPU time (medians): {cpu['coll-j1'] / cpu['merge-j1']:.2f}; "
          f"after start-up ({best['start']:.3f} s) subtracted: {work:.2f}")  # fmt: skip
    need = (best["coll-j1"] - best["start"]) / 3  # (S + P) / (S + P / 2) >= 1.6  <=>  S <= P / 3
    print(f"1.6x needs the serial part <= {need:.3f} s (a third of the rest); the interpreter alone "
          f"takes {best['interp']:.3f} s, with info's imports {best['start']:.3f} s")  # fmt: skip
    print(f"-j2 with 2 free cores, only start-up serial, at most: {amdahl:.2f}x; "
          f"the control (pure CPU, 8 tasks) got {best['burn-j1'] / best['burn-j2']:.2f}x")  # fmt: skip
    ip = in_process(big, a.reps)
    print(f"in process (no start-up, no exit; best of {a.reps}): -j1 {ip[1]:.3f} s, -j2 {ip[2]:.3f} s: "
          f"{ip[1] / ip[2]:.2f}x")  # fmt: skip
    if a.json:
        a.json.write_text(json.dumps({k: [vars(r) for r in v] for k, v in runs.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

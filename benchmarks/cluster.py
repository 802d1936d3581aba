#!/usr/bin/env python3
"""Issue 38, item 5: ``info --collectives`` locally and on a Dask cluster, at scale.

    python benchmarks/cluster.py [--ranks 1024,2048] [--data-root /tmp/tfcluster]
        [--configs j1,j2,dask] [--workers 2] [--json-output] [--out results.json]

For each rank count N: a synthetic run (``python -m tracefuse_synth DIR --ranks N
--steps 10 --layers 1 --hosts N/8 --jobs 2 --window-spread-ms 1000 -q``: eight GPUs per
host, as on real nodes (one host of N GPUs lists N devices in every file's header,
input and plans growing as N squared); the wider spread keeps every rank's start
nanosecond distinct, as the run check requires), then the same
command under each configuration, in turn:

* ``j1``   ``tracefuse info --collectives [--json] -j 1 DIR`` (one process);
* ``j2``   the same with ``-j 2`` (two local worker processes);
* ``dask`` the same with ``--dask SCHEDULER_FILE``: a scheduler and ``--workers``
  single-threaded ``dask worker`` processes on 127.0.0.1, started once by this script.

Every 50 ms psutil samples the RSS of the command's process (the reduce: planning, the
results' deserialisation, matching, the verdict, the report), of its children (``-j 2``)
and of each Dask worker process; reported are the peaks, the wall time, the command
process's own CPU time, each worker's CPU time during the run, and from those the scan
rate per worker core (input MB / worker CPU s). Every configuration must print the
same bytes (sha256 of stdout, checked). The machine is shared: ``uptime`` is recorded
before each run, and the ratios between configurations of one N are the figures to
quote. Raw results go to ``--out`` (JSON), a markdown table to stdout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable
POLL_S = 0.05
MB = 1e6


def ensure_run(root: Path, ranks: int) -> Path:
    """The synthetic run of ``ranks`` ranks under ``root`` (made once, then reused)."""
    out = root / f"r{ranks}h"
    done = out / ".complete"
    if done.exists():
        return out
    cmd = [PY, "-m", "tracefuse_synth", str(out), "--ranks", str(ranks), "--steps", "10", "--layers", "1"]
    cmd += ["--hosts", str(max(1, ranks // 8)), "--jobs", "2", "--window-spread-ms", "1000", "-q"]
    subprocess.run(cmd, check=True, env=_env())
    done.write_text("")
    return out


def _env() -> Dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO))


def input_bytes(run_dir: Path) -> int:
    return sum(p.stat().st_size for p in run_dir.iterdir() if p.name.endswith(".json"))


class LocalCluster:
    """``dask scheduler`` + ``workers`` x ``dask worker --nworkers 1 --nthreads 1`` on
    127.0.0.1, meeting through a scheduler file; the worker processes' pids (the
    nanny's children, where the tasks run) for the RSS and CPU samples."""

    def __init__(self, home: Path, workers: int) -> None:
        self.home = home
        self.scheduler_file = home / "scheduler.json"
        self.scheduler_file.unlink(missing_ok=True)
        self.procs: List[subprocess.Popen] = []
        self._start([PY, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                     "--dashboard-address", ":0", "--scheduler-file", str(self.scheduler_file)], "scheduler")  # fmt: skip
        for i in range(workers):
            self._start([PY, "-m", "distributed.cli.dask_worker", "--host", "127.0.0.1", "--scheduler-file",
                         str(self.scheduler_file), "--nworkers", "1", "--nthreads", "1", "--no-dashboard",
                         "--memory-limit", "0"], f"worker{i}")  # fmt: skip
        import distributed  # only this benchmark needs it (the 'dask' extra)

        self.client = distributed.Client(scheduler_file=str(self.scheduler_file), timeout=60)
        self.client.wait_for_workers(workers, timeout=60)
        self.worker_pids: Dict[str, int] = self.client.run(os.getpid)

    def _start(self, argv: List[str], name: str) -> None:
        with open(self.home / f"{name}.log", "wb") as log:
            self.procs.append(subprocess.Popen(argv, env=_env(), cwd=self.home, stdout=log,
                                               stderr=subprocess.STDOUT, start_new_session=True))  # fmt: skip

    def close(self) -> None:
        self.client.close()
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            p.wait(30)


def _rss(proc: psutil.Process) -> int:
    try:
        return int(proc.memory_info().rss)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0


def _cpu(proc: psutil.Process) -> Optional[float]:
    try:
        t = proc.cpu_times()
        return float(t.user + t.system)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def run_one(argv: List[str], workers: Dict[str, psutil.Process]) -> Dict[str, Any]:
    """Run ``argv``, sampling RSS (the process, its children, each Dask worker) and CPU."""
    load = os.getloadavg()
    w_cpu0 = {k: _cpu(p) or 0.0 for k, p in workers.items()}
    w_peak = {k: _rss(p) for k, p in workers.items()}
    w_base = dict(w_peak)
    digest = hashlib.sha256()
    t0 = time.perf_counter()
    errfile = tempfile.TemporaryFile()  # a pipe could fill and stop the command
    proc = subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=errfile)
    ps = psutil.Process(proc.pid)
    peak_main = peak_child = 0
    own_cpu = 0.0
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    while proc.poll() is None:
        chunk = proc.stdout.read()
        if chunk:
            digest.update(chunk)
        peak_main = max(peak_main, _rss(ps))
        own_cpu = _cpu(ps) or own_cpu
        try:
            children = ps.children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        peak_child = max([peak_child] + [_rss(c) for c in children])
        for k, p in workers.items():
            w_peak[k] = max(w_peak[k], _rss(p))
        time.sleep(POLL_S)
    wall = time.perf_counter() - t0
    rest = proc.stdout.read()
    if rest:
        digest.update(rest)
    errfile.seek(0)
    err = errfile.read().decode(errors="replace")
    errfile.close()
    return {
        "argv": argv[3:],
        "exit": proc.returncode,
        "stderr_tail": err[-400:],
        "wall_s": round(wall, 2),
        "reduce_cpu_s": round(own_cpu, 2),
        "reduce_peak_rss_mb": round(peak_main / MB, 1),
        "children_peak_rss_mb": round(peak_child / MB, 1),
        "workers": {
            k: {
                "cpu_s": round((_cpu(p) or 0.0) - w_cpu0[k], 2),
                "peak_rss_mb": round(w_peak[k] / MB, 1),
                "rss_before_mb": round(w_base[k] / MB, 1),
            }
            for k, p in workers.items()
        },
        "stdout_sha256": digest.hexdigest(),
        "load_before": [round(x, 2) for x in load],
    }


def table(results: List[Dict[str, Any]]) -> str:
    rows = ["| ranks | input GB | run | wall s | reduce CPU s | reduce peak MB | -j2 child peak MB "
            "| worker CPU s (each) | worker peak MB (each) | scan MB/s per worker core |",
            "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        w = r["workers"] if r["config"] == "dask" else {}
        cpu = sum(x["cpu_s"] for x in w.values())
        rate = f"{r['input_bytes'] / MB / cpu:.0f}" if cpu > 0 else "-"
        w_cpu = " / ".join(f"{x['cpu_s']:.1f}" for x in w.values()) or "-"
        w_rss = " / ".join(f"{x['peak_rss_mb']:.0f}" for x in w.values()) or "-"
        rows.append(
            f"| {r['ranks']:,} | {r['input_bytes'] / 1e9:.2f} | {r['config']} | {r['wall_s']:.1f} | "
            f"{r['reduce_cpu_s']:.1f} | {r['reduce_peak_rss_mb']:.0f} | "
            f"{r['children_peak_rss_mb']:.0f} | {w_cpu} | {w_rss} | {rate} |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="1024,2048")
    ap.add_argument("--data-root", default="/tmp/tfcluster")
    ap.add_argument("--configs", default="j1,j2,dask")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--json-output", action="store_true", help="info --collectives --json (default: the text)"
    )
    ap.add_argument("--out", default=None, help="raw results (JSON); default benchmarks/results-cluster.json")
    a = ap.parse_args()
    root = Path(a.data_root)
    root.mkdir(parents=True, exist_ok=True)
    configs = a.configs.split(",")
    cluster = LocalCluster(root, a.workers) if "dask" in configs else None
    results: List[Dict[str, Any]] = []
    try:
        for n in [int(x) for x in a.ranks.split(",")]:
            run_dir = ensure_run(root, n)
            size = input_bytes(run_dir)
            base = [PY, "-m", "tracefuse_stream", "info", "--collectives"] + (
                ["--json"] if a.json_output else []
            )
            digests = set()
            for config in configs:
                extra = {"j1": ["-j", "1"], "j2": ["-j", "2"]}.get(config)
                if extra is None:
                    assert cluster is not None
                    extra = ["--dask", str(cluster.scheduler_file)]
                workers = {k: psutil.Process(p) for k, p in cluster.worker_pids.items()} if cluster else {}
                r = run_one(base + extra + [str(run_dir)], workers if config == "dask" else {})
                r.update(ranks=n, config=config, input_bytes=size)
                results.append(r)
                digests.add(r["stdout_sha256"])
                print(json.dumps(r), file=sys.stderr, flush=True)
            if len(digests) != 1:
                print(f"error: {n} ranks: the configurations printed different outputs", file=sys.stderr)
                return 1
    finally:
        if cluster is not None:
            cluster.close()
    out = Path(a.out) if a.out else HERE / "results-cluster.json"
    out.write_text(json.dumps({"nproc": os.cpu_count(), "results": results}, indent=1))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

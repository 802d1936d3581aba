"""Issue 38, items 3 and 4: ``--dask ADDRESS`` on a real cluster.

One ``dask scheduler`` and two ``dask worker`` processes (one thread each) on
127.0.0.1, started once for the module; the workers import the package from this tree
(PYTHONPATH) and run in a directory of their own, so that a relative input path is one
they cannot see. Every check compares the ``--dask`` run with the local ``-j 1`` run of
the same command: stdout, stderr, exit status and the written file, byte for byte. A
worker plugin (pickled by value, never installed on the workers) kills the worker
process that starts a tracefuse task: once (Dask reschedules the task on the other
worker: the run completes, identical), or every time (more deaths than the scheduler's
``allowed-failures`` of 1: one error line, no file). Another plugin kills the scheduler
of a cluster of its own mid-run: one error line on the real stderr, no file.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

distributed = pytest.importorskip(
    "distributed", reason="the 'dask' extra is not installed: pip install 'tracefuse-stream[dask]'"
)

from distributed.diagnostics.plugin import WorkerPlugin  # noqa: E402

from tracefuse_stream.cli.app import main  # noqa: E402
from tracefuse_stream.cluster import connect  # noqa: E402
from tracefuse_stream.errors import ClusterError  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DDP8 = REPO / "tests" / "data" / "recorded" / "ddp8_straggler"
SAMPLE = REPO / "fixtures" / "sample_run"

pytestmark = pytest.mark.xdist_group("dask")  # one cluster for the module (pyproject: --dist loadgroup)


class Cluster:
    def __init__(self, scheduler_file: Path, client: Any, procs: List[subprocess.Popen]) -> None:
        self.scheduler_file = scheduler_file
        self.client = client
        self.procs = procs

    @property
    def address(self) -> str:
        return str(json.loads(self.scheduler_file.read_text())["address"])

    def executed(self) -> int:
        """Tasks the workers have run so far (the run went to the cluster)."""
        counts = self.client.run(lambda dask_worker: dask_worker.state.executed_count)
        return int(sum(counts.values()))


def _start(argv: List[str], env: Dict[str, str], cwd: Path, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:  # the child holds its own copy of the descriptor
        return subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


@contextlib.contextmanager
def started(home: Path, pythonpath: str, workers: int) -> Iterator[Cluster]:
    """A scheduler and ``workers`` workers in ``home``, importing from ``pythonpath``."""
    sched = home / "scheduler.json"
    env = dict(
        os.environ,
        PYTHONPATH=pythonpath,
        DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="1",
    )
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    procs = [
        _start(
            [
                *dask,
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--dashboard-address",
                ":0",
                "--scheduler-file",
                str(sched),
            ],
            env,
            home,
            home / "scheduler.log",
        )
    ]
    worker = [sys.executable, "-m", "distributed.cli.dask_worker", "--host", "127.0.0.1"]
    worker += ["--scheduler-file", str(sched), "--nworkers", "1", "--nthreads", "1", "--no-dashboard"]
    procs += [_start(worker, env, home, home / f"worker{i}.log") for i in range(workers)]
    try:
        client = distributed.Client(scheduler_file=str(sched), timeout=30, set_as_default=False)
        client.wait_for_workers(workers, timeout=30)
        yield Cluster(sched, client, procs)
        client.close()
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started(tmp_path_factory.mktemp("dask"), str(REPO), workers=2) as c:
        yield c


def run(argv: List[str], cwd: Path) -> Tuple[int, str, str]:
    """``tracefuse ARGV`` in this process from ``cwd``: exit status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(old)
    return code, out.getvalue(), err.getvalue()


def local_and_dask(
    argv: List[str], tmp_path: Path, cluster: Cluster
) -> Tuple[Tuple[int, str, str], Path, Path]:
    """The local ``-j 1`` run and the ``--dask`` run of ``argv``, each in a directory of
    its own (outputs given relative land there); the --dask run's results."""
    (tmp_path / "local").mkdir(parents=True)
    (tmp_path / "dask").mkdir()
    local = run([*argv, "-j", "1"], tmp_path / "local")
    before = cluster.executed()
    remote = run([*argv, "--dask", str(cluster.scheduler_file)], tmp_path / "dask")
    assert remote == local
    assert cluster.executed() > before  # the scans ran on the workers
    return remote, tmp_path / "local", tmp_path / "dask"


@pytest.mark.parametrize("run_dir", [DDP8, SAMPLE], ids=["ddp8_straggler", "sample_run"])
def test_info_collectives_json_is_identical(cluster: Cluster, tmp_path: Path, run_dir: Path) -> None:
    (code, out, err), _, _ = local_and_dask(
        ["info", "--collectives", "--json", str(run_dir)], tmp_path, cluster
    )
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert len(doc["collectives"]["ranks"]) == (8 if run_dir == DDP8 else 4)
    if run_dir == DDP8:
        assert doc["collectives"]["straggler"] == 5


def test_info_every_section_by_address_is_identical(cluster: Cluster, tmp_path: Path) -> None:
    argv = ["info", "--steps", "--align", "--collectives", str(DDP8)]
    local = run([*argv, "-j", "1"], tmp_path)
    assert run([*argv, "--dask", cluster.address], tmp_path) == local  # tcp://127.0.0.1:PORT
    assert local[0] == 0 and "straggler: rank 5" in local[1]


def test_the_python_api_takes_dask_too(cluster: Cluster) -> None:
    import tracefuse_stream

    local = tracefuse_stream.stragglers(str(DDP8), jobs=1)
    before = cluster.executed()
    assert tracefuse_stream.stragglers(str(DDP8), dask=cluster.address) == local
    assert cluster.executed() > before and local["straggler"] == 5


def test_report_page_is_identical(cluster: Cluster, tmp_path: Path) -> None:
    (code, _, err), here, there = local_and_dask(["report", str(DDP8), "-o", "page.html"], tmp_path, cluster)
    assert code == 0 and err.startswith(
        "page.html: 8 ranks x 2 steps, rank 5 held the others back in every step"
    )
    assert (there / "page.html").read_bytes() == (here / "page.html").read_bytes()


def test_merge_side_passes_on_the_cluster_give_the_same_file(cluster: Cluster, tmp_path: Path) -> None:
    argv = ["merge", str(DDP8), "-o", "m.json.gz", "--link-collectives", "--align", "collectives", "-q"]
    (code, out, err), here, there = local_and_dask(argv, tmp_path, cluster)
    assert (code, out, err) == (0, "", "")
    assert (there / "m.json.gz").read_bytes() == (here / "m.json.gz").read_bytes()


def _broken_copy(tmp_path: Path) -> Tuple[Path, Path]:
    """ddp8_straggler with rank 3's file cut in half (a truncated gzip stream)."""
    run_dir = tmp_path / "run"
    shutil.copytree(DDP8, run_dir)
    victim = sorted(run_dir.glob("vm_4765.*"))[0]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    return run_dir, victim


def test_a_broken_rank_file_on_a_worker_is_named_as_locally(cluster: Cluster, tmp_path: Path) -> None:
    run_dir, victim = _broken_copy(tmp_path)
    (code, out, err), _, _ = local_and_dask(
        ["info", "--collectives", str(run_dir)], tmp_path / "info", cluster
    )
    assert code == 1 and f"BROKEN {victim}:" in out + err
    argv = ["merge", str(run_dir), "-o", "m.json.gz", "--align", "collectives", "-q"]
    (code, out, err), here, there = local_and_dask(argv, tmp_path / "merge", cluster)
    assert code == 1 and err.startswith(f"tracefuse: error: {victim}: ") and err.count("\n") == 1
    assert list(there.iterdir()) == [] and list(here.iterdir()) == []


def test_workers_that_cannot_see_an_input_are_named(cluster: Cluster, tmp_path: Path) -> None:
    rel = os.path.relpath(SAMPLE, REPO)  # the workers run in another directory
    code, out, err = run(["info", rel, "--dask", str(cluster.scheduler_file)], REPO)
    assert (code, out) == (1, "")
    assert err.startswith(f"tracefuse: error: --dask {cluster.scheduler_file}: worker tcp://127.0.0.1:")
    assert f"cannot see {rel} (its directory: " in err and "shared with this machine" in err


def test_workers_with_another_tracefuse_stream_are_refused_before_any_work(tmp_path: Path) -> None:
    old = tmp_path / "old" / "tracefuse_stream"  # an install without cluster.py shadows this tree
    old.mkdir(parents=True)
    # an old install: no cluster.py, and no editable install's finder (which would
    # serve this tree's submodules under the shadowing package)
    (old / "__init__.py").write_text(
        "import sys\nsys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')]\n"
    )
    with started(tmp_path, str(old.parent), workers=1) as c:
        code, out, err = run(["info", str(SAMPLE), "--dask", str(c.scheduler_file)], REPO)
    assert (code, out) == (1, "")
    assert err.startswith(
        f"tracefuse: error: --dask {c.scheduler_file}: the workers cannot run tracefuse-stream "
    )
    assert "No module named 'tracefuse_stream.cluster'" in err and err.count("\n") == 1


def test_an_unreachable_scheduler_is_one_clear_error() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(
        ClusterError, match=rf"^dask tcp://127\.0\.0\.1:{port}: cannot reach a Dask scheduler"
    ):
        connect(f"tcp://127.0.0.1:{port}", timeout=0.5)
    assert time.monotonic() - t0 < 10
    with pytest.raises(ClusterError, match="neither a scheduler address .* nor an existing scheduler file"):
        connect("no-such-scheduler.json")


def test_without_distributed_the_error_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    code, out, err = run(["info", str(SAMPLE), "--dask", "tcp://127.0.0.1:8786"], REPO)
    assert (code, out) == (1, "")
    assert err.startswith("tracefuse: error: --dask needs the 'distributed' package")
    assert err.rstrip().endswith("install it: pip install 'tracefuse-stream[dask]'")


class KillWorker(WorkerPlugin):
    """Kills the worker process that starts a tracefuse task (once: while ``marker``
    does not exist yet; else every time), until the file ``stop`` exists (it stays
    registered, inert: unregistering it while a nanny restarts a worker fails)."""

    name = "tracefuse-test-kill"

    def __init__(self, marker: str, once: bool) -> None:
        self.marker, self.once = marker, once
        self.stop = marker + ".stop"

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        if finish != "executing" or not str(key).startswith("tracefuse-") or os.path.exists(self.stop):
            return
        try:  # O_EXCL: of two workers starting a task at once, one dies (once=True)
            fd = os.open(
                self.marker, os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_EXCL if self.once else 0)
            )
        except FileExistsError:
            return
        os.write(fd, b"killed\n")
        os.close(fd)
        os._exit(1)


@contextlib.contextmanager
def killing(cluster: Cluster, marker: Path, once: bool) -> Iterator[None]:
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
    plugin = KillWorker(str(marker), once)
    try:
        cluster.client.register_plugin(plugin)
        yield
    finally:
        Path(plugin.stop).touch()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        cluster.client.wait_for_workers(2, timeout=30)  # the nannies restart the killed ones


def test_a_worker_killed_mid_run_is_replaced_and_the_output_is_identical(
    cluster: Cluster, tmp_path: Path
) -> None:
    argv = ["info", "--collectives", "--json", str(DDP8)]
    local = run([*argv, "-j", "1"], tmp_path)
    marker = tmp_path / "killed"
    with killing(cluster, marker, once=True):
        remote = run([*argv, "--dask", str(cluster.scheduler_file)], tmp_path)
    assert marker.read_text() == "killed\n"  # one worker died running a task
    assert remote == local


def test_workers_dying_every_time_fail_once_and_write_nothing(cluster: Cluster, tmp_path: Path) -> None:
    marker = tmp_path / "killed"
    with killing(cluster, marker, once=False):
        code, out, err = run(
            ["report", str(DDP8), "-o", "page.html", "--dask", str(cluster.scheduler_file)], tmp_path
        )
    assert (code, out) == (1, "")
    assert err.startswith(
        f"tracefuse: error: --dask {cluster.scheduler_file}: the workers running a task died too"
    )
    assert err.count("\n") == 1 and err.endswith("Nothing was written\n")
    assert marker.read_text().count("killed\n") >= 2  # allowed-failures 1: a task's second death ends it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["killed", "killed.stop"]


class KillScheduler(WorkerPlugin):
    """Kills the scheduler (its pid read from ``pidfile``) when a worker starts a
    tracefuse task: the cluster is gone mid-run."""

    name = "tracefuse-test-kill-scheduler"

    def __init__(self, pidfile: str) -> None:
        self.pidfile = pidfile

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        if finish == "executing" and str(key).startswith("tracefuse-"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(Path(self.pidfile).read_text()), signal.SIGKILL)


def test_a_scheduler_killed_mid_run_is_one_error_and_writes_nothing(tmp_path: Path) -> None:
    import cloudpickle

    home = tmp_path / "cluster"
    home.mkdir()
    with started(home, str(REPO), workers=1) as c:
        pidfile = home / "scheduler.pid"
        pidfile.write_text(str(c.procs[0].pid))  # procs[0]: the scheduler
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        try:
            c.client.register_plugin(KillScheduler(str(pidfile)))
        finally:
            cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        # a process of its own: distributed's logging goes to the real stderr, which
        # must hold the one message and no traceback of Dask's
        proc = subprocess.run(
            [sys.executable, "-m", "tracefuse_stream", "report", str(DDP8), "-o", "page.html"]
            + ["--dask", str(c.scheduler_file)],
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert c.procs[0].wait(10) == -signal.SIGKILL
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr.startswith(f"tracefuse: error: --dask {c.scheduler_file}: lost the cluster (")
    assert proc.stderr.count("\n") == 1 and proc.stderr.endswith("Nothing was written\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster"]

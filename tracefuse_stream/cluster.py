"""Per-rank passes on a Dask cluster (``--dask ADDRESS``): the second backend behind
:func:`~tracefuse_stream.workers.parallel_map`.

A job of 4,096-16,384 ranks at ~1 GB of trace each is more input than one node reads
in minutes. The per-rank passes (info's one pass per file, the merge's side passes,
the why's re-reads) are pure functions of one file with small results, so they run as
Dask tasks on the cluster's workers, which read the files where they are (a file
system shared with this machine, at the same paths); the reduce (matching, the verdict,
the report) stays in this process, and the results come back in task order, so the
output is byte-identical to a local run.

``distributed`` is an optional extra (``pip install 'tracefuse-stream[dask]'``),
imported only when a cluster is asked for: the core install and every local run
never load it (tests/test_startup.py). What can go wrong is said once, as a
:class:`~tracefuse_stream.errors.ClusterError` naming the address: no ``distributed``,
no scheduler there, no worker, workers that cannot import this package or see the
inputs, or a task whose workers died more often than Dask retries it
(``distributed.scheduler.allowed-failures``). A rank file that fails on a worker
raises the same error, with the same message, as it does locally.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from tracefuse_stream._version import __version__
from tracefuse_stream.errors import ClusterError, TraceFuseError
from tracefuse_stream.workers import remote_backend, task_chunks

INSTALL_HINT = "pip install 'tracefuse-stream[dask]'"
#: How long to try to reach the scheduler, and then to wait for a first worker.
CONNECT_SECONDS = 10.0
WORKERS_SECONDS = 30.0
_ADDRESS = re.compile(r"[A-Za-z0-9.\-_\[\]:]+:\d+")


def _distributed() -> Any:
    """The ``distributed`` module, or the error that says how to install it."""
    try:
        import distributed  # lazy: an optional extra, and heavy (tests/test_startup.py)
    except ImportError as e:
        raise ClusterError(
            f"--dask needs the 'distributed' package ({e}); install it: {INSTALL_HINT}"
        ) from None
    return distributed


def _client_args(address: str) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
    """``Client`` arguments for an address (``tcp://host:8786``, ``host:8786``) or a
    scheduler file (``dask scheduler --scheduler-file F`` writes it)."""
    if os.path.isfile(address):
        return (), {"scheduler_file": address}
    if "://" in address or _ADDRESS.fullmatch(address):
        return (address,), {}
    raise ClusterError(
        f"--dask {address}: neither a scheduler address (tcp://host:8786) nor an existing scheduler file"
    )


def input_paths(inputs: Any) -> List[str]:
    """The paths of a command's or API call's ``inputs`` (one path, a list, or a
    ``{rank: path}`` mapping), for :meth:`DaskCluster.check_workers`."""
    if isinstance(inputs, Mapping):
        return [str(v) for v in inputs.values()]
    if isinstance(inputs, (str, os.PathLike)):
        return [str(inputs)]
    return [str(p) for p in inputs]


def _worker_view(paths: Sequence[str]) -> Tuple[str, str, List[str]]:
    """Run on each worker: (this package's version there, its directory, the inputs it
    cannot see)."""
    return __version__, os.getcwd(), [p for p in paths if not os.path.exists(p)]


def _one_line(e: BaseException) -> str:
    """``e`` for a one-line message (Dask wraps a worker's exception in its repr)."""
    return " ".join(f"{type(e).__name__}: {e}".split())


def _run_chunk(fn: Callable[..., Any], arglist: Sequence[Tuple[Any, ...]]) -> bytes:
    """One task: consecutive per-rank calls (one scheduler round trip for several small
    ranks, as the local pool's chunks), their results pickled here as one bytes
    object. Why not let Dask serialize the list: its deserialization on the client
    left 5.2 million objects (239 MiB by tracemalloc) after the scans of 2,048
    synthetic ranks; the reduce peaked at 434 MB through Dask's own path, at 290 MB
    with this, and at 244 MB locally."""
    import pickle  # lazy: as the modules below, only where a cluster runs (a local run never)

    return pickle.dumps([fn(*a) for a in arglist], protocol=pickle.HIGHEST_PROTOCOL)


class DaskCluster:
    """A connected client; :meth:`map` is the :data:`~tracefuse_stream.workers.Mapper`."""

    def __init__(self, client: Any, address: str) -> None:
        self.client = client
        self.address = address

    def threads(self) -> int:
        """Worker threads on the cluster now (sizes the chunks)."""
        return max(1, sum(self.client.nthreads().values()))

    def check_workers(self, inputs: Any) -> None:
        """Fail before any work when a worker runs another version of this package (or
        none), or cannot see an input (:func:`input_paths`) at the path given here."""
        paths = input_paths(inputs)
        try:
            views = self.client.run(_worker_view, paths)
        except Exception as e:  # a worker cannot load this function: Dask wraps its ImportError
            raise ClusterError(
                f"--dask {self.address}: the workers cannot run tracefuse-stream {__version__} ({_one_line(e)}); "
                "install this version where they run"
            ) from None
        for worker, (version, cwd, missing) in sorted(views.items()):
            if version != __version__:
                raise ClusterError(
                    f"--dask {self.address}: worker {worker} runs tracefuse-stream {version}, this is "
                    f"{__version__}: install the same version on the workers"
                )
            if missing:
                raise ClusterError(
                    f"--dask {self.address}: worker {worker} cannot see {missing[0]} (its directory: {cwd}); "
                    "the workers read the inputs themselves: they need a file system shared with this "
                    "machine, at the same paths (give absolute paths, or start the workers in this directory)"
                )

    def map(self, fn: Callable[..., Any], arglist: List[Tuple[Any, ...]]) -> Iterator[Any]:
        """``fn(*a) for a in arglist`` on the cluster, yielded in order as each task's
        chunk arrives (the caller's ``each`` then shares names before the next chunk
        comes in: the reduce holds what a local run holds, not every raw result); the
        first failing task in task order raises its own error, as locally."""
        import pickle  # lazy: a local run never loads what only a cluster needs
        import uuid  # lazy: see above

        name = getattr(fn, "__name__", "task").strip("<>")
        token = uuid.uuid4().hex[:12]
        futures = [
            self.client.submit(_run_chunk, fn, arglist[a:b], key=f"tracefuse-{name}-{token}-{i}", pure=False)
            for i, (a, b) in enumerate(task_chunks(len(arglist), 4 * self.threads()))
        ]
        try:
            for i, fut in enumerate(futures):
                try:
                    chunk = pickle.loads(fut.result())
                except TraceFuseError:
                    raise
                except Exception as e:
                    raise self._error(e) from None
                fut.release()  # the worker frees it now: workers hold only the results not yet fetched
                futures[i] = None
                chunk.reverse()
                while chunk:  # each raw result dropped as soon as the caller has it
                    yield chunk.pop()
        finally:
            self.client.cancel([f for f in futures if f is not None])

    def _error(self, e: Exception) -> Exception:
        """What to raise for an exception out of a task: the cluster's own failures as
        one :class:`ClusterError`, anything else (a bug of ours) as it is."""
        d = _distributed()
        if isinstance(e, d.KilledWorker):
            return ClusterError(
                f"--dask {self.address}: the workers running a task died too often ({e}); Dask retries a "
                "task on another worker up to distributed.scheduler.allowed-failures times. Nothing was written"
            )
        if "No module named 'tracefuse_stream" in str(e):  # a worker joined after the check
            return ClusterError(
                f"--dask {self.address}: a worker cannot import tracefuse-stream {__version__} "
                f"({_one_line(e)}); install this version there"
            )
        if isinstance(e, (d.comm.CommClosedError, d.client.FutureCancelledError)):
            return ClusterError(
                f"--dask {self.address}: lost the cluster ({_one_line(e)}). Nothing was written"
            )
        return e

    def close(self) -> None:
        self.client.close()


def connect(
    address: str,
    inputs: Any = (),
    timeout: float = CONNECT_SECONDS,
    workers_timeout: float = WORKERS_SECONDS,
) -> DaskCluster:
    """Connect to the scheduler at ``address`` (or in the scheduler file
    ``address``), wait for a worker, and check that the workers can read ``inputs``."""
    d = _distributed()
    args, kwargs = _client_args(address)
    try:
        client = d.Client(*args, timeout=timeout, set_as_default=False, **kwargs)
    except (OSError, TimeoutError, ValueError) as e:
        raise ClusterError(
            f"--dask {address}: cannot reach a Dask scheduler ({type(e).__name__}: {e}); "
            "start one with 'dask scheduler' and its workers with 'dask worker ADDRESS'"
        ) from None
    cluster = DaskCluster(client, address)
    try:
        try:
            client.wait_for_workers(1, timeout=workers_timeout)
        except TimeoutError:
            raise ClusterError(
                f"--dask {address}: no Dask worker joined the scheduler within {workers_timeout:g} s; "
                "start them with 'dask worker ADDRESS' (or --scheduler-file FILE)"
            ) from None
        cluster.check_workers(inputs)
    except BaseException:
        cluster.close()
        raise
    return cluster


@contextlib.contextmanager
def _quiet_client() -> Iterator[None]:
    """Keep ``distributed.client``'s own error log (a traceback per lost connection)
    off stderr for the run: a lost scheduler is said once, by :meth:`DaskCluster._error`."""
    import logging  # lazy: a local run never loads what only a cluster needs

    log = logging.getLogger("distributed.client")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


@contextlib.contextmanager
def dask_backend(address: Optional[str], inputs: Any = ()) -> Iterator[Optional[DaskCluster]]:
    """Within this block every :func:`~tracefuse_stream.workers.parallel_map` runs on
    the cluster at ``address``; ``None``: no cluster, nothing changes (the local
    ``jobs``)."""
    if not address:
        yield None
        return
    with warnings.catch_warnings():
        # the per-rank arguments (plans with their headers) are the data: Dask's advice
        # to load data with Dask instead does not apply, and its warning is no output of ours
        warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
        cluster = connect(address, inputs)
        try:
            with _quiet_client(), remote_backend(cluster.map):
                yield cluster
        finally:
            with _quiet_client():
                cluster.close()


__all__ = ["CONNECT_SECONDS", "DaskCluster", "INSTALL_HINT", "connect", "dask_backend", "input_paths"]

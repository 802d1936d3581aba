"""Running per-rank work in worker processes, results in rank order.

Workers never send events to the parent: each writes its rank's compressed fragment
to disk and returns a small result, and the parent consumes results strictly in task
order, so ``jobs=N`` output is byte-for-byte the ``jobs=1`` output whatever order
workers finish in.

Tasks reach forked workers through the pool's initializer arguments, which a fork
inherits instead of pickling: an API ``filter_fn`` lambda works with workers too, and
every pool carries its own tasks (nothing in module globals of the parent, so two
merges in one process do not see each other's work). Progress travels through one
shared counter per *worker* (not per task): the parent's poll costs O(workers) per
wake-up however many thousand ranks there are. ``concurrent.futures`` notices a worker
that dies (a signal to the whole process group, the OOM killer) and fails the merge
instead of waiting for it; on interruption the parent stops the workers by the pids
they registered in a shared array (the executor has no public "terminate").
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import math
import os
import signal
import sys
import time
import warnings
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Generator,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
)

if TYPE_CHECKING:  # the pool's modules load when a pool starts: a -j 1 run never pays them
    from concurrent.futures import ProcessPoolExecutor

T = TypeVar("T")
R = TypeVar("R")

POLL_SECONDS = 0.25
STOP_GRACE_SECONDS = 2.0  # after an interruption, how long stopped workers get to exit
#: A worker gets consecutive tasks in chunks of up to this many tasks and (with
#: ``weights``) this much weight (input bytes): one pool round trip per chunk, not per
#: task. A round trip (pickled call and result, queue wake-ups) costs ~0.2-0.4 ms, more
#: than a tiny rank's whole merge; a chunk of big ranks is a single rank, so big
#: merges keep their balance.
CHUNK_TASKS = 64
CHUNK_WEIGHT = 4 << 20

# Set in each worker process by _init_worker (the child's own copy; never in the parent).
_worker_state: Optional[Tuple[Callable[..., Any], Sequence[Any], Any, int]] = None


CGROUP_ROOT = "/sys/fs/cgroup"
PROC_CGROUP = "/proc/self/cgroup"


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _levels(path: str) -> List[str]:
    """``/a/b`` -> ``["/a/b", "/a", "/"]``: a limit set on any ancestor applies too."""
    out = []
    p = "/" + path.strip("/")
    while True:
        out.append(p)
        if p == "/":
            return out
        p = os.path.dirname(p)


def _quota_v2(root: str, path: str) -> Optional[float]:
    """The smallest ``cpu.max`` quota/period along the cgroup v2 path (None: no limit)."""
    best: Optional[float] = None
    for level in _levels(path):
        text = _read(os.path.join(root, level.lstrip("/"), "cpu.max"))
        parts = (text or "").split()
        if (
            len(parts) == 2
            and parts[0] != "max"
            and parts[0].isdigit()
            and parts[1].isdigit()
            and int(parts[1])
        ):
            q = int(parts[0]) / int(parts[1])
            best = q if best is None else min(best, q)
    return best


def _quota_v1(root: str, controllers: str, path: str) -> Optional[float]:
    """The smallest ``cpu.cfs_quota_us / cpu.cfs_period_us`` along the cgroup v1 path."""
    best: Optional[float] = None
    for mount in dict.fromkeys((controllers, "cpu,cpuacct", "cpu")):
        for level in _levels(path):
            d = os.path.join(root, mount, level.lstrip("/"))
            quota, period = (
                _read(os.path.join(d, "cpu.cfs_quota_us")),
                _read(os.path.join(d, "cpu.cfs_period_us")),
            )
            try:
                qi, pi = int(quota or ""), int(period or "")
            except ValueError:
                continue
            if qi > 0 and pi > 0:
                best = qi / pi if best is None else min(best, qi / pi)
        if best is not None:
            return best
    return best


def cgroup_cpu_limit(root: str = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> Optional[float]:
    """CPUs this process's cgroup may use (quota / period: 2.5 = two and a half), or
    None without a limit. Containers (Docker ``--cpus``, Kubernetes limits) and Slurm
    allocations with cgroup CPU limits set a quota but usually leave every core in the
    affinity mask, so the affinity alone would start one worker per host core, each
    then getting a sliver of the quota. Reads ``cpu.max`` (cgroup v2) or
    ``cpu.cfs_quota_us``/``cpu.cfs_period_us`` (v1) at the process's cgroup and each
    ancestor (inside a cgroup namespace the path is "/", the container's own)."""
    text = _read(proc_cgroup)
    if not text:
        return None
    limits = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            q = _quota_v2(root, path)
        elif "cpu" in controllers.split(","):
            q = _quota_v1(root, controllers, path)
        else:
            continue
        if q is not None:
            limits.append(q)
    return min(limits) if limits else None


def usable_cores(root: Optional[str] = None, proc_cgroup: Optional[str] = None) -> int:
    """Cores this process may use: its CPU affinity (``taskset``, Slurm's binding),
    capped by its cgroup CPU quota rounded up (:func:`cgroup_cpu_limit`); at least 1.
    4 CPUs allowed on a 128-core node gives 4."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    limit = cgroup_cpu_limit(root or CGROUP_ROOT, proc_cgroup or PROC_CGROUP)
    if limit is not None:
        n = min(n, math.ceil(limit))
    return max(1, n)


def check_jobs(jobs: Any) -> None:
    """``jobs`` as every entry point takes it (``merge()``, ``stragglers()``, ``diff()``):
    None or 0 for the usable cores, else a positive int. A negative or non-integer count
    is a UsageError, never run as one worker in silence."""
    if jobs is not None and (type(jobs) is not int or jobs < 0):
        from tracefuse_stream.errors import UsageError  # lazy: workers.py loads in every worker

        raise UsageError(f"--jobs must be 0 (usable cores) or a positive number of workers, not {jobs!r}")


def resolve_jobs(jobs: Optional[int], n_tasks: int) -> int:
    """Workers to use: ``None``/0 = usable cores, never more than there are tasks."""
    n = usable_cores() if not jobs else int(jobs)
    return max(1, min(n, n_tasks))


def _context() -> Any:
    import multiprocessing

    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")


def _main_refs_pickler(file: Any) -> Any:
    """A pickler that notes (``main_refs``) the functions and classes it pickles by
    reference to ``__main__`` (only by name: the worker must find them there). pickle
    is imported here, when a pool starts: a -j 1 run does not load it (start-up)."""
    import pickle

    class _MainRefs(pickle.Pickler):
        def __init__(self, file: Any) -> None:
            super().__init__(file)
            self.main_refs: List[str] = []

        def reducer_override(self, obj: Any) -> Any:
            if callable(obj) and getattr(obj, "__module__", None) == "__main__":
                self.main_refs.append(str(getattr(obj, "__qualname__", obj)))
            return NotImplemented  # pickle it as usual

    return _MainRefs(file)


def _unpicklable(fn: Callable[..., Any], tasks: Sequence[Any]) -> Optional[str]:
    """Why ``fn`` and ``tasks`` cannot be sent to a spawned worker (None: they can).
    Under ``spawn`` (macOS', Windows' default) the initializer's arguments are
    pickled; a lambda or local function as ``filter_fn`` cannot be. A function of an
    interactive session (Jupyter, the REPL: a ``__main__`` without a file) pickles, by
    name, but a spawned worker cannot import ``__main__`` to find it."""
    import pickle

    p = _main_refs_pickler(io.BytesIO())
    try:
        p.dump((fn, list(tasks)))
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        return str(e) or type(e).__name__
    main = sys.modules.get("__main__")
    if p.main_refs and not getattr(main, "__file__", None):
        return f"{p.main_refs[0]} is defined in an interactive session, which worker processes cannot import"
    return None


def _init_worker(
    fn: Callable[..., Any], tasks: Sequence[Any], counters: Any, slot_source: Any, pids: Any
) -> None:
    """Worker set-up: its tasks, its progress slot, its pid for the parent, default
    SIGTERM, ignore SIGINT (the parent decides what an interrupt means and cleans up)."""
    global _worker_state
    with slot_source.get_lock():
        slot = slot_source.value
        slot_source.value += 1
    pids[slot] = os.getpid()
    _worker_state = (fn, tasks, counters, slot)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):  # forked with both blocked (_signals_blocked)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _run_tasks(first: int, stop: int) -> List[Any]:
    assert _worker_state is not None, "worker used before its initializer ran"
    fn, tasks, counters, slot = _worker_state

    def progress(n: int) -> None:
        with counters.get_lock():
            counters[slot] += n

    return [fn(tasks[i], progress) for i in range(first, stop)]


def task_chunks(n_tasks: int, jobs: int, weights: Optional[Sequence[int]] = None) -> List[Tuple[int, int]]:
    """``(first, stop)`` ranges of consecutive tasks, one pool round trip each: at most
    :data:`CHUNK_TASKS` tasks and (with ``weights``) :data:`CHUNK_WEIGHT` in all, and
    small enough that every worker gets several chunks (load balance)."""
    cap = max(1, min(CHUNK_TASKS, n_tasks // (4 * jobs)))
    out: List[Tuple[int, int]] = []
    first, weight = 0, 0
    for i in range(n_tasks):
        w = weights[i] if weights is not None else 0
        if i > first and (i - first >= cap or weight + w > CHUNK_WEIGHT):
            out.append((first, i))
            first, weight = i, 0
        weight += w
    if n_tasks:
        out.append((first, n_tasks))
    return out


def run_in_order(
    fn: Callable[[T, Callable[[int], None]], R],
    tasks: Sequence[T],
    jobs: int,
    progress: Callable[[int], None],
    weights: Optional[Sequence[int]] = None,
) -> Generator[R, None, None]:
    """Yield ``fn(task, progress)`` for each task, in task order, running up to
    ``jobs`` at once. ``progress`` (called in this process) receives bytes read.
    ``weights`` (a task's input bytes) size the chunks (:func:`task_chunks`)."""
    ctx = _context() if jobs > 1 and len(tasks) > 1 else None
    method = ctx.get_start_method() if ctx is not None else "fork"
    why = _unpicklable(fn, tasks) if method != "fork" else None
    if why is not None:
        warnings.warn(
            f"tracefuse: the merge runs in this process, without workers: its filter_fn cannot be sent to "
            f"worker processes under the '{method}' start method ({why}); define it at "
            "module level (a def, not a lambda or nested function) to use workers",
            RuntimeWarning,
            stacklevel=2,
        )
        ctx = None
    if ctx is None:
        for t in tasks:
            yield fn(t, progress)
        return
    counters = ctx.Array("q", jobs)
    pids = ctx.Array("i", jobs)
    seen = [0] * jobs
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout

    pool = ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(fn, list(tasks), counters, ctx.Value("i", 0), pids),
    )

    def poll() -> None:
        for i in range(jobs):
            v = counters[i]
            if v != seen[i]:
                progress(v - seen[i])
                seen[i] = v

    procs: List[Any] = []
    try:
        with _signals_blocked():  # the workers are forked here (see _signals_blocked)
            futures = [pool.submit(_run_tasks, a, b) for a, b in task_chunks(len(tasks), jobs, weights)]
            procs = list((getattr(pool, "_processes", None) or {}).values())
        for fut in futures:
            while True:
                try:
                    chunk = fut.result(timeout=POLL_SECONDS)
                    break
                except FutureTimeout:
                    poll()
            poll()
            yield from chunk
    except BaseException as e:
        _abandon(pool, pids, procs, stop=not isinstance(e, Exception))
        raise
    pool.shutdown(wait=True)


def _abandon(pool: ProcessPoolExecutor, pids: Any, procs: List[Any], stop: bool) -> None:
    """End a pool whose results are no longer wanted, quietly.

    The pending futures are cancelled by the pool's own manager thread
    (``shutdown(cancel_futures=True)``), never from here: a future cancelled by the
    caller stays in the manager's pending items, and when a worker then dies (stopped
    below, or killed by a SIGTERM to the process group) Python < 3.12's
    ``terminate_broken`` calls ``set_exception`` on it and prints ``InvalidStateError:
    CANCELLED`` from ``Thread-1`` (issue 28, item 5: 6 of 8 interrupted -j2 merges).

    ``stop``: an interruption (KeyboardInterrupt, the merge's SIGTERM, or the consumer
    closing this generator: GeneratorExit, e.g. ``-o - | head`` ended the output): the
    workers are stopped mid-rank rather than left to finish work nobody will read. Not
    on a task's error: a worker killed while it holds the result queue's lock would
    leave its siblings waiting for that lock (seen as a hung -j2 merge of a bad input);
    the others finish their chunk and stop at the sentinel. Whoever has not exited after
    :data:`STOP_GRACE_SECONDS` is killed, for the same lock."""
    thread = getattr(pool, "_executor_manager_thread", None)  # shutdown forgets it
    pool.shutdown(wait=False, cancel_futures=True)
    if not stop:
        if thread is not None:
            thread.join()
        return
    # a second Ctrl-C must not cut this short (workers left running): it is held back
    # until the workers are gone, bounded by the grace period, then raised as usual
    with _signals_blocked():
        _stop_workers(pids)
        _kill_survivors(procs, STOP_GRACE_SECONDS)
        if thread is not None:  # it saw the workers die: it ends the pool and returns
            thread.join()


@contextlib.contextmanager
def _signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM held back while the pool forks its workers: a child forked
    with them unblocked runs the parent's handlers until its initializer resets them,
    and a Ctrl-C to the process group then prints a KeyboardInterrupt traceback from
    ``ForkProcess-N``. The children inherit the blocked mask and unblock it in
    :func:`_init_worker` once their own handlers are set; the parent receives a signal
    that arrived meanwhile when the block ends."""
    block = getattr(signal, "pthread_sigmask", None)
    if block is None:  # pragma: no cover - not POSIX
        yield
        return
    old = block(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        block(signal.SIG_SETMASK, old)


def _stop_workers(pids: Any) -> None:
    """SIGTERM every registered worker (they may be mid-rank; their fragments are
    removed by the parent's cleanup)."""
    for pid in list(pids):
        if pid > 0:
            try:
                os.kill(pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass


def _kill_survivors(procs: List[Any], grace: float) -> None:
    """SIGKILL the pool's worker processes still alive ``grace`` seconds after the stop
    (interruptions only: the merge is abandoned, its fragments are removed anyway)."""
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(1.0)


#: Where :func:`parallel_map` sends its tasks instead of local worker processes while a
#: :func:`remote_backend` block runs (``cluster.dask_backend``: a Dask cluster), or None.
#: A context variable, not a parameter: the per-rank passes sit several calls below
#: the command or API call that chose the cluster, and each keeps its one ``jobs``.
Mapper = Callable[[Callable[..., Any], List[Tuple[Any, ...]]], Iterator[Any]]
_remote: contextvars.ContextVar[Optional[Mapper]] = contextvars.ContextVar("tracefuse_remote", default=None)


@contextlib.contextmanager
def remote_backend(mapper: Mapper) -> Iterator[None]:
    """Within this block :func:`parallel_map` calls ``mapper(fn, arglist)``, which must
    yield ``fn(*a) for a in arglist`` in that order as they arrive (so that
    ``parallel_map``'s ``each`` shares what results repeat before the next ones come
    in, as locally), raising the first task's error in task order as the local pool
    does. The merge's main stream
    (:func:`run_in_order`) stays local: it writes fragments to this machine's disk."""
    token = _remote.set(mapper)
    try:
        yield
    finally:
        _remote.reset(token)


def _call(fn_args: Tuple[Callable[..., Any], Tuple[Any, ...]], progress: Callable[[int], None]) -> Any:
    fn, args = fn_args
    return fn(*args)


def parallel_map(
    fn: Callable[..., R],
    arglist: List[Tuple[Any, ...]],
    jobs: int,
    each: Optional[Callable[[R], R]] = None,
) -> List[R]:
    """``[fn(*a) for a in arglist]``, in worker processes when ``jobs > 1``, or on the
    cluster of the enclosing :func:`remote_backend` block (``jobs`` then unused);
    ``each``: applied in this process to every result as it arrives (e.g. to share
    what results repeat, before the next one comes in)."""
    mapper = _remote.get()
    if mapper is not None and arglist:
        got: Iterable[R] = mapper(fn, arglist)
    else:
        got = run_in_order(_call, [(fn, a) for a in arglist], jobs, lambda n: None)
    return list(got) if each is None else [each(r) for r in got]


__all__ = [
    "Mapper",
    "check_jobs",
    "parallel_map",
    "remote_backend",
    "resolve_jobs",
    "run_in_order",
    "task_chunks",
    "usable_cores",
]

"""A whole run: one trace per rank of a job, hosts, clock offsets, file names, and the
bundled sample recipe.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from tracefuse_synth.common import DEFAULT_BASE_TIME_NS, PathLike
from tracefuse_synth.ranktrace import _start_offset_ns, write_rank_trace
from tracefuse_synth.schedule import WINDOW_SPREAD_NS

_EXT = {None: "", "gzip": ".gz", "zstd": ".zst"}


def _per_rank(value: Any, world_size: int, name: str) -> List[Any]:
    """Expand a scalar or a sequence cycled over ranks."""
    if value is None or isinstance(value, (str, int)):
        return [value] * world_size
    seq = list(value)
    if not seq:
        raise ValueError(f"{name} must not be empty")
    return [seq[r % len(seq)] for r in range(world_size)]


def _write_one(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    return write_rank_trace(**kwargs)


def write_run(
    out_dir: PathLike,
    world_size: int,
    *,
    mb_per_rank: Optional[float] = None,
    steps: Optional[int] = None,
    seed: int = 0,
    compress: Union[None, str, Sequence[Optional[str]]] = None,
    key_orders: Optional[Sequence[str]] = None,
    hosts: int = 1,
    host_clock_offsets_ns: Optional[Sequence[int]] = None,
    file_pattern: str = "{host}_{pid}.{rank}.pt.trace.json",
    kernel_jitter_ns: int = 0,
    gpus_per_host: Optional[int] = None,
    same_pid: bool = False,
    first_steps: Optional[Sequence[int]] = None,
    base_time_ns: int = DEFAULT_BASE_TIME_NS,
    rank_base_times_ns: Optional[Sequence[int]] = None,
    layers: int = 4,
    jobs: int = 1,
    compresslevel: Optional[int] = None,
    summaries: Optional[List[Dict[str, Any]]] = None,
    window_spread_ns: int = WINDOW_SPREAD_NS,
) -> List[Path]:
    """Write one trace per rank of a ``world_size`` job into ``out_dir``; return the
    paths in rank order.

    Ranks are split evenly over ``hosts`` (``host_name`` "node{h}", local GPU = rank's
    index on its host, host h's clock off by ``host_clock_offsets_ns[h]``).
    ``compress``, ``key_orders`` and ``first_steps`` may be sequences cycled over the
    ranks. With ``mb_per_rank`` rank 0 runs until it reaches the size and the other
    ranks then write the same number of steps, so every collective exists on every
    rank. ``file_pattern`` may use ``{host}``, ``{pid}``, ``{rank}``, ``{local_rank}``
    and ``{time_ns}`` (a per-rank pseudo time, for tensorboard-like names without the
    rank); ``.gz``/``.zst`` is appended for compressed files. ``jobs`` > 1 writes
    ranks in parallel processes (same bytes). ``summaries``, if given, receives each
    rank's summary dict. ``window_spread_ns``: how far apart the ranks' profilers
    start (``write_rank_trace``; widen it for thousands of ranks).
    """
    if (mb_per_rank is None) == (steps is None):
        raise ValueError("give exactly one of mb_per_rank and steps")
    per_host, gpus_per_host, offsets = _layout(world_size, hosts, gpus_per_host, host_clock_offsets_ns)
    comps = _per_rank(compress, world_size, "compress")
    orders = _per_rank(list(key_orders) if key_orders else "base_first", world_size, "key_orders")
    firsts = _per_rank(list(first_steps) if first_steps else 0, world_size, "first_steps")
    bases = (
        _per_rank(list(rank_base_times_ns), world_size, "rank_base_times_ns")
        if rank_base_times_ns
        else [base_time_ns] * world_size
    )
    start_ns = _run_start_ns(seed, bases)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    common = dict(world_size=world_size, seed=seed, gpus_per_host=gpus_per_host, kernel_jitter_ns=kernel_jitter_ns,
                  same_pid=same_pid, start_ns=start_ns, layers=layers, compresslevel=compresslevel,
                  window_spread_ns=window_spread_ns)  # fmt: skip
    all_kwargs = []
    for r in range(world_size):
        h, local = divmod(r, per_host)
        pid = 542 if same_pid else 11777 + r
        name = file_pattern.format(
            host=f"node{h}", pid=pid, rank=r, local_rank=local, time_ns=start_ns + 1_000_003 * (r + 1) * 7919
        )
        all_kwargs.append(
            dict(path=out / (name + _EXT[comps[r]]), rank=r, key_order=orders[r], base_time_ns=bases[r],
                 clock_offset_ns=offsets[h], host_name=f"node{h}", compress=comps[r], first_step=firsts[r],
                 cpu_pid=pid, device=local, **common)
        )  # fmt: skip
    if len({str(k["path"]) for k in all_kwargs}) != world_size:
        raise ValueError(f"file_pattern {file_pattern!r} gives the same name to two ranks")
    results = _write_ranks(all_kwargs, mb_per_rank, steps, jobs)
    if summaries is not None:
        summaries.extend(results)
    return [Path(k["path"]) for k in all_kwargs]


def _layout(
    world_size: int, hosts: int, gpus_per_host: Optional[int], host_clock_offsets_ns: Optional[Sequence[int]]
) -> Tuple[int, int, List[int]]:
    """``(ranks per host, GPUs per host, clock offset per host)``, checked."""
    if world_size < 1 or hosts < 1 or world_size % hosts:
        raise ValueError("world_size must be a positive multiple of hosts")
    per_host = world_size // hosts
    if gpus_per_host is None:
        gpus_per_host = max(8, per_host)
    if per_host > gpus_per_host:
        raise ValueError(f"{per_host} ranks per host do not fit on {gpus_per_host} GPUs")
    offsets = list(host_clock_offsets_ns or [0] * hosts)
    if len(offsets) != hosts:
        raise ValueError("host_clock_offsets_ns needs one value per host")
    return per_host, gpus_per_host, offsets


def _run_start_ns(seed: int, bases: List[int]) -> int:
    """The true start of the run's profiling window (epoch ns), shared by all ranks."""
    if len(set(bases)) == 1:
        return bases[0] + _start_offset_ns(seed)
    # Processes that started on two sides of a base period boundary: the profiled
    # window comes minutes after the latest base, in every rank's range.
    return max(bases) + random.Random(f"{seed}:start").randrange(60, 600) * 10**9


def _write_ranks(
    all_kwargs: List[Dict[str, Any]], mb_per_rank: Optional[float], steps: Optional[int], jobs: int
) -> List[Dict[str, Any]]:
    """Write every rank (rank 0 first when it sets the step count by size); in
    ``jobs`` processes when > 1 (same bytes). Returns the ranks' summaries."""
    results: List[Dict[str, Any]] = []
    if mb_per_rank is not None:
        first = write_rank_trace(**all_kwargs[0], target_bytes=int(mb_per_rank * 1_000_000))
        results.append(first)
        steps = first["n_steps"]
        rest = all_kwargs[1:]
    else:
        rest = all_kwargs
    for k in rest:
        k["steps"] = steps
    if jobs > 1 and len(rest) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(jobs, len(rest))) as ex:
            results.extend(ex.map(_write_one, rest))
    else:
        results.extend(_write_one(k) for k in rest)
    return results


#: The bundled sample (``fixtures/sample_run``): 4 ranks on 2 hosts, host 1's clock
#: 1.2 ms ahead, .json and .json.gz, all three key orders, a little kernel jitter.
SAMPLE = dict(
    world_size=4,
    steps=3,
    layers=1,
    hosts=2,
    host_clock_offsets_ns=[0, 1_200_000],
    compress=[None, "gzip", None, "gzip"],
    key_orders=["base_first", "base_after", "distinfo_after", "base_first"],
    kernel_jitter_ns=1500,
    gpus_per_host=8,
)


def sample_run(out_dir: PathLike, seed: int = 0) -> List[Path]:
    """Regenerate the bundled sample run (see ``fixtures/README.md``)."""
    return write_run(out_dir, seed=seed, **SAMPLE)  # type: ignore[arg-type]

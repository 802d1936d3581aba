"""Command line of the generator: ``python -m tracefuse_synth OUT_DIR ...``."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from tracefuse_synth.common import KEY_ORDERS
from tracefuse_synth.run import SAMPLE, write_run


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tracefuse_synth",
        description="Write a deterministic synthetic multi-rank Kineto trace run.",
    )
    p.add_argument("out_dir")
    p.add_argument("--ranks", type=int, default=None, help="world size (default 8)")
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--mb-per-rank", type=float, default=None, help="approximate uncompressed MB (1e6 bytes) per rank"
    )
    size.add_argument("--steps", type=int, default=None, help="training steps per rank")
    comp = p.add_mutually_exclusive_group()
    comp.add_argument("--gzip", action="store_const", dest="compress", const="gzip")
    comp.add_argument("--zstd", action="store_const", dest="compress", const="zstd")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hosts", type=int, default=1)
    p.add_argument(
        "--host-offset-us",
        type=float,
        default=0.0,
        help="clock offset of host h = h * this many microseconds",
    )
    p.add_argument(
        "--jitter-us", type=float, default=0.0, help="collective kernel end jitter, uniform in +-this"
    )
    p.add_argument(
        "--key-order",
        action="append",
        choices=KEY_ORDERS,
        default=None,
        help="top-level key order; repeat to cycle over ranks",
    )
    p.add_argument(
        "--window-spread-ms",
        type=float,
        default=0.3,
        help="the ranks' profilers start up to this far apart (default 0.3; thousands of ranks need "
        "more, e.g. 1000, or some share a start nanosecond, which the run check refuses)",
    )
    p.add_argument("--layers", type=int, default=4, help="transformer layers (events per step)")
    p.add_argument("--same-pid", action="store_true", help="every rank has CPU pid 542")
    p.add_argument("--gpus-per-host", type=int, default=None)
    p.add_argument("--pattern", default="{host}_{pid}.{rank}.pt.trace.json")
    p.add_argument("--jobs", type=int, default=1, help="parallel processes")
    p.add_argument(
        "--sample",
        action="store_true",
        help="write the bundled fixtures/sample_run recipe (ignores size options)",
    )
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line: ``python -m tracefuse_synth OUT_DIR --ranks 8 --mb-per-rank 64``."""
    p = _parser()
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    summaries: List[Dict[str, Any]] = []
    try:
        if a.sample:
            paths = write_run(a.out_dir, seed=a.seed, summaries=summaries, **SAMPLE)  # type: ignore[arg-type]
        else:
            if a.mb_per_rank is None and a.steps is None:
                p.error("give --mb-per-rank or --steps (or --sample)")
            world = 8 if a.ranks is None else a.ranks
            paths = write_run(
                a.out_dir,
                world,
                mb_per_rank=a.mb_per_rank,
                steps=a.steps,
                seed=a.seed,
                compress=a.compress,
                key_orders=a.key_order,
                hosts=a.hosts,
                host_clock_offsets_ns=[int(round(h * a.host_offset_us * 1000)) for h in range(a.hosts)],
                file_pattern=a.pattern,
                kernel_jitter_ns=int(round(a.jitter_us * 1000)),
                gpus_per_host=a.gpus_per_host,
                same_pid=a.same_pid,
                layers=a.layers,
                jobs=a.jobs,
                window_spread_ns=int(round(a.window_spread_ms * 1_000_000)),
                summaries=summaries,
            )
    except (ValueError, OSError) as e:
        print(f"synth: error: {e}", file=sys.stderr)
        return 2
    dt = time.perf_counter() - t0
    if not a.quiet:
        total = sum(s["bytes"] for s in summaries)
        for s in sorted(summaries, key=lambda s: s["rank"]):
            print(
                f"rank {s['rank']}: {s['path']}  {s['n_steps']} steps, {s['events']} events, "
                f"{s['bytes'] / 1e6:.1f} MB json, {s['file_bytes'] / 1e6:.1f} MB on disk"
            )
        print(
            f"{len(paths)} files, {total / 1e6:.1f} MB uncompressed in {dt:.1f} s "
            f"({total / 1e6 / max(dt, 1e-9):.1f} MB/s)"
        )
    return 0

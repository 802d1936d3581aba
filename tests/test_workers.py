"""Workers take consecutive ranks in chunks (tracefuse_stream/workers.py): one pool round trip
per chunk. The chunks cover every task once, in order, within their limits; a merge of
many small ranks with two workers writes the bytes of one worker; a rank that fails in
the middle of a chunk fails the merge with that rank's own error and leaves nothing."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import List, Optional

import pytest

from tracefuse_stream import merge
from tracefuse_stream.errors import TraceFuseError
from tracefuse_stream.workers import CHUNK_TASKS, CHUNK_WEIGHT, STOP_GRACE_SECONDS, run_in_order, task_chunks


@pytest.mark.parametrize(
    "n, jobs, weights",
    [
        (0, 2, None),
        (1, 2, None),
        (7, 2, None),
        (4000, 2, None),
        (4000, 8, None),
        (300, 2, [CHUNK_WEIGHT // 3] * 300),
        (50, 2, [10, CHUNK_WEIGHT * 2] * 25),
    ],
)
def test_chunks_cover_every_task_in_order(n: int, jobs: int, weights: Optional[List[int]]) -> None:
    chunks = task_chunks(n, jobs, weights)
    assert [i for a, b in chunks for i in range(a, b)] == list(range(n))
    assert all(b > a for a, b in chunks)
    assert len(chunks) >= min(n, 4 * jobs)  # every worker gets several chunks
    for a, b in chunks:
        assert b - a <= CHUNK_TASKS
        if weights is not None and b - a > 1:
            assert sum(weights[a:b]) <= CHUNK_WEIGHT
    if n == 4000 and jobs == 2:
        assert len(chunks) == 4000 // CHUNK_TASKS + (4000 % CHUNK_TASKS > 0)


def _ranks(folder: Path, n: int, broken: Optional[int] = None) -> Path:
    folder.mkdir()
    for r in range(n):
        events = [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"op{i}",
                "pid": 100 + r,
                "tid": 7,
                "ts": 10.5 * i + r,
                "dur": 3,
            }
            for i in range(5)
        ]
        text = json.dumps({"distributedInfo": {"rank": r, "world_size": n}, "traceEvents": events})
        if r == broken:
            text = text.replace('"dur": 3}', '"dur": 3,}', 1)  # invalid JSON in its events
        (folder / f"host.{r}.pt.trace.json").write_text(text + "\n")
    return folder


def _merge(inputs: Path, out: Path, jobs: int) -> Optional[str]:
    old = os.environ.pop("TRACEFUSE_VERIFY", None)
    try:
        merge([str(inputs)], str(out), jobs=jobs, force=True)
    except TraceFuseError as e:
        return str(e)
    finally:
        if old is not None:
            os.environ["TRACEFUSE_VERIFY"] = old
    return None


def test_many_small_ranks_same_bytes_with_two_workers(tmp_path: Path) -> None:
    run = _ranks(tmp_path / "run", 96)  # chunks of 12 ranks
    assert _merge(run, tmp_path / "j1.json", 1) is None
    assert _merge(run, tmp_path / "j2.json", 2) is None
    one = (tmp_path / "j1.json").read_bytes()
    assert one == (tmp_path / "j2.json").read_bytes()
    assert one.count(b'"name":"op4"') == 96


def test_a_rank_failing_inside_a_chunk(tmp_path: Path) -> None:
    run = _ranks(tmp_path / "run", 96, broken=41)
    errors = [_merge(run, tmp_path / f"j{jobs}.json", jobs) for jobs in (1, 2)]
    assert errors[0] is not None and errors[0] == errors[1]
    assert str(run / "host.41.pt.trace.json") in errors[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no output, no fragments


def _stubborn(task: int, progress: object) -> int:
    """A worker that ignores SIGTERM and does not finish (as one blocked on a lock that
    a SIGTERMed sibling held)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(30)
    return task


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def test_an_interruption_does_not_wait_for_a_stuck_worker() -> None:
    """Ctrl-C in the parent stops the workers; one that does not stop is killed after
    the grace period instead of holding the merge (and the user's terminal) forever."""
    prev = signal.signal(signal.SIGALRM, _interrupt)
    t0 = time.monotonic()
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        with pytest.raises(KeyboardInterrupt):
            list(run_in_order(_stubborn, [1, 2], 2, lambda n: None))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, prev)
    assert time.monotonic() - t0 < 1.0 + STOP_GRACE_SECONDS + 5, "the stuck workers were waited for"

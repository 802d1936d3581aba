"""Fault injection for the test suite: a signal at a chosen point of a merge.

Why this exists: the interruption tests (tests/test_faults.py) must deliver SIGINT or
SIGTERM to a merge *while it runs*, then check exit 130, one line, no output, no
temporary file and no surviving worker. Timing that from outside with sleeps is
flaky: a fast machine finishes before the signal, a slow or loaded one is still
importing. So the merge sends the signal to itself, at a point defined in bytes, not
seconds: once the progress callback (in the parent process, which with ``-j 2`` sees
the workers' byte counters) has counted ``N`` input bytes, it sends the signal once.
Every progress report happens before the output is committed, so with ``N`` below
the input size the signal always lands mid-merge, on any machine.

Switched on only by the environment variable::

    TRACEFUSE_TEST_SIGNAL_AFTER_BYTES="SIGINT:1000000"        # to this process
    TRACEFUSE_TEST_SIGNAL_AFTER_BYTES="SIGTERM:1000000:group" # to its process group
                                                              # (a terminal's Ctrl-C)

With ``TRACEFUSE_TEST_SIGNAL_LOG=FILE`` it first writes one JSON object to FILE: the
signal, the bytes counted, this pid and the pids of its live worker processes (so a
test can check that they are gone afterwards). Unset (always, outside the tests),
the cost is one dictionary lookup per progress report (every few MB).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import weakref
from typing import Dict, Optional, Tuple

ENV_SIGNAL = "TRACEFUSE_TEST_SIGNAL_AFTER_BYTES"
ENV_LOG = "TRACEFUSE_TEST_SIGNAL_LOG"

# bytes counted so far per progress object (one per merge); -1 once the signal was sent
_COUNTED: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()


def _parse(spec: str) -> Tuple[signal.Signals, int, bool]:
    """``"SIGINT:1000000[:group]"`` -> (signal, bytes, to the process group)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "group"):
        raise ValueError(f"{ENV_SIGNAL}={spec!r}: expected SIGNAME:BYTES or SIGNAME:BYTES:group")
    return signal.Signals[parts[0]], int(parts[1]), len(parts) == 3


def bytes_read(progress: object, n: int) -> None:
    """Count ``n`` more input bytes for the merge that owns ``progress``; send the
    configured signal once the count reaches the threshold (at most once)."""
    spec = os.environ.get(ENV_SIGNAL)
    if not spec:
        return
    sig, after, group = _parse(spec)
    done = _COUNTED.get(progress, 0)
    if done < 0:
        return
    done += n
    if done < after:
        _COUNTED[progress] = done
        return
    _COUNTED[progress] = -1
    log: Optional[str] = os.environ.get(ENV_LOG)
    if log:
        record: Dict[str, object] = {
            "signal": sig.name,
            "after_bytes": after,
            "bytes_read": done,
            "pid": os.getpid(),
            "workers": sorted(p.pid for p in multiprocessing.active_children() if p.pid is not None),
        }
        with open(log, "w", encoding="utf-8") as f:
            json.dump(record, f)
    if group:
        os.killpg(os.getpgrp(), sig)
    else:
        os.kill(os.getpid(), sig)

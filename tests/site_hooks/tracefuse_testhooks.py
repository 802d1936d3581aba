"""Test-only behaviour of a merge, installed by the test suite, never shipped.

Two switches the suite needs, which used to live in the package (issue 22, item 4:
nothing for tests in shipped code):

* ``TRACEFUSE_VERIFY=1``: every merge that was not told ``verify=`` explicitly is
  verified against its inputs (tests/conftest.py sets it for the whole session, so
  every merge the suite makes, in process or in a CLI subprocess, is checked). The
  library itself never reads this variable: ``merge(verify=None)`` does not verify.
* ``TRACEFUSE_TEST_SIGNAL_AFTER_BYTES="SIGINT:1000000[:group]"``: fault injection for
  tests/test_faults.py. Once the merge's progress callback (in the parent process,
  which with ``-j 2`` sees the workers' byte counters) has counted that many input
  bytes, the process sends itself the signal, once (``:group``: to its process group,
  like a terminal's Ctrl-C). Defined in bytes, not seconds, so the signal lands
  mid-merge on a fast machine as on a slow one. With ``TRACEFUSE_TEST_SIGNAL_LOG=FILE``
  it first writes one JSON object to FILE: the signal, the bytes counted, this pid and
  the pids of its live worker processes.

How they reach a merge: in the pytest process, conftest calls :func:`install`. A CLI
subprocess (``python -m tracefuse_stream``) finds ``sitecustomize.py`` beside this file
on ``PYTHONPATH`` (conftest puts it there), which calls :func:`install_lazily`: the
patches are applied when the package's modules are first imported, so a subprocess
that never imports the package pays nothing, and one that does is patched before it
can call anything.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.machinery
import json
import multiprocessing
import os
import signal
import sys
import weakref
from types import ModuleType
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

ENV_VERIFY = "TRACEFUSE_VERIFY"
ENV_SIGNAL = "TRACEFUSE_TEST_SIGNAL_AFTER_BYTES"
ENV_LOG = "TRACEFUSE_TEST_SIGNAL_LOG"

ORCHESTRATE = "tracefuse_stream.pipeline.orchestrate"
PROGRESS = "tracefuse_stream.pipeline.progress"

# bytes counted so far per progress object (one per merge); -1 once the signal was sent
_COUNTED: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()


# --------------------------------------------------------------------------- the signal
def parse_signal_spec(spec: str) -> Tuple[signal.Signals, int, bool]:
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
    sig, after, group = parse_signal_spec(spec)
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


def patch_progress(module: ModuleType) -> None:
    """Wrap ``Progress.__call__`` so that every progress report is counted first."""
    cls = module.Progress
    if getattr(cls.__call__, "_tracefuse_test_hook", False):
        return
    real = cls.__call__

    def counted(self: Any, n: int) -> None:
        bytes_read(self, n)
        real(self, n)

    counted._tracefuse_test_hook = True  # type: ignore[attr-defined]
    cls.__call__ = counted


# --------------------------------------------------------------------------- verify
def patch_orchestrate(module: ModuleType) -> None:
    """Wrap the one merge of one output (``_merge``): with ``TRACEFUSE_VERIFY=1`` read
    at call time, a merge not told ``verify=`` explicitly is verified."""
    real = module._merge
    if getattr(real, "_tracefuse_test_hook", False):
        return

    def merge_verified(inputs: Any, output: Any, opts: Any) -> Any:
        if opts.output.verify is None and os.environ.get(ENV_VERIFY) == "1":
            opts = dataclasses.replace(opts, output=dataclasses.replace(opts.output, verify=True))
        return real(inputs, output, opts)

    merge_verified._tracefuse_test_hook = True  # type: ignore[attr-defined]
    module._merge = merge_verified


PATCHES: Dict[str, Callable[[ModuleType], None]] = {ORCHESTRATE: patch_orchestrate, PROGRESS: patch_progress}


def install() -> None:
    """Patch the package in this process now (the pytest process)."""
    import importlib

    for name, patch in PATCHES.items():
        patch(importlib.import_module(name))


# --------------------------------------------------------------------------- subprocesses
class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, real: importlib.abc.Loader, patch: Callable[[ModuleType], None]) -> None:
        self.real = real
        self.patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self.real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.real.exec_module(module)
        self.patch(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... as the real one
        return getattr(self.real, name)


class _PatchingFinder(importlib.abc.MetaPathFinder):
    """Finds the modules in :data:`PATCHES` like the normal path finder does, and
    patches each right after it has run."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


def install_lazily() -> None:
    """Patch the package's modules when (and if) this process imports them."""
    if any(isinstance(f, _PatchingFinder) for f in sys.meta_path):
        return
    for name, patch in PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, _PatchingFinder())

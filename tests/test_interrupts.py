"""Interrupting a -j2 merge at several moments, and closing its pipe: never a traceback.

Issue 28, item 5: Ctrl-C or SIGTERM about a second into a -j2 merge printed
``Exception in thread Thread-1: ... InvalidStateError: CANCELLED`` in 6 of 8 runs, and
``merge -o - | head -c 100`` in 4 of 5. test_faults.py lands its signal after a count of
bytes (one moment, reproducible); here the same merge is interrupted at moments measured
in seconds from when it starts reading its inputs — start, planning, streaming, late —
and every run is counted: exit 130, one line on stderr, nothing left in the output
directory, no worker left alive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
from conftest import default_sigint

from tracefuse_synth.run import write_run

RANKS = 8
REPEAT = 8  # each rank's events this many times: a -j2 merge reads them for ~2 s here
# when to interrupt: these parts of a whole merge's time after it opened its first input
# (measured here: ~2 s on 2 idle cores, so about 0, 0.3, 0.6, 1.0 and 1.4 s), so that every
# moment lands mid-merge on a fast machine as on a loaded one
MOMENTS = (0.0, 0.15, 0.3, 0.5, 0.7)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 plain ranks of ~18 MB: a small synthetic run whose events are repeated (the
    generator writes 2 MB per rank in ~0.1 s; copying bytes is faster than generating)."""
    src = tmp_path_factory.mktemp("small")
    write_run(src, RANKS, mb_per_rank=2, seed=5)
    big = tmp_path_factory.mktemp("big")
    for p in sorted(src.iterdir()):
        raw = p.read_bytes()
        i = raw.index(b"[", raw.index(b'"traceEvents"')) + 1
        j = raw.rindex(b"]")
        body = raw[i:j].strip()
        (big / p.name).write_bytes(raw[:i] + b"\n" + b",\n".join([body] * REPEAT) + b"\n" + raw[j:])
    return big


def _env() -> Dict[str, str]:
    env = dict(os.environ)
    for k in ("TRACEFUSE_DEBUG", "TRACEFUSE_VERIFY", "TRACEFUSE_TEST_SIGNAL_AFTER_BYTES"):
        env.pop(k, None)
    return env


def _reading(pid: int, inputs: Path, timeout: float = 20.0) -> None:
    """Wait until process ``pid`` or one of its workers has a file of ``inputs`` open:
    the interpreter's own start-up (site imports, before any of this package runs) is
    not what is tested. (The parent's own reads, the planner's look at each file's
    first KiBs, are over in well under a millisecond a file: the workers hold the
    inputs open while they merge them.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in [pid, *_children(pid)]:
            try:
                if any(os.readlink(fd).startswith(str(inputs)) for fd in Path(f"/proc/{proc}/fd").iterdir()):
                    return
            except OSError:  # an fd closed while looking, or the process is gone
                pass
        time.sleep(0.005)
    raise AssertionError(f"the merge never opened an input within {timeout} s")


def _children(pid: int) -> List[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _interrupt(
    run_dir: Path, out: Path, sig: signal.Signals, moment: float, group: bool
) -> Optional[Tuple[int, str, List[int]]]:
    """Signal the merge ``moment`` s after it opened an input: (exit code, stderr,
    workers); None when it ended before that moment (the machine was faster than when
    the whole merge was timed: the caller tries an earlier moment)."""
    p = subprocess.Popen(
        [sys.executable, "-m", "tracefuse_stream", "merge", str(run_dir), "-j", "2", "-q", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_env(),
        start_new_session=True,
        preexec_fn=default_sigint,  # SIGINT delivered even when the suite ignores it
    )
    try:
        _reading(p.pid, run_dir)
        time.sleep(moment)
        workers = _children(p.pid)
        if p.poll() is not None:
            return None
        if group:  # a terminal's Ctrl-C: the whole process group
            os.killpg(p.pid, sig)
        else:
            p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, err.decode("utf-8", "replace"), workers


# (signal, part of the merge's time after the first input was opened, to the process group)
CASES = [(signal.SIGINT, m, group) for m, group in zip(MOMENTS, (1, 0, 1, 0, 1))] + [
    (signal.SIGTERM, 0.15, 1),
    (signal.SIGTERM, 0.5, 0),
    (signal.SIGTERM, 0.7, 1),
]


def _whole_merge_seconds(run_dir: Path, out: Path) -> float:
    """How long the -j2 merge runs after opening its first input, uninterrupted."""
    p = subprocess.Popen(
        [sys.executable, "-m", "tracefuse_stream", "merge", str(run_dir), "-j", "2", "-q", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    _reading(p.pid, run_dir)
    t0 = time.monotonic()
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    return time.monotonic() - t0


def test_interrupting_a_j2_merge_at_several_moments(tmp_path: Path, run_dir: Path) -> None:
    whole = _whole_merge_seconds(run_dir, tmp_path / "whole.json")
    print(f"the whole -j2 merge: {whole:.2f} s after opening its first input")
    results = []
    for n, (sig, part, group) in enumerate(CASES):
        moment = round(part * whole, 2)
        outdir = tmp_path / f"out{n}"
        outdir.mkdir()
        for _try in range(4):
            got = _interrupt(run_dir, outdir / "m.json", sig, moment, bool(group))
            if got is not None and got[0] != 0:
                break
            # the merge was done before the signal (got None), or by the time it came (its
            # exit, exit 0 with the whole output: a signal then is ignored): earlier
            got = None
            for left in outdir.iterdir():
                left.unlink()  # the finished merge's output
            moment = round(moment / 2, 3)
        assert got is not None, f"{sig.name}: the merge ended before {moment} s each time"
        code, err, workers = got
        results.append((sig.name, moment, group, code, err, sorted(os.listdir(outdir)), workers))
    tracebacks = [r for r in results if "Traceback" in r[4] or "Exception" in r[4]]
    print(f"{len(tracebacks)} traceback(s) in {len(results)} interrupted -j2 merges")
    assert tracebacks == []
    for name, moment, group, code, err, left, workers in results:
        what = f"{name} at {moment} s{' to the group' if group else ''}"
        verb = "interrupted (SIGINT)" if name == "SIGINT" else "terminated (SIGTERM)"
        assert code == 130, f"{what}: exit {code}: {err}"
        assert err == f"tracefuse: error: {verb}; no output written\n", f"{what}: {err!r}"
        assert left == [], f"{what}: left behind {left}"
        deadline = time.monotonic() + 10
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not [w for w in workers if _alive(w)], f"{what}: workers survived"


def test_closed_pipe_of_a_j2_merge(tmp_path: Path, run_dir: Path) -> None:
    """``merge -o - | head -c 100``: exit 141 (as cat), nothing on stderr, no fragment."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    for _ in range(2):
        p = subprocess.Popen(
            [sys.executable, "-m", "tracefuse_stream", "merge", str(run_dir), "-j", "2", "-o", "-"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(_env(), TMPDIR=str(tmp)),
        )
        assert p.stdout is not None and p.stderr is not None
        head = p.stdout.read(100)
        p.stdout.close()
        err = p.stderr.read().decode()
        assert p.wait(60) == 141, err
        assert err == "" and head.startswith(b"{")
        assert list(tmp.iterdir()) == []


def test_a_signal_after_the_command_is_over_leaves_its_status() -> None:
    """The process entry (``python -m``, the ``tracefuse`` script) ignores SIGINT and
    SIGTERM once the command has returned: a signal during the interpreter's exit
    would end a finished command by the signal (-2, -15, no message). ``main(argv)``
    in-process leaves the handlers as they were."""
    probe = (
        "import signal, sys\n"
        "from tracefuse_stream.cli import entry, main\n"
        "before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)\n"
        "assert main(['--version']) == 0\n"
        "assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before\n"
        "sys.argv = ['tracefuse', '--version']\n"
        "code = entry()\n"
        "assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN, 'SIGTERM'\n"
        "assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN, 'SIGINT'\n"
        "import os\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "sys.exit(code)\n"
    )
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_env(), timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("tracefuse-stream ")

"""Issue 4: faults while writing, interruptions, and inputs that must stay untouched.

* Disk full / write errors (simulated by wrapping the engine's output and fragment
  files so that a write raises ``OSError(ENOSPC)`` after N bytes, plus a real
  ``/dev/full`` stdout): exit 3 with one line, nothing under the output name, no
  temporary file or fragment directory left.
* SIGINT / SIGTERM in the middle of a merge (of an input made here from the real
  events of the recorded ddp4 job): exit 130, one line, no traceback, no output, no
  temp file, and with ``-j 2`` no worker process left alive. The merge signals
  itself after N input bytes (tests/site_hooks/tracefuse_testhooks.py, a test-only
  patch of its progress callback, not shipped code), so the
  signal lands mid-merge on a fast machine as on a slow one: no sleeps.
* Inputs are never opened for writing (checked by recording opens, and by mtime and
  content hash), and ``-o`` naming an input is refused (exit 3).

The inputs are the real Kineto traces recorded in tests/data/recorded/ddp4: what is
tested here is I/O and signal handling, which does not depend on which real job is
merged, so the shared GPU traces are not needed.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import pytest
from conftest import default_sigint
from tracefuse_testhooks import ENV_LOG, ENV_SIGNAL

import tracefuse_stream.write.codecs as codecs_mod
import tracefuse_stream.write.writer as writer_mod
from tracefuse_stream.cli.app import main as cli_main


@pytest.fixture(scope="session")
def ddp_files(rec_ddp4_by_rank: Dict[int, Path]) -> Dict[int, Path]:
    """rank -> file of the recorded 4-rank job (ranks from distributedInfo)."""
    return rec_ddp4_by_rank


def cli(*args: Any) -> Tuple[int, str, str]:
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = cli_main([str(a) for a in args])
    return rc, o.getvalue(), e.getvalue()


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected ONE line on stderr:\n{err}"
    assert "Traceback" not in err
    assert lines[0].startswith("tracefuse: "), lines[0]
    return lines[0]


def leftovers(d: Path) -> List[str]:
    return sorted(
        p.name
        for p in d.iterdir()
        if p.name.endswith(".tracefuse-tmp") or p.name.startswith(".tracefuse-frag-")
    )


def assert_nothing_left(out: Path) -> None:
    assert not out.exists(), f"{out} exists after a failed merge"
    assert not leftovers(out.parent), f"temporary files left: {leftovers(out.parent)}"


# --------------------------------------------------------------------------- disk full
class FullDisk:
    """A file object that accepts ``limit`` bytes, then fails like a full disk
    (writing the part that still fits first, as write(2) does). With
    ``fail_flush`` the writes succeed and the final flush fails (buffered data)."""

    def __init__(self, f: Any, limit: int, fail_flush: bool = False) -> None:
        self._f = f
        self.limit = limit
        self.written = 0
        self.fail_flush = fail_flush

    def flush(self) -> None:
        if self.fail_flush:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._f.flush()

    def write(self, data: Any) -> int:
        data = bytes(data)
        room = self.limit - self.written
        if len(data) > room:
            if room > 0:
                self._f.write(data[:room])
                self.written += room
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.written += len(data)
        return self._f.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def _full_output(monkeypatch: pytest.MonkeyPatch, limit: int, fail_flush: bool = False) -> None:
    orig = writer_mod.AtomicOutput.__init__

    def init(self: Any, *a: Any, **k: Any) -> None:
        orig(self, *a, **k)
        if self.file is not None and not self.stdout:
            self.file = FullDisk(self.file, limit, fail_flush)

    monkeypatch.setattr(writer_mod.AtomicOutput, "__init__", init)


@pytest.fixture(scope="module")
def full_size(tmp_path_factory: pytest.TempPathFactory, ddp_files: Dict[int, Path]) -> Dict[str, int]:
    """Size of the complete outputs the disk-full tests cut short."""
    d = tmp_path_factory.mktemp("full")
    sizes = {}
    for ext in (".json", ".json.gz"):
        out = d / ("m" + ext)
        rc, _o, err = cli("merge", ddp_files[0], ddp_files[1], "-o", out, "-q", "-j", "1")
        assert rc == 0, err
        sizes[ext] = out.stat().st_size
    return sizes


@pytest.mark.parametrize("ext", [".json", ".json.gz"])
@pytest.mark.parametrize("where", ["nothing_fits", "in_head", "in_events", "in_tail", "at_flush"])
def test_disk_full_while_writing_the_output(tmp_path, monkeypatch, ddp_files, full_size, ext, where):
    size = full_size[ext]
    limit = {
        "nothing_fits": 0,
        "in_head": 20,
        "in_events": size // 2,
        "in_tail": size - 40,
        "at_flush": 1 << 40,
    }[where]
    _full_output(monkeypatch, limit, fail_flush=where == "at_flush")
    out = tmp_path / ("merged" + ext)
    rc, _o, err = cli("merge", ddp_files[0], ddp_files[1], "-o", out, "-q", "-j", "1")
    assert rc == 3, err
    line = one_line(err)
    assert "No space left on device" in line, line
    assert_nothing_left(out)


@pytest.mark.parametrize("where", ["in_events", "at_flush"])
def test_disk_full_message_names_the_output(tmp_path, monkeypatch, ddp_files, full_size, where):
    """``tracefuse: error: FILE: what is wrong`` holds for output errors too: with
    several outputs (--split-ranks) or a default -o, the user must see which file."""
    _full_output(
        monkeypatch,
        full_size[".json"] // 2 if where == "in_events" else 1 << 40,
        fail_flush=where == "at_flush",
    )
    out = tmp_path / "merged.json"
    rc, _o, err = cli("merge", ddp_files[0], ddp_files[1], "-o", out, "-q", "-j", "1")
    assert rc == 3, err
    line = one_line(err)
    assert str(out) in line, f"the message should name the output file: {line}"


def test_disk_full_api_raises_output_error(tmp_path, monkeypatch, ddp_files):
    from tracefuse_stream import merge
    from tracefuse_stream.errors import OutputError

    _full_output(monkeypatch, 5000)
    out = tmp_path / "merged.json.zst"
    with pytest.raises(OutputError):
        merge([ddp_files[0], ddp_files[1]], str(out), jobs=1)
    assert_nothing_left(out)


@pytest.mark.parametrize("jobs", [1, 2])
def test_disk_full_while_writing_rank_fragments(tmp_path, monkeypatch, ddp_files, jobs):
    """Fragments hold the bulk of the data, so that is where a disk fills up: still
    an output error (exit 3), not an internal error; forked workers inherit the fault."""
    real_open = builtins.open

    def fake_open(file: Any, mode: str = "r", *a: Any, **k: Any) -> Any:
        f = real_open(file, mode, *a, **k)
        if "w" in mode and ".tracefuse-frag-" in str(file):
            return FullDisk(f, 10_000)
        return f

    monkeypatch.setattr(codecs_mod, "open", fake_open, raising=False)
    out = tmp_path / "merged.json.gz"
    rc, _o, err = cli("merge", ddp_files[0], ddp_files[1], "-o", out, "-q", "-j", jobs)
    assert rc == 3, f"exit {rc}: {err}"
    line = one_line(err)
    assert "No space left on device" in line
    assert_nothing_left(out)


def test_fsync_error_at_commit(tmp_path, monkeypatch, ddp_files):
    def bad_fsync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(writer_mod.os, "fsync", bad_fsync)
    out = tmp_path / "merged.json"
    rc, _o, err = cli("merge", ddp_files[0], "-o", out, "-q", "-j", "1")
    assert rc == 3, err
    line = one_line(err)
    assert str(out) in line and "error" in line.lower()
    assert_nothing_left(out)


def test_rename_error_at_commit(tmp_path, monkeypatch, ddp_files):
    def bad_replace(a: Any, b: Any) -> None:
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(writer_mod.os, "replace", bad_replace)
    out = tmp_path / "merged.json"
    rc, _o, err = cli("merge", ddp_files[0], "-o", out, "-q", "-j", "1")
    assert rc == 3, err
    assert str(out) in one_line(err)
    assert_nothing_left(out)


def test_output_directory_missing_or_output_is_a_directory(tmp_path, ddp_files):
    out = tmp_path / "no_such_dir" / "merged.json"
    rc, _o, err = cli("merge", ddp_files[0], "-o", out, "-q")
    assert rc == 3, err
    assert str(out) in one_line(err)
    assert not out.parent.exists()
    d = tmp_path / "adir.json"
    d.mkdir()
    for extra in ((), ("--force",)):
        rc, _o, err = cli("merge", ddp_files[0], "-o", d, "-q", *extra)
        assert rc == 3, err
        assert str(d) in one_line(err)
        assert d.is_dir() and not any(d.iterdir())
        assert not leftovers(tmp_path)


def test_existing_output_needs_force(tmp_path, ddp_files):
    out = tmp_path / "merged.json"
    out.write_bytes(b"precious")
    rc, _o, err = cli("merge", ddp_files[0], "-o", out, "-q")
    assert rc == 3, err
    assert "--force" in one_line(err)
    assert out.read_bytes() == b"precious"
    assert not leftovers(tmp_path)
    rc, _o, err = cli("merge", ddp_files[0], "-o", out, "-q", "--force")
    assert rc == 0, err
    assert out.read_bytes() != b"precious"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_stdout_on_a_full_device(tmp_path, ddp_files):
    """A real ENOSPC: ``-o -`` with stdout on /dev/full."""
    env = dict(os.environ)
    env.pop("TRACEFUSE_DEBUG", None)
    with open("/dev/full", "wb") as full:
        p = subprocess.run(
            [sys.executable, "-m", "tracefuse_stream", "merge", str(ddp_files[0]), "-o", "-", "-j", "1"],
            stdout=full,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
        )
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode == 3, err
    assert "No space left on device" in one_line(err)


# --------------------------------------------------------------------------- signals
REPEAT = 24  # ~9 MB per rank: a few progress reports (every 4 MB read) per rank


@pytest.fixture(scope="module")
def big_inputs(tmp_path_factory: pytest.TempPathFactory, ddp_files: Dict[int, Path]):
    """Two plain ~9 MB rank files: the real header and trailer of ranks 0 and 1 around
    their real events repeated (plain JSON: bytes read = bytes on disk)."""
    d = tmp_path_factory.mktemp("big")
    paths = []
    for r in (0, 1):
        raw = gzip.decompress(ddp_files[r].read_bytes())
        i = raw.index(b"[", raw.index(b'"traceEvents"')) + 1
        j = raw.rindex(b"]")
        body = raw[i:j].strip()
        p = d / f"big{r}.json"
        with open(p, "wb") as f:
            f.write(raw[:i] + b"\n")
            for k in range(REPEAT):
                if k:
                    f.write(b",\n")
                f.write(body)
            f.write(b"\n" + raw[j:])
        paths.append(p)
    yield paths
    shutil.rmtree(d, ignore_errors=True)


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _run_signalled(args: Sequence[Any], spec: str, log: Path) -> Tuple[subprocess.Popen, str]:
    """Run the CLI in its own session with the signal hook armed; (process, stderr)."""
    env = dict(os.environ)
    env.pop("TRACEFUSE_DEBUG", None)
    # the merge alone: a verify pass after the commit is not what is interrupted here
    env.pop("TRACEFUSE_VERIFY", None)
    env[ENV_SIGNAL] = spec
    env[ENV_LOG] = str(log)
    p = subprocess.Popen(
        [sys.executable, "-m", "tracefuse_stream", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
        preexec_fn=default_sigint,  # SIGINT delivered even when the suite ignores it
    )
    try:
        _out, err_b = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p, err_b.decode("utf-8", "replace")


SIGNAL_CASES = [
    # (signal, jobs, to the whole process group like a terminal's Ctrl-C, output)
    ("SIGINT", 1, False, "m.json.gz"),
    ("SIGTERM", 1, False, "m.json.zst"),
    ("SIGINT", 2, True, "m.json.gz"),
    ("SIGINT", 2, False, "m.json"),
    ("SIGTERM", 2, False, "m.json.gz"),
    ("SIGTERM", 2, True, "m.json.zst"),
]


@pytest.mark.parametrize("signame,jobs,group,name", SIGNAL_CASES)
def test_signal_mid_merge(tmp_path, big_inputs, signame, jobs, group, name):
    total = sum(p.stat().st_size for p in big_inputs)
    after = total // 3  # inside rank 0 (-j 1) / while both workers stream (-j 2)
    outdir = tmp_path / "out"
    outdir.mkdir()
    out = outdir / name
    log = tmp_path / "signal.json"
    spec = f"{signame}:{after}" + (":group" if group else "")
    p, err = _run_signalled(["merge", *big_inputs, "-o", out, "-j", jobs], spec, log)
    assert log.exists(), f"the merge never counted {after} bytes (exit {p.returncode}): {err}"
    sent = json.loads(log.read_text())
    assert sent["signal"] == signame and sent["pid"] == p.pid
    assert after <= sent["bytes_read"] <= total, sent  # mid-merge: before the commit
    workers = sent["workers"]
    if jobs > 1:
        assert len(workers) == 2, f"expected 2 live worker processes when the signal came: {sent}"
    else:
        assert workers == []
    assert p.returncode == 130, f"exit {p.returncode}: {err}"
    line = one_line(err)
    assert ("interrupt" in line) if signame == "SIGINT" else ("terminat" in line), line
    assert_nothing_left(out)
    assert sorted(x.name for x in outdir.iterdir()) == []
    # the parent has exited; its workers must be gone too (reaped or at least dead)
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [w for w in workers if _alive(w)], "worker processes survived the interrupt"


def test_signal_hook_is_inert_without_its_variable(tmp_path, big_inputs, monkeypatch):
    """Control for the test above: the same merge, hook unset, completes (exit 0);
    the hook is the suite's patch of the progress callback, not in the package."""
    import tracefuse_stream.pipeline.progress as progress_mod

    monkeypatch.delenv(ENV_SIGNAL, raising=False)
    assert getattr(progress_mod.Progress.__call__, "_tracefuse_test_hook", False)
    out = tmp_path / "m.json"
    rc, _o, err = cli("merge", *big_inputs, "-o", out, "-q", "-j", "1")
    assert rc == 0, err
    assert out.stat().st_size > 0 and not leftovers(tmp_path)


def test_sigterm_before_the_output_phase(tmp_path, monkeypatch, ddp_files):
    """SIGTERM while the inputs are still being scanned (``--window`` reads every
    rank before anything is written) is an interruption too: exit 130, one line.
    The signal is sent from inside the window computation, after the scan of every
    rank and before any output exists (in process: deterministic, no sleep)."""
    import tracefuse_stream.pipeline.sidepasses as window_mod  # where the merge looks it up

    outdir = tmp_path / "out"
    outdir.mkdir()
    out = outdir / "m.json.gz"
    real = window_mod.window_from_ms
    seen: List[List[str]] = []

    def scanned_then_terminated(*a: Any, **k: Any) -> Any:
        seen.append(sorted(x.name for x in outdir.iterdir()))
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*a, **k)

    def unhandled(signum: int, frame: Any) -> None:
        raise AssertionError("the merge did not handle SIGTERM itself")

    monkeypatch.setattr(window_mod, "window_from_ms", scanned_then_terminated)
    prev = signal.signal(signal.SIGTERM, unhandled)
    try:
        rc, _o, err = cli("merge", *(ddp_files[r] for r in range(4)), "-o", out, "-j", "1", "--window", "0:5")
    finally:
        signal.signal(signal.SIGTERM, prev)
    assert seen == [[]], f"the window was computed {len(seen)} times / after writing began: {seen}"
    assert rc == 130, f"exit {rc}: {err!r}"
    assert "terminat" in one_line(err)
    assert_nothing_left(out)


# --------------------------------------------------------------------------- inputs stay untouched
def _fingerprint(paths: Sequence[Path]) -> Dict[str, Tuple[int, int, str]]:
    return {
        str(p): (p.stat().st_mtime_ns, p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in paths
    }


@pytest.fixture
def run_dir(tmp_path: Path, ddp_files: Dict[int, Path]) -> Path:
    """A copy of real inputs (never the originals: a bug must not damage them)."""
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(ddp_files[0], d / "rank0.pt.trace.json.gz")
    shutil.copy(ddp_files[1], d / "rank1.pt.trace.json.gz")
    (d / "rank2.json").write_bytes(gzip.decompress(ddp_files[2].read_bytes()))
    return d


def test_inputs_are_never_opened_for_writing(tmp_path, monkeypatch, run_dir):
    inputs = sorted(run_dir.iterdir())
    watched = {os.path.realpath(p) for p in inputs}
    bad: List[str] = []
    real_open, real_os_open = builtins.open, os.open

    def is_input(f: Any) -> bool:
        try:
            return isinstance(f, (str, bytes, os.PathLike)) and os.path.realpath(f) in watched
        except (TypeError, ValueError):
            return False

    def rec_open(file: Any, mode: str = "r", *a: Any, **k: Any) -> Any:
        if is_input(file) and any(c in mode for c in "wax+"):
            bad.append(f"open({file}, {mode!r})")
        return real_open(file, mode, *a, **k)

    def rec_os_open(path: Any, flags: int, *a: Any, **k: Any) -> Any:
        if is_input(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC | os.O_CREAT):
            bad.append(f"os.open({path}, {flags:#x})")
        return real_os_open(path, flags, *a, **k)

    def guard(name: str) -> None:
        orig = getattr(os, name)

        def g(*a: Any, **k: Any) -> Any:
            if any(is_input(x) for x in a):
                bad.append(f"os.{name}{a}")
            return orig(*a, **k)

        monkeypatch.setattr(os, name, g)

    monkeypatch.setattr(builtins, "open", rec_open)
    monkeypatch.setattr(os, "open", rec_os_open)
    for name in ("replace", "rename", "unlink", "remove", "truncate", "utime", "chmod"):
        guard(name)
    before = _fingerprint(inputs)
    outdir = tmp_path / "o"
    outdir.mkdir()
    for args in (
        [run_dir, "-o", outdir / "a.json.gz"],
        [run_dir, "-o", outdir / "a.json.gz", "--force", "--salvage"],
        [*inputs, "-o", outdir / "b.json", "--rank-from", "order", "--include-pyfunc"],
        [run_dir, "-o", outdir / "c.json.zst", "--split-ranks", "2"],
    ):
        rc, _o, err = cli("merge", *args, "-q", "-j", "1")
        assert rc == 0, err
    for target in (inputs[0], inputs[2]):
        rc, _o, err = cli("merge", run_dir, "-o", target, "-q", "-j", "1", "--force")
        assert rc == 3, err
    assert not bad, f"inputs touched for writing: {bad}"
    assert _fingerprint(inputs) == before


def test_output_naming_an_input_is_refused(tmp_path, run_dir, monkeypatch):
    inputs = sorted(run_dir.iterdir())
    before = _fingerprint(inputs)
    monkeypatch.chdir(run_dir)
    link = tmp_path / "link.json.gz"
    link.symlink_to(inputs[0])
    spellings = [
        ([run_dir], inputs[0]),  # found through the directory
        ([inputs[1]], inputs[1]),  # the same path
        ([inputs[1]], Path(inputs[1].name)),  # relative spelling (cwd is run_dir)
        ([inputs[2]], Path("..") / "run" / inputs[2].name),
        ([inputs[0]], link),  # a symlink to the input
    ]
    for ins, target in spellings:
        for extra in ((), ("--force",)):
            rc, _o, err = cli("merge", *ins, "-o", target, "-q", "-j", "1", *extra)
            assert rc == 3, f"-o {target} for inputs {ins}: exit {rc} {err}"
            line = one_line(err)
            assert "input" in line, line
    assert link.is_symlink()
    assert not leftovers(run_dir) and not leftovers(tmp_path)
    assert _fingerprint(inputs) == before


def test_inputs_unchanged_by_subprocess_merges(tmp_path, run_dir):
    """The same through the command line, with workers, salvage and failures."""
    inputs = sorted(run_dir.iterdir())
    before = _fingerprint(inputs)
    hard = tmp_path / "hard.json.gz"
    os.link(inputs[0], hard)
    env = dict(os.environ)
    env.pop("TRACEFUSE_DEBUG", None)

    def run(*args: Any) -> int:
        p = subprocess.run(
            [sys.executable, "-m", "tracefuse_stream", "merge", *map(str, args), "-q"],
            capture_output=True,
            env=env,
            timeout=120,
        )
        assert "Traceback" not in p.stderr.decode("utf-8", "replace")
        return p.returncode

    assert run(run_dir, "-o", tmp_path / "m.json.gz", "-j", "2") == 0
    assert run(run_dir, "-o", tmp_path / "m.json.gz", "-j", "2", "--force", "--salvage") == 0
    assert run(run_dir, "-o", inputs[1], "-j", "2", "--force") == 3
    # a hard link to an input: refusing is fine, replacing the link name is fine,
    # writing into the shared inode is not
    assert run(inputs[0], "-o", hard, "--force") in (0, 3)
    assert _fingerprint(inputs) == before

"""Output targets as users write them: devices and FIFOs in place (never replaced),
stdout into ``| head`` (quiet, exit 141 like ``cat``), the JSON summary off stdout,
clear usage errors for names the tool cannot honour, names near NAME_MAX.

Inputs: the bundled sample run and, where recorded, the real ddp4 job of
tests/data/recorded (both always in the repository)."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import List

import pytest
from conftest import REPO, decompress_bytes, load_output, run_cli, strict_loads

from tracefuse_stream.write.atomic import TMP_SUFFIX, owner_tag, temp_prefix

SAMPLE = REPO / "fixtures" / "sample_run"
RECORDED_DDP4 = REPO / "tests" / "data" / "recorded" / "ddp4"
NO_VERIFY = {"TRACEFUSE_VERIFY": "0"}  # a device or FIFO cannot be read back


def _inputs() -> List[Path]:
    rec = sorted(RECORDED_DDP4.glob("*.json.gz"))
    return rec if len(rec) == 4 else [SAMPLE]


def _leftovers(d: Path) -> List[str]:
    return [
        p.name for p in d.iterdir() if p.name.endswith(TMP_SUFFIX) or p.name.startswith(".tracefuse-frag-")
    ]


def test_dev_null_is_written_in_place_and_stays_a_device() -> None:
    before = os.stat("/dev/null")
    for extra in ([], ["--force"]):  # a character device holds no data: no --force needed
        p = run_cli("merge", SAMPLE, "-o", "/dev/null", "-q", *extra, env=NO_VERIFY)
        assert p.returncode == 0, p.stderr_text
        assert p.stderr_text == ""
        after = os.stat("/dev/null")
        assert (
            stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino
        )


def test_fifo_is_written_in_place_with_the_same_bytes(tmp_path: Path) -> None:
    ref = tmp_path / "ref.json.gz"
    assert run_cli("merge", *_inputs(), "-o", ref, "-q").returncode == 0
    fifo = tmp_path / "pipe.json.gz"
    os.mkfifo(fifo)
    got: List[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    p = run_cli("merge", *_inputs(), "-o", fifo, "-q", env=NO_VERIFY)
    reader.join(60)
    assert p.returncode == 0, p.stderr_text
    assert got and got[0] == ref.read_bytes()  # byte-identical to the regular-file merge
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["pipe.json.gz", "ref.json.gz"]


def test_socket_target_is_refused(tmp_path: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    path = tmp_path / "s.json"
    s.bind(str(path))
    try:
        p = run_cli("merge", SAMPLE, "-o", path, "-q", "--force")
    finally:
        s.close()
    assert p.returncode == 3 and "socket" in p.stderr_text
    assert stat.S_ISSOCK(os.stat(path).st_mode)


def test_stdout_into_head_ends_quietly(tmp_path: Path) -> None:
    """A reader that closes the pipe early: no message, exit 141 (128 + SIGPIPE, what
    the shell reports for cat), no temporary file or fragment directory left."""
    full = tmp_path / "full.json"
    assert run_cli("merge", SAMPLE, "-o", full, "-q", "--include-pyfunc").returncode == 0
    assert full.stat().st_size > 1 << 20  # far more than a pipe buffer: the write must hit EPIPE
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    for jobs in ("1", "2"):
        env = dict(os.environ, TMPDIR=str(tmpdir))
        p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tracefuse_stream",
                "merge",
                str(SAMPLE),
                "-o",
                "-",
                "-j",
                jobs,
                "--include-pyfunc",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert p.stdout is not None and p.stderr is not None
        head = p.stdout.read(100)
        p.stdout.close()
        err = p.stderr.read().decode()
        assert p.wait(60) == 141, err
        assert err == ""
        assert head.startswith(b"{")
        assert list(tmpdir.iterdir()) == []


def test_json_summary_goes_to_stderr_with_stdout_output() -> None:
    p = run_cli("merge", SAMPLE, "-o", "-", "--json-summary")
    assert p.returncode == 0, p.stderr_text
    trace = strict_loads(p.stdout)  # stdout is the trace and nothing else
    summary = json.loads(p.stderr_text)
    assert summary["output"] == "-"
    assert summary["events_out"] == len(trace["traceEvents"])


@pytest.mark.parametrize("name", ["x.json.bz2", "x.txt", "x", ""])
def test_unknown_output_names_are_usage_errors(tmp_path: Path, name: str) -> None:
    p = run_cli("merge", SAMPLE, "-o", str(tmp_path / name) if name else "", "-q", cwd=tmp_path)
    assert p.returncode == 2, p.stderr_text
    line = p.stderr_text.strip()
    assert "\n" not in line and ".json, .json.gz or .json.zst" in line
    assert "already exists" not in line
    assert (name or "-o") in line
    assert list(tmp_path.iterdir()) == []


def test_name_of_250_bytes_works(tmp_path: Path) -> None:
    name = "é" * 60 + "r" * (250 - 120 - len(".json.gz")) + ".json.gz"
    assert len(os.fsencode(name)) == 250
    out = tmp_path / name
    p = run_cli("merge", SAMPLE, "-o", out, "-q")
    assert p.returncode == 0, p.stderr_text
    assert load_output(out)["traceEvents"]
    assert [x.name for x in tmp_path.iterdir()] == [name]


def test_temp_prefix_fits_name_max(tmp_path: Path) -> None:
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    for name in ("a.json", "é" * 127 + ".json", "b" * 255):
        total = len(os.fsencode(temp_prefix(name, str(tmp_path)))) + 8 + len(TMP_SUFFIX)
        assert total <= limit
    assert temp_prefix("a.json", str(tmp_path)) == f".a.json.{owner_tag()}."  # owner: PID@HOST


def test_symlink_target_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    p = run_cli("merge", SAMPLE, "-o", link, "-q", "--force")
    assert p.returncode == 0, p.stderr_text
    assert link.is_symlink() and strict_loads(decompress_bytes(real.read_bytes()))["traceEvents"]

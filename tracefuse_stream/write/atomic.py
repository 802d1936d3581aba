"""Where the output goes: an atomic file, a device or FIFO written in place, or stdout.

A regular output is written to a temporary file beside the target and renamed into
place only when complete, so an interrupted merge never leaves a file under the
output name. That rename must never hit a target that is not a regular file: renaming
over ``/dev/null`` (as root) replaces the device node with a regular file, and over a
FIFO it disconnects the reader. So an existing target that is a character device, a
block device or a FIFO is opened for writing and written in place, as a shell
redirection does. Like bash's ``noclobber``, ``--force`` guards only existing regular
files (they hold data a merge would destroy); character devices and FIFOs hold none
and need no ``--force``. A block device does hold data and still needs ``--force``.
A socket cannot be opened for writing at all and is refused.

A symlink to a regular file is followed: the temporary file is made beside the file
it points to and renamed over that file, so the link stays a link.

A merge killed outright (SIGKILL, the OOM killer) cannot remove its temporaries. So
their names carry their owner — ``.NAME.PID@HOST.XXXXXXXX.tracefuse-tmp`` and
``.tracefuse-frag-PID@HOST-XXXXXXXX/`` — and the next merge to that output removes
those whose owner is gone: made on this host (a shared filesystem's other hosts have
their own pids), by this user, by a pid that no longer exists. A pid reused since, or
anything not matching the pattern exactly, is left alone.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterable, List, Optional

from tracefuse_stream.errors import OutputError, UsageError
from tracefuse_stream.write.codecs import ACCEPTED_TEXT

TMP_SUFFIX = ".tracefuse-tmp"
FRAG_PREFIX = ".tracefuse-frag-"
_MKSTEMP_RANDOM = 8  # characters of randomness tempfile.mkstemp puts in a name
_HOST_MAX = 32  # characters of the host name kept in an owner tag
_OWNER_MAX = 1 + 10 + 1 + _HOST_MAX  # ".PID@HOST": the room kept for any pid and host
_RANDOM = r"[a-z0-9_]{%d}" % _MKSTEMP_RANDOM  # tempfile's alphabet
_TMP_NAME = re.compile(
    r"^\.(?P<stem>.*)\.(?P<pid>[0-9]{1,10})@(?P<host>[A-Za-z0-9-]*)\." + _RANDOM + re.escape(TMP_SUFFIX) + "$"
)
_FRAG_NAME = re.compile(
    "^" + re.escape(FRAG_PREFIX) + r"(?P<pid>[0-9]{1,10})@(?P<host>[A-Za-z0-9-]*)-" + _RANDOM + "$"
)
_DEFAULT_NAME_MAX = 255
_BUFFER = 1 << 20


def _name_max(directory: str) -> int:
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return _DEFAULT_NAME_MAX


def owner_tag() -> str:
    """``PID@HOST`` of this process (HOST cut to [A-Za-z0-9-], at most 32 characters):
    who made a temporary file, so a later merge can tell whether its maker is gone."""
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0])[:_HOST_MAX]
    return f"{os.getpid()}@{host}"


def _stem(target_name: str, directory: str) -> str:
    """NAME cut (by whole characters) so that any temporary name for it fits the
    directory's NAME_MAX in bytes, whatever the pid and host."""
    room = (
        _name_max(directory) - len(".") - len(".") - _OWNER_MAX - len(".") - _MKSTEMP_RANDOM - len(TMP_SUFFIX)
    )
    stem = target_name
    while stem and len(os.fsencode(stem)) > room:
        stem = stem[:-1]
    return stem


def temp_prefix(target_name: str, directory: str) -> str:
    """``mkstemp`` prefix for a temporary file beside ``target_name``:
    ``.NAME.PID@HOST.`` + 8 random characters + ``.tracefuse-tmp``, with NAME cut so
    the full temporary name fits the directory's NAME_MAX in bytes: a target name near
    the 255-byte limit must still be writable. Uniqueness comes from mkstemp's random
    part, not from the name; the owner tag lets a later merge clean up after a killed one."""
    return f".{_stem(target_name, directory)}.{owner_tag()}."


def _owner_gone(pid_text: str, host: str, st: os.stat_result) -> bool:
    """The owner recorded in a temporary name is a process of this host and user
    that no longer exists (a live pid, even of another user, counts as alive)."""
    if host != owner_tag().split("@", 1)[1] or st.st_uid != os.getuid():
        return False
    pid = int(pid_text)
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: it exists (another user's process)
        return False
    return False


def remove_stale_temporaries(target_name: Optional[str], directory: str) -> List[str]:
    """Remove what killed merges to ``directory/target_name`` left: temporary outputs
    for that name and fragment directories beside it whose owner is gone (see the
    module docstring); ``target_name`` None: fragment directories only (the system
    temp directory, where fragments of ``-o -`` and device outputs go). Returns the
    paths removed; errors are ignored (best effort)."""
    stem = None if target_name is None else _stem(target_name, directory)
    removed: List[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        m = _TMP_NAME.match(entry.name) if stem is not None else None
        frag = None if m else _FRAG_NAME.match(entry.name)
        if (m is None or m.group("stem") != stem) and frag is None:
            continue
        owner = m or frag
        assert owner is not None
        try:
            st = entry.stat(follow_symlinks=False)
            if not _owner_gone(owner.group("pid"), owner.group("host"), st):
                continue
            if frag is not None and stat.S_ISDIR(st.st_mode):
                shutil.rmtree(entry.path)
            elif m is not None and stat.S_ISREG(st.st_mode):
                os.unlink(entry.path)
            else:
                continue
        except OSError:
            continue
        removed.append(entry.path)
    return removed


class AtomicOutput:
    """The output of one merge: ``file`` to write to, then ``commit`` or ``abort``.

    ``target == "-"``: stdout (nothing to rename). An existing non-regular target
    (device, FIFO): written in place (``in_place``), nothing to rename or remove.
    Otherwise a temporary file beside the target becomes the target on ``commit``.
    ``frag_parent`` is where rank fragments may go: beside a regular target (same
    filesystem, so the final copy can be a reflink), else the system temp directory.
    """

    def __init__(self, target: str, *, force: bool = False, inputs: Iterable[str] = ()) -> None:
        self.target = target
        self.stdout = target == "-"
        self.in_place = False
        self.tmp_path: Optional[str] = None
        self.file: Optional[BinaryIO] = None
        self.frag_parent: Optional[str] = None
        self.stale_removed: List[str] = []  # temporaries of killed merges removed (see module doc)
        self._final = target
        if self.stdout:
            self.file = sys.stdout.buffer
            return
        if not target:
            raise UsageError(f"-o: the output name is empty; give a file name ending in {ACCEPTED_TEXT}")
        tpath = Path(target)
        check_output_path(tpath, force=force, inputs=inputs)
        try:
            mode: Optional[int] = os.stat(target).st_mode
        except FileNotFoundError:
            mode = None
        except OSError as e:
            raise OutputError(f"{target}: cannot use as output: {e.strerror or e}") from None
        if mode is not None and not stat.S_ISREG(mode):
            self._open_in_place()
            return
        if os.path.islink(target):
            self._final = os.path.realpath(target)  # write through the link, keep it
        final = Path(self._final)
        parent = str(final.parent) if str(final.parent) else "."
        self.stale_removed = remove_stale_temporaries(final.name, parent)
        try:
            fd, tmp = tempfile.mkstemp(prefix=temp_prefix(final.name, parent), suffix=TMP_SUFFIX, dir=parent)
        except OSError as e:
            raise OutputError(f"{target}: cannot create a file in {parent}: {e.strerror or e}") from None
        self.tmp_path = tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a normal file is wanted
        self.file = os.fdopen(fd, "wb", buffering=_BUFFER)
        self.frag_parent = parent

    def _open_in_place(self) -> None:
        """Open an existing device or FIFO for writing (a FIFO blocks here until a
        reader opens it, as ``cat > fifo`` does). No O_CREAT: if the node vanished
        since the check, no regular file is created in its place."""
        flags = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
        try:
            fd = os.open(self.target, flags)
        except OSError as e:
            raise OutputError(f"{self.target}: cannot open for writing: {e.strerror or e}") from None
        if stat.S_ISREG(os.fstat(fd).st_mode):  # replaced by a regular file meanwhile
            os.close(fd)
            raise OutputError(f"{self.target}: changed into a regular file while opening it; not overwritten")
        self.in_place = True
        self.file = os.fdopen(fd, "wb", buffering=_BUFFER)

    def commit(self) -> None:
        if self.stdout:
            return
        assert self.file is not None
        if self.in_place:
            self._commit_in_place()
            return
        assert self.tmp_path is not None
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(self.tmp_path, self._final)
        except OSError as e:
            self.abort()
            raise OutputError(f"{self.target}: cannot finish writing: {e.strerror or e}") from None
        self.tmp_path = None

    def _commit_in_place(self) -> None:
        assert self.file is not None
        try:
            self.file.flush()
            if stat.S_ISBLK(os.fstat(self.file.fileno()).st_mode):
                os.fsync(self.file.fileno())  # a FIFO or tty cannot be fsync'ed
            self.file.close()
        except BrokenPipeError:
            self.abort()
            raise  # the reader closed the FIFO: ends quietly, like stdout (write.pipes)
        except OSError as e:
            self.abort()
            raise OutputError(f"{self.target}: cannot finish writing: {e.strerror or e}") from None

    def abort(self) -> None:
        if self.stdout:
            return
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
        if self.tmp_path:
            try:
                os.unlink(self.tmp_path)
            except OSError:
                pass
            self.tmp_path = None


def check_output_path(target: Path, *, force: bool, inputs: Iterable[str]) -> None:
    """Refuse to overwrite an input (ever), a directory or socket (never writable),
    an existing regular file or block device without ``force``. Character devices
    and FIFOs are written in place and need no ``force`` (they hold no data)."""
    for inp in inputs:
        try:
            if target.exists() and os.path.samefile(target, inp):
                raise OutputError(f"{target}: refusing to write over an input file")
        except OSError:
            pass
        if os.path.abspath(target) == os.path.abspath(inp):
            raise OutputError(f"{target}: refusing to write over an input file")
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return  # does not exist (or a dangling link): created on commit
    if stat.S_ISDIR(mode):
        raise OutputError(f"{target}: is a directory")
    if stat.S_ISSOCK(mode):
        raise OutputError(f"{target}: is a socket; a socket cannot be opened for writing")
    if (stat.S_ISREG(mode) or stat.S_ISBLK(mode)) and not force:
        what = "is a block device" if stat.S_ISBLK(mode) else "already exists"
        raise OutputError(f"{target}: {what} (use --force to overwrite)")


class FragmentDir:
    """A private temporary directory for rank fragments, removed on close."""

    def __init__(self, parent: Optional[str]) -> None:
        if parent is None:  # beside an output, AtomicOutput already removed stale ones
            remove_stale_temporaries(None, tempfile.gettempdir())
        try:
            self.path = tempfile.mkdtemp(prefix=f"{FRAG_PREFIX}{owner_tag()}-", dir=parent)
        except OSError as e:
            where = parent or tempfile.gettempdir()
            raise OutputError(f"cannot create a temporary directory in {where}: {e}") from None

    def file_for(self, rank: int, attempt: int = 0) -> str:
        return os.path.join(self.path, f"rank{rank}.{attempt}.part")

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

"""``tracefuse open FILE``: serve a (merged) trace once and print the Perfetto link.

Dragging a multi-GB file from a login node into a browser means copying it first;
this command serves it where it is, on 127.0.0.1 only, under a random secret path
(``/TOKEN/NAME``: other users of a shared login node can reach the port, not guess
the path), and prints the ``https://ui.perfetto.dev/#!/?url=...`` link plus, in an
SSH session, the ``ssh -L`` line that brings the port to the user's own machine. It
serves one client and stops once the UI has fetched the file (see ``http_server``
for what the UI needs).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from typing import List, Mapping, Optional
from urllib.parse import quote

from tracefuse_stream.errors import EXIT_INTERRUPTED, EXIT_OK, ErrorKind, InputError
from tracefuse_stream.serve.perfetto_ui import DEFAULT_PORT, PERFETTO_ORIGIN

SSH_ENV_KEYS = ("SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535 (0 = any free port), not {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"timeout must be a positive number of seconds, not {text}")
    return value


def add_open_arguments(p: argparse.ArgumentParser) -> None:
    """The ``open`` subcommand's arguments (called from ``cli.app``)."""
    p.add_argument("file", metavar="FILE", help="trace to open (sent as it is: .json, .json.gz, .json.zst)")
    p.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help="port on 127.0.0.1 (default: %(default)s, the only one ui.perfetto.dev fetches from; 0 = any free port)",
    )
    p.add_argument("--no-browser", action="store_true", help="only print the link; never start a browser")
    p.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="stop after this long without a complete download, exit 0 (default: wait until it is fetched)",
    )
    p.add_argument(
        "--origin",
        default=PERFETTO_ORIGIN,
        help="the Perfetto UI allowed to fetch the file, for a self-hosted UI (default: %(default)s)",
    )


def perfetto_link(
    port: int, file_name: str, origin: str = PERFETTO_ORIGIN, token: Optional[str] = None
) -> str:
    """``ORIGIN/#!/?url=http://127.0.0.1:PORT/TOKEN/NAME`` with NAME percent-encoded
    (no ``TOKEN/`` segment when ``token`` is None)."""
    secret = f"{token}/" if token else ""
    return f"{origin}/#!/?url=http://127.0.0.1:{port}/{secret}{quote(file_name, safe='')}"


def is_remote_session(env: Mapping[str, str]) -> bool:
    return any(env.get(k) for k in SSH_ENV_KEYS)


def ssh_tunnel_line(port: int, env: Mapping[str, str], host: Optional[str] = None) -> str:
    """``ssh -L PORT:127.0.0.1:PORT USER@HOST`` for the user's own machine."""
    import socket  # lazy: the CLI parser imports this module for every command

    host = host or socket.gethostname()
    user = env.get("USER") or env.get("LOGNAME") or env.get("USERNAME")
    target = f"{user}@{host}" if user else host
    return f"ssh -L {port}:127.0.0.1:{port} {target}"


def browser_expected(env: Mapping[str, str], platform: str = sys.platform) -> bool:
    """A graphical browser can be opened here. Without a display, ``webbrowser`` would
    start a text browser (lynx, w3m) in the terminal, so a Linux session needs
    DISPLAY/WAYLAND_DISPLAY (or an explicit BROWSER); an SSH session never opens one."""
    if is_remote_session(env):
        return False
    if env.get("BROWSER"):
        return True
    if platform == "darwin" or platform.startswith("win"):
        return True
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def redirect_page(link: str, folder: str) -> str:
    """A page in ``folder`` (created 0700 by the caller) that sends the browser on to
    ``link``; its ``file://`` URL. The browser is started with this URL, never with the
    link: a process's command line is visible to every local user (``ps``), the token
    must not be; the page itself is readable by this user only (0600)."""
    import html  # lazy: only when a browser is to be opened

    page = os.path.join(folder, "open-in-perfetto.html")
    fd = os.open(page, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        q = html.escape(link, quote=True)
        f.write(
            '<!DOCTYPE html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
            f'<meta http-equiv="refresh" content="0; url={q}"><title>tracefuse open</title>'
            f'<a href="{q}">Open in Perfetto</a>\n'
        )
    from pathlib import Path  # lazy, as above

    return Path(page).as_uri()


def _open_browser(link: str, folder: str) -> bool:
    import webbrowser  # only when a browser is to be opened (it loads shlex, subprocess, ...)

    try:
        return bool(webbrowser.open_new_tab(redirect_page(link, folder)))
    except Exception:  # no usable browser is never an error: the link is printed
        return False


#: names of an HTML page, as written or compressed (Perfetto opens none of them)
_PAGE_NAMES = tuple(f".{e}{z}" for e in ("html", "htm") for z in ("", ".gz", ".zst"))


def _text_start(head: bytes) -> bytes:
    """The first bytes of the text ``head`` starts, gunzipped when it is gzip: a page
    gzipped under a trace's name is a page all the same."""
    if head[:2] != b"\x1f\x8b":
        return head[:64]
    import zlib  # lazy: only for a gzip file

    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 64)
    except zlib.error:
        return b""  # a damaged gzip file: Perfetto's to judge, as before


def check_servable(path: str) -> int:
    """The file's size; a missing, unreadable or non-regular file is an InputError (exit 1)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(path, "no such file", kind=ErrorKind.MISSING) from None
    except OSError as e:
        raise InputError(path, f"cannot be read: {e.strerror or e}", kind=ErrorKind.UNREADABLE) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(path, "is a directory; give the trace file to open", kind=ErrorKind.UNREADABLE)
    if not stat.S_ISREG(st.st_mode):
        raise InputError(path, "is not a regular file", kind=ErrorKind.UNREADABLE)
    try:
        with open(path, "rb") as f:
            start = _text_start(f.read(4096))
    except OSError as e:
        raise InputError(path, f"cannot be read: {e.strerror or e}", kind=ErrorKind.UNREADABLE) from None
    if path.lower().endswith(_PAGE_NAMES) or start.lstrip().lower().startswith((b"<!doctype html", b"<html")):
        raise InputError(
            path,
            "is an HTML page (tracefuse report writes one), not a trace: Perfetto cannot open it",
            kind=ErrorKind.NOT_A_TRACE,
            hint="open it in a browser as it is (it fetches nothing), or give open the merged trace",
        )
    return st.st_size


def _say(text: str) -> None:
    print(text, flush=True)


def cmd_open(a: argparse.Namespace, env: Optional[Mapping[str, str]] = None) -> int:
    """Runs ``tracefuse open``: 0 once sent (or after --timeout), 130 on Ctrl-C."""
    env = os.environ if env is None else env
    path = a.file
    size = check_servable(path)
    name = os.path.basename(path)
    origin = a.origin.rstrip("/")  # CORS compares the origin exactly: no trailing slash
    # the server (http.server and what it loads) only when ``open`` runs: cli.app imports
    # this module for the arguments of every command's parser
    from tracefuse_stream.serve.http_server import bind_server, serve_until_sent

    server = bind_server(path, a.port, origin)

    def announce(port: int) -> None:
        link = perfetto_link(port, name, origin, server.token)
        _say(
            f"Serving {name} ({size:,} bytes) on 127.0.0.1:{port} until it has been downloaded once (Ctrl-C stops)."
        )
        if port != DEFAULT_PORT and origin == PERFETTO_ORIGIN:
            _say(
                f"Note: ui.perfetto.dev's Content-Security-Policy lets it fetch from 127.0.0.1:{DEFAULT_PORT} only; "
                f"on port {port} it refuses the link unless its flag 'Relax Content Security Policy for "
                f"127.0.0.1:*' is on and '&rpc_port={port}' is appended."
            )
        if is_remote_session(env):
            _say("Remote session: on your own machine run this first, then open the link there:")
            _say(ssh_tunnel_line(port, env))
        _say("Open in Perfetto:")
        _say(link)
        if not a.no_browser and browser_expected(env):
            import tempfile  # lazy: only when a browser is to be opened

            folders.append(tempfile.mkdtemp(prefix="tracefuse-open-"))  # 0700
            if not _open_browser(link, folders[-1]):
                _say("(no browser could be started: open the link yourself)")

    folders: List[str] = []  # the redirect page's folder, removed when serving ends
    try:
        result = serve_until_sent(server, timeout_s=a.timeout, on_ready=announce)
    except KeyboardInterrupt:
        print(f"tracefuse: interrupted; stopped serving {path}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    finally:
        if folders:
            import shutil  # lazy, as above

            shutil.rmtree(folders[0], ignore_errors=True)
    if result.completed:
        _say(f"Sent {name} ({result.bytes_sent:,} bytes) once; stopped.")
    else:
        _say(f"No complete download within {a.timeout:g} s; stopped serving {name}.")
    return EXIT_OK

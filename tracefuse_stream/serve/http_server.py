"""A one-file HTTP server on 127.0.0.1 that the Perfetto UI can load a trace from.

What the Perfetto UI needs, checked in Perfetto's own source (google/perfetto):

- ``https://ui.perfetto.dev/#!/?url=http://127.0.0.1:PORT/NAME`` makes the UI call
  ``fetch(url)`` (``ui/src/frontend/trace_url_handler.ts``; the streaming reader
  ``TraceHttpStream`` in ``ui/src/core/trace_stream.ts`` does the same): a plain GET
  with no custom request headers, no credentials and no ``Range`` header. That is a
  CORS "simple request": the browser sends no OPTIONS preflight, and reads the
  response only if it carries ``Access-Control-Allow-Origin`` naming the UI's origin
  (or ``*``, per the deep-linking docs). We name the origin (as Perfetto's
  ``tools/open_trace_in_ui`` does) so no other web page can read the trace.
- The reader refuses any status but 200 (a 206 partial answer would fail) and uses
  ``Content-Length`` for its progress bar (a CORS-safelisted response header, so no
  ``Access-Control-Expose-Headers`` is needed). So ``Range`` is ignored and the whole
  file is always sent with 200 (``Accept-Ranges: none``). No ``Content-Encoding`` is
  ever set: the UI detects gzip/zstd from the bytes, a browser would decompress a
  ``Content-Encoding: gzip`` body itself.
- On startup the UI probes ``POST http://127.0.0.1:9001/status`` for a native
  ``trace_processor --httpd`` (``ui/src/trace_processor/http_rpc_engine.ts``); any
  non-200 answer means "none", so POST gets 405 and does not count as a download.
- The UI's Content-Security-Policy (``setupContentSecurityPolicy`` in
  ``ui/src/frontend/index.ts``) lets it connect to ``http://127.0.0.1:9001`` only (the
  trace_processor port), unless the flag "Relax Content Security Policy for
  127.0.0.1:*" is on and the link carries ``rpc_port``; hence the default port 9001.

OPTIONS is answered anyway (204 with the allowed methods and the requested headers),
for clients that do preflight, and with ``Access-Control-Allow-Private-Network: true``
when a browser asks for it (Chrome's Private Network Access preflight for a public
page fetching from loopback; that header comes from the browser's spec, not from
Perfetto's source). Every answer, 404 included, carries the CORS origin header so the
UI can show the real status instead of an opaque network error.

The server stops itself after the first complete GET of the file: the trace is sent
once, as ``tools/open_trace_in_ui`` and ``record_android_trace`` do. "Complete" means
every byte was handed to the kernel and the connection was closed cleanly; a download
cut short keeps the server waiting for the next one.

Who can reach it, on a shared login node: the socket is bound to 127.0.0.1, so only
processes on this host, but those of every local user. So the file is served only
under ``/TOKEN/NAME``, TOKEN being 128 random bits (``secrets.token_urlsafe``) that
only the printed link carries; every other path is a 404, whatever the method, and
the 404 says nothing about the file. Only one client is served: while a download
runs, another GET is refused (409), and once one download completed every request
is refused (410) until the server, stopping, closes the port. ``POST /status`` (the
UI's probe, above) still gets 405: the token is not part of that URL.
"""

from __future__ import annotations

import errno
import http.server
import os
import secrets
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Set, Tuple
from urllib.parse import quote, unquote, urlsplit

from tracefuse_stream.errors import UsageError
from tracefuse_stream.serve.perfetto_ui import PERFETTO_ORIGIN

ALLOWED_METHODS = "GET, HEAD, OPTIONS"
HANDLER_SOCKET_TIMEOUT_S = 60.0  # an idle or stuck client cannot hold a thread forever
WAIT_SLICE_S = 0.2  # the main thread waits in slices so Ctrl-C is seen promptly
TOKEN_BYTES = 16  # 128 random bits: not guessable by another local user


def new_token() -> str:
    """The secret first path segment of the served URL (URL-safe base64, no padding)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


@dataclass(frozen=True)
class ServeResult:
    """How serving ended: ``completed`` after one full download, else the timeout."""

    completed: bool
    bytes_sent: int
    port: int


class _OneFileServer(http.server.ThreadingHTTPServer):
    """Serves one file on 127.0.0.1; signals ``done`` once a full GET has been closed."""

    daemon_threads = True  # an idle browser connection never delays the exit
    # Rebind right after a previous run (TIME_WAIT); Linux still refuses a second live listener.
    allow_reuse_address = True
    allow_reuse_port = False  # never share the port with another listener

    def __init__(self, port: int, path: str, origin: str, token: Optional[str] = None) -> None:
        self.file_path = path
        self.file_name = os.path.basename(path)
        self.token = token or new_token()
        self.origin = origin
        self.done = threading.Event()
        self.bytes_sent = 0
        self._complete_requests: Set[int] = set()
        self._downloading: Optional[int] = None  # id() of the request being served the file
        self._lock = threading.Lock()
        super().__init__(("127.0.0.1", port), _OneFileHandler)

    def claim(self, request: Any) -> Optional[int]:
        """Lets ``request`` download the file; else the HTTP status refusing it: 410 once
        a download completed, 409 while another one runs (one client only)."""
        with self._lock:
            if self.done.is_set():
                return 410
            if self._downloading is not None:
                return 409
            self._downloading = id(request)
            return None

    def mark_complete(self, request: Any, nbytes: int) -> None:
        with self._lock:
            self._complete_requests.add(id(request))
            self.bytes_sent = nbytes

    def shutdown_request(self, request: Any) -> None:
        # Runs in the handler thread after the response: the socket is shut down and
        # closed here, so ``done`` is set only once the bytes are on their way.
        # The claim on the download is released here too, in the same step, so that
        # no other GET is served between a complete download and ``done``.
        super().shutdown_request(request)
        with self._lock:
            finished = id(request) in self._complete_requests
            self._complete_requests.discard(id(request))
            if finished:
                self.done.set()
            if self._downloading == id(request):
                self._downloading = None  # a cut download: the next GET may be served

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A browser that closes the connection mid-download (tab closed, reload) is
        # routine: that download simply does not count. Anything else is a bug.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)

    @property
    def url_path(self) -> str:
        """``/TOKEN/NAME`` as the link carries it (NAME percent-encoded)."""
        return f"/{self.token}/{quote(self.file_name, safe='')}"

    def is_served_path(self, raw_path: str) -> bool:
        """``/TOKEN/NAME``, NAME percent-encoded or not (the UI's router may decode the
        link once); the token must match exactly (compared in constant time)."""
        path = urlsplit(raw_path).path
        prefix, sep, rest = path[1:].partition("/")
        if not path.startswith("/") or not sep:
            return False
        if not secrets.compare_digest(prefix.encode(), self.token.encode()):
            return False
        return rest == self.file_name or unquote(rest) == self.file_name


class _OneFileHandler(http.server.BaseHTTPRequestHandler):
    server: _OneFileServer
    protocol_version = "HTTP/1.1"
    timeout = HANDLER_SOCKET_TIMEOUT_S
    server_version = "tracefuse-open"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # quiet: the command prints its own one-line outcome

    def end_headers(self) -> None:
        self.send_header("Access-Control-Allow-Origin", self.server.origin)
        self.send_header("Vary", "Origin")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.close_connection = True
        super().end_headers()

    def version_string(self) -> str:
        return self.server_version

    def _not_found(self) -> None:
        self._refuse(404, b"404: nothing here\n")

    def _refuse(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _file_headers(self) -> Optional[Tuple[Any, int]]:
        """Opens the file and sends the 200 headers; None (after a 404) if it is gone."""
        try:
            f = open(self.server.file_path, "rb")  # noqa: SIM115 - closed by the caller
        except OSError:
            self._not_found()
            return None
        size = os.fstat(f.fileno()).st_size
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.send_header("Accept-Ranges", "none")
        self.end_headers()
        return f, size

    def do_HEAD(self) -> None:
        if not self.server.is_served_path(self.path):
            self._not_found()
            return
        opened = self._file_headers()
        if opened is not None:
            opened[0].close()

    def do_GET(self) -> None:
        if not self.server.is_served_path(self.path):
            self._not_found()
            return
        refused = self.server.claim(self.request)
        if refused == 410:
            self._refuse(410, b"410: the trace was already sent once; run 'tracefuse open' again\n")
            return
        if refused == 409:
            self._refuse(409, b"409: the trace is being sent to another client\n")
            return
        opened = self._file_headers()  # the claim is released by shutdown_request
        if opened is None:
            return
        f, size = opened
        with f:
            # socket.sendfile: zero-copy from the page cache where the OS has it, a
            # bounded read/send loop elsewhere; the file is never held in memory.
            sent = self.connection.sendfile(f, 0, size) if size else 0
        if sent == size:
            self.server.mark_complete(self.request, sent)

    def do_OPTIONS(self) -> None:
        if not self.server.is_served_path(self.path):
            self._not_found()
            return
        self.send_response(204)
        self.send_header("Access-Control-Allow-Methods", ALLOWED_METHODS)
        requested = self.headers.get("Access-Control-Request-Headers")
        if requested:
            self.send_header("Access-Control-Allow-Headers", requested)
        if self.headers.get("Access-Control-Request-Private-Network", "").lower() == "true":
            self.send_header("Access-Control-Allow-Private-Network", "true")
        self.send_header("Access-Control-Max-Age", "600")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _method_not_allowed(self) -> None:
        self.send_response(405)
        self.send_header("Allow", ALLOWED_METHODS)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = _method_not_allowed
    do_PUT = _method_not_allowed
    do_DELETE = _method_not_allowed
    do_PATCH = _method_not_allowed


def bind_server(
    path: str, port: int, origin: str = PERFETTO_ORIGIN, token: Optional[str] = None
) -> _OneFileServer:
    """Binds 127.0.0.1:``port`` (0 = a free port); a taken port is a usage error (exit 2).
    ``token``: the secret path segment (a fresh random one by default)."""
    try:
        return _OneFileServer(port, path, origin, token)
    except OSError as e:
        where = f"127.0.0.1:{port}"
        if e.errno == errno.EADDRINUSE:
            raise UsageError(
                f"{where}: port already in use (another 'tracefuse open' or 'trace_processor --httpd'?); "
                "stop it, or pick another with --port (ui.perfetto.dev fetches only from port 9001)"
            ) from None
        raise UsageError(f"{where}: cannot listen: {e.strerror or e}; pick another with --port") from None


def serve_until_sent(
    server: _OneFileServer,
    *,
    timeout_s: Optional[float] = None,
    on_ready: Optional[Callable[[int], None]] = None,
) -> ServeResult:
    """Serves until one complete download, or ``timeout_s`` seconds without one.

    ``on_ready(port)`` runs once the socket is listening (the link is printed there).
    Ctrl-C propagates as KeyboardInterrupt after the server is closed.
    """
    port = int(server.server_address[1])
    worker = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    worker.start()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        if on_ready is not None:
            on_ready(port)
        while not server.done.is_set():
            if deadline is None:
                server.done.wait(WAIT_SLICE_S)
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                break
            server.done.wait(min(WAIT_SLICE_S, left))
    finally:
        server.shutdown()
        server.server_close()
        worker.join(timeout=5)
    return ServeResult(completed=server.done.is_set(), bytes_sent=server.bytes_sent, port=port)

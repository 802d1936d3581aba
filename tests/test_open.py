"""``tracefuse open FILE``: the one-shot loopback server the Perfetto UI fetches from.

Every request goes to 127.0.0.1 only, every wait is bounded (thread joins, queue
gets, subprocess waits all have timeouts), and the server under test always has a
``timeout_s``/``--timeout`` safety net so a failing test cannot hang the suite.
"""

from __future__ import annotations

import html
import os
import queue
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
import webbrowser
from pathlib import Path
from typing import Dict, List, Optional, Tuple
from urllib.parse import quote

import pytest
from conftest import default_sigint

from tracefuse_stream.cli.app import main
from tracefuse_stream.serve.command import browser_expected, perfetto_link, ssh_tunnel_line
from tracefuse_stream.serve.http_server import ServeResult, bind_server, serve_until_sent

REPO = Path(__file__).resolve().parents[1]
SAMPLE_GZ = REPO / "fixtures" / "sample_run" / "node0_11778.1.pt.trace.json.gz"
SAMPLE_JSON = REPO / "fixtures" / "sample_run" / "node0_11777.0.pt.trace.json"
ORIGIN = "https://ui.perfetto.dev"
WAIT_S = 20.0  # upper bound for any single wait; never reached when things work
SAFETY_NET_S = 60.0  # the server under test gives up by itself after this long
SSH_KEYS = ("SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY")


# --------------------------------------------------------------------------- helpers
class ServerThread:
    """serve_until_sent() on 127.0.0.1:0 in a thread; ``port`` once it listens."""

    def __init__(self, path: Path, timeout_s: float = SAFETY_NET_S) -> None:
        self.result: Optional[ServeResult] = None
        ready: queue.Queue[int] = queue.Queue()
        server = bind_server(str(path), 0)
        self.token = server.token

        def run() -> None:
            self.result = serve_until_sent(server, timeout_s=timeout_s, on_ready=ready.put)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        self.port = ready.get(timeout=WAIT_S)

    def url(self, name: str, token: Optional[str] = None) -> str:
        """The URL of ``name`` under the server's secret token (or ``token``)."""
        return f"http://127.0.0.1:{self.port}/{self.token if token is None else token}/{name}"

    def bare_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def wait_stopped(self) -> ServeResult:
        self.thread.join(timeout=WAIT_S)
        assert not self.thread.is_alive(), "server did not stop by itself"
        assert self.result is not None
        return self.result


# No proxy, whatever http_proxy/no_proxy say: the server under test is on loopback, and
# urlopen() would send the request to a configured proxy (which cannot reach it).
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def request(
    url: str, method: str = "GET", headers: Optional[Dict[str, str]] = None
) -> Tuple[int, Dict[str, str], bytes]:
    """(status, headers with lower-case names, body); HTTP errors are answers too."""
    assert url.startswith("http://127.0.0.1:")
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with DIRECT.open(req, timeout=WAIT_S) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def zstd_copy(tmp_path: Path) -> Path:
    zstandard = pytest.importorskip("zstandard")
    out = tmp_path / "sample.json.zst"
    out.write_bytes(zstandard.ZstdCompressor(level=3).compress(SAMPLE_JSON.read_bytes()))
    return out


def gui_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A local desktop session: a browser would be expected."""
    for k in SSH_KEYS + ("BROWSER",):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("DISPLAY", ":0")


RAW_BROWSER_URLS: List[Tuple[str, int, str]] = []  # (what the browser was started with, mode, page)


def record_browser_calls(monkeypatch: pytest.MonkeyPatch, result: object = True) -> List[str]:
    """Replaces every webbrowser entry point; returns the list of URLs asked for."""
    calls: List[str] = []

    def fake(url: str, *args: object, **kwargs: object) -> bool:
        # the browser gets a 0600 page that redirects to the link (the token never on a
        # command line): record the link it sends the browser to
        if url.startswith("file://"):
            page = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path))
            RAW_BROWSER_URLS.append((url, page.stat().st_mode & 0o777, page.read_text()))
            url = html.unescape(re.search(r'url=([^"]+)"', page.read_text()).group(1))  # type: ignore[union-attr]
        calls.append(url)
        if isinstance(result, BaseException):
            raise result
        return bool(result)

    for fn in ("open", "open_new", "open_new_tab"):
        monkeypatch.setattr(webbrowser, fn, fake)
    return calls


# --------------------------------------------------------------------------- the server
@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_get_sends_exact_bytes_with_length_and_cors_then_stops(tmp_path: Path, kind: str) -> None:
    path = SAMPLE_GZ if kind == "gzip" else zstd_copy(tmp_path)
    data = path.read_bytes()
    magic = b"\x1f\x8b" if kind == "gzip" else b"\x28\xb5\x2f\xfd"
    assert data.startswith(magic)
    srv = ServerThread(path)
    name = path.name

    # None of these counts as the download: the GET at the end is still answered.
    status, headers, body = request(srv.url(name), "HEAD")
    assert (status, int(headers["content-length"]), body) == (200, len(data), b"")

    status, headers, body = request(
        srv.url(name),
        "OPTIONS",
        {
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "range",
            "Access-Control-Request-Private-Network": "true",
        },
    )
    assert status == 204 and body == b""
    assert headers["access-control-allow-origin"] == ORIGIN
    assert [m.strip() for m in headers["access-control-allow-methods"].split(",")] == [
        "GET",
        "HEAD",
        "OPTIONS",
    ]
    assert headers["access-control-allow-headers"] == "range"
    assert headers["access-control-allow-private-network"] == "true"

    for other in ("", "other.json.gz", name + ".bak", "status"):
        status, headers, _ = request(srv.url(other))
        assert status == 404, other
        assert headers["access-control-allow-origin"] == ORIGIN
    status, _, _ = request(srv.bare_url("status"), "OPTIONS")  # OPTIONS of another path: 404 too
    assert status == 404
    # The UI's probe for a native trace_processor (POST /status) must read "none".
    status, headers, _ = request(srv.bare_url("status"), "POST")
    assert status == 405 and headers["allow"] == "GET, HEAD, OPTIONS"
    assert srv.thread.is_alive()

    status, headers, body = request(srv.url(name), headers={"Origin": ORIGIN})
    assert status == 200
    assert body == data
    assert int(headers["content-length"]) == len(data)
    assert headers["content-type"] == "application/octet-stream"
    assert headers["access-control-allow-origin"] == ORIGIN
    assert "content-encoding" not in headers  # the compressed bytes go out as they are

    result = srv.wait_stopped()
    assert result.completed and result.bytes_sent == len(data) and result.port == srv.port
    with pytest.raises(OSError):  # the port is closed: nothing is served any more
        socket.create_connection(("127.0.0.1", srv.port), timeout=WAIT_S).close()


def test_range_is_ignored_whole_file_with_200(tmp_path: Path) -> None:
    # Perfetto's reader accepts only status 200, so a Range request gets the whole file.
    data = SAMPLE_GZ.read_bytes()
    srv = ServerThread(SAMPLE_GZ)
    status, headers, body = request(srv.url(SAMPLE_GZ.name), headers={"Range": "bytes=0-9"})
    assert (status, body, headers["accept-ranges"]) == (200, data, "none")
    assert srv.wait_stopped().completed


def test_cut_download_does_not_stop_the_server(tmp_path: Path) -> None:
    # Larger than the loopback socket buffers, so a client that hangs up after the
    # headers really leaves most of the file unsent.
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(64 * 1024 * 1024)
    srv = ServerThread(big)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=WAIT_S) as s:
        s.sendall(f"GET /{srv.token}/{big.name} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 200 ")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # hang up with a reset
    # A server that took the cut download for a complete one would stop within its
    # 0.2 s wait slice; give it ample time to do so (this bounded wait cannot fail
    # a correct server, only let a wrong one slip through on a very slow machine).
    srv.thread.join(timeout=2.0)
    assert srv.thread.is_alive()
    status, headers, body = request(srv.url(big.name))
    assert status == 200 and len(body) == 64 * 1024 * 1024 and int(headers["content-length"]) == len(body)
    result = srv.wait_stopped()
    assert result.completed and result.bytes_sent == len(body)


def test_percent_encoded_name(tmp_path: Path) -> None:
    path = tmp_path / "merged run#1.json.gz"
    shutil.copyfile(SAMPLE_GZ, path)
    link = perfetto_link(9001, path.name, token="T0k-_en")
    assert link == "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/T0k-_en/merged%20run%231.json.gz"
    srv = ServerThread(path)
    status, _, body = request(srv.url(quote(path.name, safe="")))
    assert status == 200 and body == SAMPLE_GZ.read_bytes()
    assert srv.wait_stopped().completed


def test_timeout_without_download(tmp_path: Path) -> None:
    srv = ServerThread(SAMPLE_GZ, timeout_s=0.3)
    result = srv.wait_stopped()
    assert not result.completed and result.bytes_sent == 0


# --------------------------------------------------------------------------- the command
def _env_without_ssh() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SSH_KEYS}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _start_cli(args: List[str], env: Dict[str, str]) -> Tuple[subprocess.Popen[str], queue.Queue[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracefuse_stream", "open", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(REPO),
        preexec_fn=default_sigint,  # SIGINT delivered even when the suite ignores it
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def _read_until(lines: queue.Queue[str], prefix: str) -> List[str]:
    seen: List[str] = []
    for _ in range(50):  # the banner is a handful of lines
        line = lines.get(timeout=WAIT_S)
        seen.append(line)
        if line.startswith(prefix):
            return seen
    raise AssertionError(f"no line starting with {prefix!r} in {seen}")


def _port_of(banner: List[str]) -> int:
    first = banner[0]
    assert first.startswith("Serving ") and " on 127.0.0.1:" in first, banner
    return int(first.split(" on 127.0.0.1:")[1].split(" ")[0])


def _token_of(link: str) -> str:
    """The secret path segment of a printed link: 22 URL-safe base64 characters (128 bits)."""
    token = link.split("?url=http://127.0.0.1:", 1)[1].split("/")[1]
    assert len(token) == 22 and all(c.isalnum() or c in "-_" for c in token), link
    return token


def test_cli_prints_exact_link_and_ssh_line_and_stops_after_one_download(tmp_path: Path) -> None:
    path = tmp_path / "merged run.json.gz"
    shutil.copyfile(SAMPLE_GZ, path)
    env = _env_without_ssh()
    env.update(SSH_CONNECTION="192.0.2.1 50000 192.0.2.2 22", USER="alice")
    proc, lines = _start_cli([str(path), "--port", "0", "--no-browser", "--timeout", str(SAFETY_NET_S)], env)
    try:
        banner = _read_until(lines, "https://")
        port = _port_of(banner)
        token = _token_of(banner[-1])
        assert (
            banner[-1]
            == f"https://ui.perfetto.dev/#!/?url=http://127.0.0.1:{port}/{token}/merged%20run.json.gz"
        )
        assert f"ssh -L {port}:127.0.0.1:{port} alice@{socket.gethostname()}" in banner
        status, _, body = request(banner[-1].split("?url=", 1)[1])
        assert status == 200 and body == path.read_bytes()
        assert proc.wait(timeout=WAIT_S) == 0
        rest = [lines.get(timeout=WAIT_S)]
        assert rest == [f"Sent merged run.json.gz ({len(body):,} bytes) once; stopped."]
        assert proc.stderr is not None and proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT_S)


@pytest.mark.skipif(sys.platform.startswith("win"), reason="SIGINT to a child process is POSIX")
def test_ctrl_c_exits_130_with_one_line() -> None:
    proc, lines = _start_cli(
        [str(SAMPLE_GZ), "--port", "0", "--no-browser", "--timeout", str(SAFETY_NET_S)], _env_without_ssh()
    )
    try:
        _read_until(lines, "https://")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=WAIT_S) == 130
        assert proc.stderr is not None
        assert proc.stderr.read().splitlines() == [f"tracefuse: interrupted; stopped serving {SAMPLE_GZ}"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT_S)


def test_no_browser_never_calls_webbrowser(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gui_env(monkeypatch)
    calls = record_browser_calls(monkeypatch)
    assert main(["open", str(SAMPLE_GZ), "--port", "0", "--no-browser", "--timeout", "0.3"]) == 0
    assert calls == []
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"No complete download within 0.3 s; stopped serving {SAMPLE_GZ.name}."


def test_browser_opened_with_the_link_only_where_one_is_expected(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gui_env(monkeypatch)
    calls = record_browser_calls(monkeypatch)
    assert main(["open", str(SAMPLE_GZ), "--port", "0", "--timeout", "0.3"]) == 0
    out = capsys.readouterr().out.splitlines()
    port = _port_of(out)
    assert len(calls) == 1
    assert calls == [
        f"https://ui.perfetto.dev/#!/?url=http://127.0.0.1:{port}/{_token_of(calls[0])}/{SAMPLE_GZ.name}"
    ]
    assert calls[0] in out
    # the browser's command line holds a 0600 page's file:// URL, never the token
    raw, mode, page = RAW_BROWSER_URLS[-1]
    assert raw.startswith("file://") and _token_of(calls[0]) not in raw and mode == 0o600
    assert f'<meta http-equiv="refresh" content="0; url={html.escape(calls[0])}">' in page
    assert not Path(urllib.parse.unquote(urllib.parse.urlparse(raw).path)).exists()  # removed after serving

    calls.clear()  # an SSH session: the ssh line instead of a browser
    monkeypatch.setenv("SSH_CONNECTION", "192.0.2.1 50000 192.0.2.2 22")
    monkeypatch.setenv("USER", "bob")
    assert main(["open", str(SAMPLE_GZ), "--port", "0", "--timeout", "0.3"]) == 0
    out = capsys.readouterr().out.splitlines()
    port = _port_of(out)
    assert calls == []
    assert f"ssh -L {port}:127.0.0.1:{port} bob@{socket.gethostname()}" in out


def test_no_usable_browser_is_not_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gui_env(monkeypatch)
    calls = record_browser_calls(monkeypatch, webbrowser.Error("could not locate runnable browser"))
    assert main(["open", str(SAMPLE_GZ), "--port", "0", "--timeout", "0.3"]) == 0
    assert len(calls) == 1
    assert "(no browser could be started: open the link yourself)" in capsys.readouterr().out.splitlines()


def test_missing_file_or_directory_exit_1_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.json.gz"
    assert main(["open", str(missing), "--no-browser"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"tracefuse: error: {missing}: no such file"]

    assert main(["open", str(tmp_path), "--no-browser"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"tracefuse: error: {tmp_path}: is a directory; give the trace file to open"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "locked.json.gz"
    shutil.copyfile(SAMPLE_GZ, path)
    path.chmod(0)
    try:
        assert main(["open", str(path), "--no-browser"]) == 1
    finally:
        path.chmod(0o600)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"tracefuse: error: {path}: cannot be read: ")


def test_port_in_use_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["open", str(SAMPLE_GZ), "--port", str(port), "--no-browser", "--timeout", "0.3"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"tracefuse: error: 127.0.0.1:{port}: port already in use")


@pytest.mark.parametrize(
    "bad", [["--port", "70000"], ["--port", "x"], ["--timeout", "0"], ["--timeout", "-1"]]
)
def test_bad_options_are_usage_errors(bad: List[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["open", str(SAMPLE_GZ), *bad])
    assert e.value.code == 2


# --------------------------------------------------------------------------- small rules
def test_ssh_line_and_browser_rules() -> None:
    assert ssh_tunnel_line(9001, {"USER": "alice"}, "login1") == "ssh -L 9001:127.0.0.1:9001 alice@login1"
    assert ssh_tunnel_line(9001, {"LOGNAME": "carol"}, "login1") == "ssh -L 9001:127.0.0.1:9001 carol@login1"
    assert ssh_tunnel_line(9001, {}, "login1") == "ssh -L 9001:127.0.0.1:9001 login1"
    assert browser_expected({"DISPLAY": ":0"}, "linux")
    assert browser_expected({"WAYLAND_DISPLAY": "wayland-0"}, "linux")
    assert not browser_expected({}, "linux")  # would start lynx/w3m in the terminal
    assert not browser_expected({"DISPLAY": ":0", "SSH_CONNECTION": "a b c d"}, "linux")
    assert browser_expected({}, "darwin")
    assert browser_expected({"BROWSER": "firefox"}, "linux")


def test_origin_option_sets_cors_and_link(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    own_ui = "http://localhost:10000"
    server = bind_server(str(SAMPLE_GZ), 0, own_ui)
    ready: queue.Queue[int] = queue.Queue()
    t = threading.Thread(
        target=serve_until_sent,
        args=(server,),
        kwargs={"timeout_s": SAFETY_NET_S, "on_ready": ready.put},
        daemon=True,
    )
    t.start()
    port = ready.get(timeout=WAIT_S)
    status, headers, _ = request(f"http://127.0.0.1:{port}/{server.token}/{SAMPLE_GZ.name}")
    assert status == 200 and headers["access-control-allow-origin"] == own_ui
    t.join(timeout=WAIT_S)
    assert not t.is_alive()

    gui_env(monkeypatch)
    assert (
        main(
            [
                "open",
                str(SAMPLE_GZ),
                "--port",
                "0",
                "--no-browser",
                "--timeout",
                "0.3",
                "--origin",
                own_ui + "/",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    port = _port_of(out)
    link = next(line for line in out if line.startswith(own_ui))
    assert link == f"{own_ui}/#!/?url=http://127.0.0.1:{port}/{_token_of(link)}/{SAMPLE_GZ.name}"
    assert not any(
        line.startswith("Note: ui.perfetto.dev") for line in out
    )  # the CSP note is about ui.perfetto.dev only


# --------------------------------------------------------------------------- shared hosts
def test_only_the_secret_path_serves_the_file(tmp_path: Path) -> None:
    """Another local user can reach the loopback port but not guess the path: every
    path but /TOKEN/NAME is a 404 for every method, and says nothing about the file."""
    srv = ServerThread(SAMPLE_GZ)
    name = SAMPLE_GZ.name
    other = bind_server(str(SAMPLE_GZ), 0)
    assert other.token != srv.token and len(srv.token) == 22  # fresh 128-bit tokens
    other.server_close()
    wrong_token = ("x" if srv.token[0] != "x" else "y") + srv.token[1:]
    guesses = [
        name,
        srv.token,
        srv.token + "/",
        f"{wrong_token}/{name}",
        f"{srv.token.upper() if srv.token.upper() != srv.token else srv.token.lower()}/{name}",
        f"{srv.token}/{name}/x",
        f"x/{srv.token}/{name}",
        f"{srv.token}{name}",
    ]
    for path in guesses:
        for method in ("GET", "HEAD", "OPTIONS"):
            status, headers, body = request(srv.bare_url(path), method)
            assert status == 404, (path, method)
            assert name.encode() not in body and srv.token.encode() not in body
    assert srv.thread.is_alive()
    status, _, body = request(srv.url(name))
    assert status == 200 and body == SAMPLE_GZ.read_bytes()
    assert srv.wait_stopped().completed


def test_listens_on_loopback_only() -> None:
    server = bind_server(str(SAMPLE_GZ), 0)
    try:
        assert server.server_address[0] == "127.0.0.1"
        port = int(server.server_address[1])
        try:
            own = {ip for *_, (ip, *_) in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
        except OSError:
            own = set()
        for ip in sorted(own - {"127.0.0.1"}):
            if ip.startswith("127."):
                continue  # another loopback address (Debian's 127.0.1.1): not reachable either way
            with pytest.raises(OSError):  # not listening on the host's other addresses
                socket.create_connection((ip, port), timeout=WAIT_S).close()
    finally:
        server.server_close()


def test_a_second_client_is_never_served(tmp_path: Path) -> None:
    """While one download runs another GET is refused (409); once it completed, the
    token is spent (410) and the server stops, closing the port."""
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(64 * 1024 * 1024)  # larger than the socket buffers: the first download stays open
    srv = ServerThread(big)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=WAIT_S) as first:
        first.sendall(f"GET /{srv.token}/{big.name} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        got = first.recv(65536)
        assert got.startswith(b"HTTP/1.1 200 ")
        status, headers, body = request(srv.url(big.name))  # a second client meanwhile
        assert status == 409 and len(body) < 100
        assert headers["access-control-allow-origin"] == ORIGIN
        total = len(got) - got.index(b"\r\n\r\n") - 4
        while True:
            chunk = first.recv(1 << 20)
            if not chunk:
                break
            total += len(chunk)
        assert total == 64 * 1024 * 1024
    result = srv.wait_stopped()
    assert result.completed and result.bytes_sent == total
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=WAIT_S).close()


def test_spent_token_answers_410_until_the_port_closes() -> None:
    """The window between the first complete download and the port closing: any GET
    there is refused with 410, never served."""
    server = bind_server(str(SAMPLE_GZ), 0)
    try:
        assert server.claim(object()) is None  # nothing sent yet: a client may start
        server.done.set()  # as after one complete download
        assert server.claim(object()) == 410
    finally:
        server.server_close()


@pytest.mark.parametrize(
    "name, text", [("report.html", "<!DOCTYPE html><html></html>"), ("x.json", "<html>")]
)
def test_an_html_page_is_refused_not_served(
    tmp_path: Path, name: str, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / name
    page.write_text(text)
    assert main(["open", str(page), "--no-browser", "--port", "0"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"tracefuse: error: {page}: is an HTML page (tracefuse report writes one), not a trace: Perfetto "
        "cannot open it; open it in a browser as it is (it fetches nothing), or give open the merged trace"
    ]

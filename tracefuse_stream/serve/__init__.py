"""Serving a trace to the Perfetto UI: ``tracefuse open FILE``.

``http_server`` is the one-file, loopback-only HTTP server (and what Perfetto's UI
requires of it); ``command`` is the subcommand: its arguments, the printed link and
``ssh -L`` line, the browser.
"""

from tracefuse_stream.serve.command import add_open_arguments, cmd_open, perfetto_link, ssh_tunnel_line

__all__ = ["add_open_arguments", "cmd_open", "perfetto_link", "ssh_tunnel_line"]

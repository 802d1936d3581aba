"""What ui.perfetto.dev asks of a server it fetches a trace from: the origin its requests
come from (CORS answers exactly that origin) and the one loopback port its
Content-Security-Policy lets it fetch from.

Its own module so that ``cli.app`` builds ``open``'s arguments (their defaults) without
importing ``http.server``: the server is imported when ``open`` runs.
"""

PERFETTO_ORIGIN = "https://ui.perfetto.dev"
DEFAULT_PORT = 9001  # the only loopback port ui.perfetto.dev's Content-Security-Policy allows

__all__ = ["DEFAULT_PORT", "PERFETTO_ORIGIN"]

"""Command line: ``python -m tracefuse_stream`` / ``tracefuse`` (merge, info, verify)."""

from tracefuse_stream.cli.app import main

__all__ = ["main"]

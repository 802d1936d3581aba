"""Command line: ``python -m tracefuse_stream`` / ``tracefuse`` (merge, info, verify)."""

from tracefuse_stream.cli.app import main
from tracefuse_stream.cli.signals import ignore_from_now_on


def entry() -> int:
    """The ``tracefuse`` script and ``python -m tracefuse_stream``: :func:`main`, then
    no signal can turn the command's status into an end by the signal."""
    code = main()
    ignore_from_now_on()
    return code


__all__ = ["entry", "main"]

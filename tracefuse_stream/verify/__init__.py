"""``verify``: a streaming check that a merged trace will render right in Perfetto.

The command line is :mod:`tracefuse_stream.cli` (``tracefuse verify``); this package is
the library, below it."""

from tracefuse_stream.verify.check import VerifyReport, verify

__all__ = ["VerifyReport", "verify"]

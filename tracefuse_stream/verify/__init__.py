"""``verify``: a streaming check that a merged trace will render right in Perfetto."""

from tracefuse_stream.verify.check import VerifyReport, main, verify

__all__ = ["VerifyReport", "main", "verify"]

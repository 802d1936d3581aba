"""Exact JSON values, in one place: the decoder and encoder the fast paths share.

Decoding gives what ijson's ``use_float=False`` gives — integers of any size, every
other number a ``Decimal`` with its original digits — and encoding writes those back
as JSON numbers unchanged (no float in between). Both are msgspec, whose C decoder is
about 3x faster than ijson's per-value Python callbacks.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec
import orjson

DecodeError = msgspec.DecodeError

FLOAT_EXACT_LIMIT = float(2**43)  # |ts| below this: a double keeps every ns digit

_decoder = msgspec.json.Decoder(float_hook=Decimal)
_encoder = msgspec.json.Encoder(decimal_format="number")


def loads_exact(data: Any) -> Any:
    """Decode JSON bytes (or bytearray/memoryview) with exact numbers."""
    return _decoder.decode(data)


def dumps_fast(obj: Any) -> bytes:
    """Encode with Decimals written as numbers; ints of any size kept."""
    return _encoder.encode(obj)


def encode_lines(items: Any) -> bytes:
    """Encode each item on its own line (newline-terminated), like ``dumps_fast``."""
    return _encoder.encode_lines(items)


def default_number(obj: Any, _decimal: Any = Decimal, _fragment: Any = orjson.Fragment) -> Any:
    """orjson ``default=``: write Decimals with their original digits (called for
    every non-integer number, so it is kept minimal; ijson never yields NaN)."""
    if type(obj) is _decimal and obj.is_finite():
        return _fragment(str(obj))
    raise TypeError(f"cannot serialise {obj!r} as strict JSON")


def big_ints_to_fragments(obj: Any) -> Any:
    """Replace integers beyond 64 bits (which orjson refuses) by exact fragments."""
    if type(obj) is int:
        if not -(1 << 63) <= obj < (1 << 64):
            return orjson.Fragment(str(obj).encode())
        return obj
    if type(obj) is dict:
        return {k: big_ints_to_fragments(v) for k, v in obj.items()}
    if type(obj) is list:
        return [big_ints_to_fragments(v) for v in obj]
    return obj


def reraise_interruption(err: BaseException) -> None:
    """Re-raise a Ctrl-C / SIGTERM (``BaseException`` s) that orjson wrapped into ``JSONEncodeError``.

    The signal handler runs wherever Python code is executing, and for most events
    that is inside ``default_number``; orjson turns whatever ``default=`` raises into
    its own ``JSONEncodeError`` (the original as ``__cause__``). Without this, a
    retry or a salvage "skip" would swallow the interruption and the merge would
    carry on to a normal exit.
    """
    cause = err.__cause__
    if cause is not None and not isinstance(cause, Exception):
        raise cause


def dumps_exact(ev: Any) -> bytes:
    """Serialise with exact numbers: Decimals and >64-bit ints keep every digit."""
    try:
        return orjson.dumps(ev, default=default_number)
    except orjson.JSONEncodeError as e:
        reraise_interruption(e)
    try:
        return orjson.dumps(big_ints_to_fragments(ev), default=default_number)
    except orjson.JSONEncodeError as e:
        reraise_interruption(e)
        raise


__all__ = [
    "FLOAT_EXACT_LIMIT",
    "DecodeError",
    "big_ints_to_fragments",
    "default_number",
    "dumps_exact",
    "dumps_fast",
    "encode_lines",
    "loads_exact",
    "reraise_interruption",
]

"""How much zstd input may be fed at once so that its output stays bounded.

Why: ``zstandard``'s streaming decompressor has no ``max_length`` (zlib has): one call
decompresses everything it is given. A zstd block of 4 bytes (an RLE block) expands to
128 KB, so a 256 KB read of a "bomb" -- a small file of very repetitive JSON -- would
come out as gigabytes at once. Its stream reader bounds the output but reports a
truncated file as a clean end, which the merge must never take for a complete input.

So the decompressor stays, and this walker reads the frame and block headers
(RFC 8878: a frame header, then blocks of at most 128 KB of output each, each with a
3-byte header giving its type and size) to cut the input before the block that would
take the output past the budget. Skippable frames produce nothing. Anything it does
not recognise (a damaged header, an unknown magic) ends the walk: the rest is fed as
is and the decompressor reports the damage, exactly as before.
"""

from __future__ import annotations

from typing import Optional

ZSTD_MAGIC = 0xFD2FB528
SKIPPABLE_MASK, SKIPPABLE_MAGIC = 0xFFFFFFF0, 0x184D2A50
BLOCK_MAX = 128 * 1024  # the largest output of one block (RFC 8878, Block_Maximum_Size)
_FCS_SIZES = (0, 2, 4, 8)
_DID_SIZES = (0, 1, 2, 4)


class ZstdBudget:
    """Walks the compressed stream as it is fed; :meth:`take` says how many of the
    next bytes may go to the decompressor for at most ``budget`` bytes of output
    (at least one block, so every call makes progress)."""

    def __init__(self) -> None:
        self._head = b""  # header bytes read so far (frame or block header)
        self._need = 4  # bytes of header still to come (4: a frame's magic)
        self._state = "magic"  # magic, frame, skip_size, block: which header comes next
        self._skip = 0  # payload bytes of the current block / skippable frame / checksum
        self._pending = 0  # output bound of a block whose header was read, not yet fed
        self._checksum = False
        self._after = "magic"  # what follows the current payload
        self.lost = False  # something unrecognised: no more bounds

    def take(self, data: bytes, budget: int) -> int:
        """How many bytes of ``data`` (the stream's next bytes) to feed now."""
        if self.lost:
            return len(data)
        out, i, n = self._pending, 0, len(data)
        self._pending = 0
        while i < n:
            if self._skip:
                k = min(self._skip, n - i)
                i += k
                self._skip -= k
                if not self._skip and self._payload_done():
                    return i  # a frame ends here: the decompressor starts the next one anew
                continue
            k = min(self._need, n - i)
            self._head += data[i : i + k]
            i += k
            self._need -= k
            if self._need:
                continue
            bound = self._header_done()
            if self.lost:
                return n
            if bound is not None:
                if out and out + bound > budget:
                    self._pending = bound  # counted in the next call, with its payload
                    return i
                out += bound
                if not self._skip and self._payload_done():
                    return i
        return n

    def _payload_done(self) -> bool:
        """The current payload is complete: expect the next header. True at a frame's end."""
        self._state, self._need = self._after, 4 if self._after == "magic" else 3
        return self._after == "magic"

    def _header_done(self) -> Optional[int]:
        """Interpret a complete header; the output bound of a block header, else None."""
        head, self._head = self._head, b""
        if self._state == "magic":
            magic = int.from_bytes(head, "little")
            if magic == ZSTD_MAGIC:
                self._state, self._need = "frame", 1
            elif magic & SKIPPABLE_MASK == SKIPPABLE_MAGIC:
                self._state, self._need = "skip_size", 4
            else:
                self.lost = True
            return None
        if self._state == "skip_size":
            self._skip, self._after = int.from_bytes(head, "little"), "magic"
            if not self._skip:
                self._payload_done()
            return None
        if self._state == "frame":
            if len(head) == 1:  # the descriptor: how long the rest of the frame header is
                fhd = head[0]
                if fhd & 0x08:  # reserved bit
                    self.lost = True
                    return None
                single = bool(fhd & 0x20)
                fcs = _FCS_SIZES[fhd >> 6] or (1 if single else 0)
                rest = (0 if single else 1) + _DID_SIZES[fhd & 3] + fcs
                self._checksum = bool(fhd & 0x04)
                self._head = head
                if rest:
                    self._need = rest
                    return None
            self._state, self._need = "block", 3
            return None
        # a block header: last-block bit, type, size
        h = int.from_bytes(head, "little")
        last, kind, size = h & 1, (h >> 1) & 3, h >> 3
        if kind == 3 or size > BLOCK_MAX:
            self.lost = True
            return None
        self._after = "magic" if last else "block"
        # the payload: RLE blocks have one byte; a frame's last block carries its checksum
        self._skip = (1 if kind == 1 else size) + (4 if last and self._checksum else 0)
        return size if kind in (0, 1) else BLOCK_MAX


__all__ = ["ZstdBudget", "BLOCK_MAX"]

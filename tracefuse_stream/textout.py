"""Text a person reads: strings from traces escaped, p values in one rounding.

Why: op names, host names, process-group names and file names come from the traces
(and their folders); printed as they are, an ESC sequence recolours or clears the
terminal and a CR or LF starts a line the trace wrote (``straggler: none``), so a
trace could forge the report. Every text report (``info``, ``info --collectives``,
the merge summary, ``verify``, ``report``'s line, error messages) prints such strings
through :func:`printable` (one field) or :func:`terminal` (a whole report: every
control character but the line breaks the report itself made). ``p_chance`` is shown
to 2 significant digits, rounded half up, by :func:`p_round` / :func:`p_text`
everywhere: the text, the ``--json`` number and the page's string agree.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal

# C0 and C1 controls, DEL, the Unicode line/paragraph separators and the bidi
# embedding/override/isolate controls (they reorder what a terminal shows)
_CONTROL = "\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_FIELD = re.compile(f"[{_CONTROL}]")
_REPORT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")  # not \t, \n
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\x1b"}


def _escape(m: re.Match[str]) -> str:
    c = m.group(0)
    if c in _NAMED:
        return _NAMED[c]
    o = ord(c)
    return f"\\x{o:02x}" if o <= 0xFF else f"\\u{o:04x}"


def printable(s: object) -> str:
    """One field from a trace (a name, a host, a path) with every control character
    escaped (``\\x1b``, ``\\r``, ``\\n``, ``\\u2028``): it stays on its line and
    cannot restyle the terminal."""
    text = str(s)
    return _FIELD.sub(_escape, text) if _FIELD.search(text) else text


def terminal(text: str) -> str:
    """A whole report: every control character escaped except the newlines (and tabs) it
    is made of (its fields went through :func:`printable` where a newline could come from a
    trace; this is the net under them)."""
    return _REPORT.sub(_escape, text) if _REPORT.search(text) else text


def p_round(p: float) -> float:
    """``p`` to 2 significant digits, half up (0.125 -> 0.13, 6.04e-08 -> 6e-08)."""
    if not math.isfinite(p) or p <= 0:
        return p
    d = Decimal(repr(p))
    return float(d.quantize(Decimal(1).scaleb(d.adjusted() - 1), rounding=ROUND_HALF_UP))


def p_text(p: float) -> str:
    """``p`` as every report prints it: :func:`p_round`, then the shortest form
    (``0.13``, ``0.016``, ``6e-08``, ``1``)."""
    return f"{p_round(p):.2g}"


__all__ = ["p_round", "p_text", "printable", "terminal"]

"""Text the command line prints in tables: stored names and data shown safely, and padded by their width on screen.

A member, an owner or data is whatever a caller stored: a control character in it (an escape sequence, a newline, a
tab) or a bidirectional override would reach the operator's terminal and rewrite the screen or the table's rows. Such
characters are shown escaped, as Python spells them. Columns are padded by display width (``wcwidth``): a CJK name
takes two columns a character, and ``str.ljust`` would misalign every row after it.
"""

from __future__ import annotations

import unicodedata

from wcwidth import wcswidth

#: Bidirectional embeddings, overrides and isolates: they reorder what follows them on screen.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _escaped(char: str) -> str:
    if char in _BIDI or unicodedata.category(char) == "Cc":
        return repr(char)[1:-1]
    return "\\\\" if char == "\\" else char


def shown(text: str) -> str:
    """``text`` with its control characters and bidirectional controls escaped (``\\x1b``, ``\\n``, ``\\u202e``), and
    its backslashes doubled (so that a name spelt ``\\x1b`` does not pass for one holding an escape)."""
    if text.isprintable() and "\\" not in text and not _BIDI.intersection(text):
        return text
    return "".join(map(_escaped, text))


def width(text: str) -> int:
    """Columns ``text`` takes on a terminal (its length where ``wcwidth`` cannot tell)."""
    found = wcswidth(text)
    return found if found >= 0 else len(text)


def padded(text: str, columns: int) -> str:
    """``text`` followed by spaces up to ``columns`` on screen."""
    return text + " " * max(columns - width(text), 0)

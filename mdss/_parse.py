"""Numbers and names in text mdss reads (URLs, command lines, CSV files, window names, stored ids), strictly.

Python's ``int()``, ``float()`` and ``str.isdigit()`` accept Arabic-Indic and full-width digits (``int("٣") == 3``),
underscores (``int("1_0") == 10``) and surrounding whitespace, newlines included; a regex's ``$`` matches before a
trailing newline and ``\\d`` any Unicode digit. So every pattern here is ASCII-only (``[0-9]``, ``re.ASCII``) and
matched whole (``fullmatch``).

>>> integer("42"), number("-2.5e3"), number("inf")
(42, -2500.0, inf)
>>> [ok for text in ("٣", "１", "1_0", "7\\n", " 7", "") for ok in [DIGITS.fullmatch(text)] if ok]
[]
"""

from __future__ import annotations

import base64
import re
from typing import Any

from .exceptions import shown

DIGITS = re.compile(r"[0-9]+", re.ASCII)
INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
HEX = re.compile(r"[0-9a-f]+", re.ASCII)
#: What ``float()`` reads, in ASCII and without underscores or whitespace.
NUMBER = re.compile(
    r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.ASCII | re.IGNORECASE
)
#: A URL-safe base64 text without padding (page cursors).
BASE64URL = re.compile(r"[A-Za-z0-9_-]*", re.ASCII)


def integer(text: str) -> int:
    """``text`` as an int: an optional sign and ASCII digits, nothing else; ValueError otherwise."""
    if not INTEGER.fullmatch(text):
        raise ValueError(f"expected an integer (ASCII digits), got {shown(text)}")
    return int(text)


def number(text: str) -> float:
    """``text`` as a float: ASCII digits, ``.``, an exponent, ``inf`` or ``nan``, nothing else; ValueError otherwise."""
    if not NUMBER.fullmatch(text):
        raise ValueError(f"expected a number (ASCII digits), got {shown(text)}")
    return float(text)


def base64url(text: Any) -> bytes:
    """The bytes of a URL-safe base64 text without padding (a page cursor); ValueError for anything else
    (``base64.urlsafe_b64decode`` skips characters outside the alphabet: a newline, a NUL, ...)."""
    if not isinstance(text, str) or not BASE64URL.fullmatch(text):
        raise ValueError(f"expected URL-safe base64, got {shown(text)}")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

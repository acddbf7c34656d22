"""Page cursors: where a page ended, in a URL-safe string bound to its set.

A cursor carries the snapshot's score tree (root, height, count), the
position after the last entry returned and that entry, so the next page
reads the same snapshot, or, once that snapshot is collected, continues by
key. It holds a tag of the set's key prefix and a CRC-32, so a cursor of
another set, a truncated or a tampered one is refused with
:class:`InvalidArgumentError`; every field is range-checked. It pins no
storage.
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

import msgpack

from ._codec import MAX_HEIGHT
from ._order import Score, check_member, check_score
from .exceptions import InvalidArgumentError

State = tuple[str | None, int, int, int, str, Score]  # root, height, count, position, last member, last score


def _tag(prefix: str) -> int:
    return zlib.crc32(prefix.encode())


def encode(prefix: str, state: State) -> str:
    payload = msgpack.packb([_tag(prefix), *state])
    return base64.urlsafe_b64encode(payload + zlib.crc32(payload).to_bytes(4, "big")).decode("ascii").rstrip("=")


def decode(prefix: str, name: str, cursor: Any) -> State:
    """The state a cursor of the set with key ``prefix`` carries; InvalidArgumentError for anything else."""
    try:
        data = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        payload = data[:-4]
        if zlib.crc32(payload).to_bytes(4, "big") != data[-4:]:
            raise ValueError("checksum")
        tag, root, height, count, position, member, score = msgpack.unpackb(payload)
        if tag != _tag(prefix):
            raise ValueError("another set's cursor")
        if not (root is None or type(root) is str) or not all(type(n) is int for n in (height, count, position)):
            raise ValueError("types")
        if not (0 <= height <= MAX_HEIGHT and 0 < position < count):
            raise ValueError("ranges")
        check_member(member)
        check_score(score)
    except Exception:
        raise InvalidArgumentError(f"not a page cursor of set {name!r}: {cursor!r:.80}") from None
    return root, height, count, position, member, score

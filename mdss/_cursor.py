"""Page cursors: where a page ended or began, in a URL-safe string bound to its set and its direction.

A forward cursor (a page's ``next``) carries the snapshot's score tree (root, height, count) and its update log (base
and end sequence numbers), the position after the last entry returned and that entry (in a set whose ties go by
``"first"``, with its number among its ties), so the next page reads the same
snapshot or, once it is collected or its log merged, continues by key just after that entry. A backward cursor (a
page's ``previous``) is its mirror: the position of the first entry returned and that entry, so the previous page ends
just before it. A tag of the set's key prefix (and of the direction) and a CRC-32 get a cursor of another set, a
truncated or a tampered one refused with :class:`InvalidArgumentError`; every field is range-checked. It pins no
storage.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Sequence
from typing import Any, NamedTuple

from . import _codec
from ._codec import MAX_HEIGHT
from ._order import Score, check_score
from ._parse import base64url
from .exceptions import InvalidArgumentError, shown

#: The longest member a cursor may name: the longest entry a set's own ops write (a leaderboard row, ~11 KB).
MAX_ENTRY_CHARS = 1 << 16


class State(NamedTuple):
    """Where a page ended (or began): the score tree (``size`` entries), the log's range, the merged ``count``, the
    position after the last entry returned (of the first, going back), and that entry."""

    root: str | None
    height: int
    size: int
    base: int
    end: int
    count: int  # type: ignore[assignment]  # shadows tuple.count, as a NamedTuple field may
    position: int
    member: str
    score: Score
    tie: int | None = None  # a "first" set's number of that entry among its ties (cursors before it have none)


def state_of(ranking: Any, position: int, last: Any, tie: int | None = None) -> State:
    """The state at ``position`` of ``ranking`` (a tree, or a tree with a log view), next to entry ``last`` (whose
    number among its ties is ``tie``, in a ``"first"`` set)."""
    tree, view = (ranking, None) if not hasattr(ranking, "view") else (ranking.tree, ranking.view)
    end = 0 if view is None else view.end
    base = end if view is None else view.overlay.base
    return State(tree.root, tree.height, tree.count, base, end, ranking.count, position, last.member, last.score, tie)


def _tag(tag: str, back: bool) -> int:
    """The CRC-32 a cursor starts with: of its issuer's tag, and for a backward cursor of its direction too (a forward
    cursor's tag is the one cursors had before they went both ways: those handed out then still continue)."""
    return zlib.crc32(tag.encode() + (b"\0previous" if back else b""))


def pack(tag: str, fields: Sequence[Any], back: bool = False) -> str:
    """A cursor: the msgpack list ``[CRC-32 of tag, *fields]`` and its CRC-32, base64url without padding. The one
    envelope of every cursor mdss hands out (sets, sharded sets, leaderboards); ``tag`` binds it to what issued it and
    ``back`` (a page's ``previous``) to its direction."""
    payload = _codec.pack([_tag(tag, back), *fields])
    return base64.urlsafe_b64encode(payload + zlib.crc32(payload).to_bytes(4, "big")).decode("ascii").rstrip("=")


def unpack(tag: str, cursor: Any, what: str) -> tuple[list[Any], bool]:
    """The fields of a cursor :func:`pack` made with ``tag``, and whether it goes back; else
    :class:`InvalidArgumentError` naming ``what``."""
    try:
        data = base64url(cursor)
        payload = data[:-4]
        if len(data) < 5 or zlib.crc32(payload).to_bytes(4, "big") != data[-4:]:
            raise ValueError("checksum")
        found = _codec.loads(payload)
        if type(found) is not list or not found or found[0] not in (_tag(tag, False), _tag(tag, True)):
            raise ValueError("another's cursor")
    except Exception:
        raise InvalidArgumentError(f"not a page cursor of {what}: {shown(cursor)}") from None
    return found[1:], found[0] != _tag(tag, False)


def encode(prefix: str, state: State, back: bool = False) -> str:
    return pack(prefix, state if state.tie is not None else state[:-1], back)


def decode(prefix: str, name: str, cursor: Any) -> tuple[State, bool]:
    """The state a cursor of the set with key ``prefix`` carries, and whether it goes back; InvalidArgumentError for
    anything else."""
    fields, back = unpack(prefix, cursor, f"set {name!r}")
    try:
        state = State(*fields)
        if not (state.root is None or type(state.root) is str) or not all(type(n) is int for n in state[1:7]):
            raise ValueError("types")
        if not (0 <= state.height <= MAX_HEIGHT and 0 < state.position < state.count and state.size >= 0):
            raise ValueError("ranges")
        if not 0 <= state.base <= state.end:
            raise ValueError("log range")
        # Not check_member: a set's own entries may be longer than callers' members (leaderboard rows).
        if type(state.member) is not str or not state.member or len(state.member) > MAX_ENTRY_CHARS:
            raise ValueError("member")
        check_score(state.score)
        if state.tie is not None and not (type(state.tie) is int and -(1 << 63) <= state.tie < 1 << 63):
            raise ValueError("tie")
    except Exception:
        raise InvalidArgumentError(f"not a page cursor of set {name!r}: {shown(cursor)}") from None
    return state, back

"""Bytes on the store: msgpack arrays that start with a format version.

An entry set is ``[1, 0, members, scores]``; a manifest is
``[1, 1, height, child_ids, child_counts, first_members, first_scores]``
(the first entry of each child, from which the tree derives its key); a head
is a msgpack map. Integers stay integers (msgpack has 64-bit ints), floats are
IEEE doubles. Anything that does not decode to that shape raises
:class:`~mdss.exceptions.CorruptDataError` naming the key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import zlib

import msgpack

from .exceptions import CorruptDataError

FORMAT = 1
LEAF = 0
MANIFEST = 1

_packb = msgpack.Packer(use_bin_type=True).pack


def seal(payload: bytes) -> bytes:
    """``payload`` followed by its CRC-32 (4 bytes, big-endian), which :func:`unseal` verifies.

    A CRC-32 catches every flipped byte and every burst of up to 32 bits:
    stored bytes that still decode after damage are refused, not served.
    """
    return payload + zlib.crc32(payload).to_bytes(4, "big")


def unseal(key: str, data: bytes) -> bytes:
    """The payload of sealed bytes; :class:`CorruptDataError` naming ``key`` if the checksum fails."""
    payload = data[:-4]
    if len(data) < 5 or zlib.crc32(payload).to_bytes(4, "big") != data[-4:]:
        raise CorruptDataError("stored bytes fail their checksum", key)
    return payload


def encode_leaf(members: Sequence[str], scores: Sequence[Any]) -> bytes:
    return _packb([FORMAT, LEAF, members, scores])


def encode_manifest(
    height: int, ids: Sequence[str], counts: Sequence[int], members: Sequence[str], scores: Sequence[Any]
) -> bytes:
    return _packb([FORMAT, MANIFEST, height, ids, counts, members, scores])


def decode_node(key: str, data: bytes) -> tuple[Any, ...]:
    """The node's fields: ``(LEAF, members, scores)`` or ``(MANIFEST, height, ids, counts, members, scores)``.

    Arrays decode as tuples: immutable like the nodes, and the garbage
    collector stops tracking a tuple of strings and numbers after one look.
    """
    try:
        node = msgpack.unpackb(data, raw=False, use_list=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise CorruptDataError(f"stored node does not decode: {exc}", key) from exc
    if type(node) is not tuple or len(node) < 4 or node[0] != FORMAT:
        version = node[0] if type(node) is tuple and node else None
        raise CorruptDataError(f"stored node has an unknown format (version {version!r})", key)
    kind = node[1]
    fields = node[2:]
    arrays = all(type(x) is tuple for x in fields[kind == MANIFEST :])
    if kind == LEAF and len(fields) == 2 and arrays and len(fields[0]) == len(fields[1]):
        return node[1:]
    if (
        kind == MANIFEST
        and len(fields) == 5
        and type(fields[0]) is int
        and arrays
        and len(set(map(len, fields[1:]))) == 1
    ):
        return node[1:]
    raise CorruptDataError("stored node is malformed", key)


def encode_head(head: dict[str, Any]) -> bytes:
    return _packb({"v": FORMAT, **head})


def decode_head(key: str, data: bytes) -> dict[str, Any]:
    try:
        head = msgpack.unpackb(data, raw=False)
    except Exception as exc:
        raise CorruptDataError(f"stored head does not decode: {exc}", key) from exc
    if type(head) is not dict or head.get("v") != FORMAT:
        raise CorruptDataError("stored head has an unknown format", key)
    try:
        for tree in ("score", "member"):
            root, height, count = head[tree]
            if not (root is None or type(root) is str) or type(height) is not int or type(count) is not int:
                raise TypeError(tree)
        if head["order"] not in ("asc", "desc") or type(head["chunk"]) is not int or type(head["gen"]) is not int:
            raise TypeError("settings")
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptDataError(f"stored head is malformed ({exc})", key) from None
    return head

"""Bytes on the store: msgpack arrays that start with a format version, sealed with a CRC-32.

Format 2: an entry set is ``seal(msgpack([2, 0, members, scores]))``; a manifest is ``seal(msgpack([2, 1, height,
child_ids, child_counts, first_members, first_scores]))``; the head is ``seal(msgpack(map))`` (``mdss._head``). Format 3
(since dense ranks) changed score-tree manifests only: ``[3, 1, ..., distincts, last_scores]``, each child's number of
distinct scores and its last score (nil for a child summarized before format 3). Format 5 (patched entry sets) adds a
patch ``[5, 6, removed members, removed scores, added members, added scores]``, what a merge changed in a stored entry
set, and manifests ``[5, 1, height, ids, counts, members, scores, distincts, lasts]`` (the last two nil in the member
index) that may name a child ``base+patch``. Format 6 (manifest deltas) adds a delta ``[6, 7, height, removed members,
removed scores, ids, counts, members, scores, distincts, lasts]``, the children a merge took out of a stored manifest
(named by their first entries) and those it put in, and manifests ``[6, 1, ...]`` (as format 5's) that may name a child
manifest ``base+delta+delta...``. Formats 1 (2 without the checksum) and 2 are still read. Anything that
does not decode to the right shape and types raises :class:`~mdss.exceptions.CorruptDataError` naming the key.
docs/format.md describes every field.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from operator import eq, itemgetter, le
from typing import Any

import attrs
import lz4.block
import msgpack

from ._keys import PARTS
from ._order import TIEBREAKS
from .exceptions import CorruptDataError

#: The format field of every value but score-tree manifests.
FORMAT = 2
#: The format field of score-tree manifests since dense ranks (distinct counts and last scores per child).
DENSE = 3
LEGACY = 1
#: The format field of compressed entry sets (since compression, issue 36; the newest stored format, so a set written
#: now is "format 4"): ``[4, 0, size, block]``, the lz4 block
#: of the msgpack array ``[members, scores]``, ``size`` bytes long. Payloads from :data:`ZIP_FROM` bytes are
#: compressed when that saves bytes; decoding refuses a size past :data:`MAX_UNZIPPED` (damage, not a node).
ZIPPED = 4
ZIP_FROM = 256
#: Bytes a compressed entry set must save over the plain one: the frame's size field and block header.
ZIP_MARGIN = 16
MAX_UNZIPPED = 64 << 20
#: The format field of patches, and of manifests that name a patched entry set (``base+patch``): older versions of mdss
#: refuse them as an unknown format instead of looking for a node named ``base+patch``.
PATCHED = 5
#: The format field of manifest deltas, and of manifests that name a manifest with deltas (``base+delta+...``): versions
#: that know patched entry sets but not deltas refuse them as an unknown format.
CHAINED = 6
LEAF = 0
MANIFEST = 1
NOTE = 2
PAGE = 3
SEGMENT = 4
LOG_PAGE = 5
PATCH = 6
DELTA = 7
#: Deeper than any tree of 2**64 entries with at least 2 children per manifest.
MAX_HEIGHT = 64

#: Values to msgpack bytes (str as str, bytes as bin): every stored format and cursor is msgpack through this module.
pack = msgpack.Packer(use_bin_type=True).pack


def loads(data: bytes | memoryview) -> Any:
    """The value msgpack ``data`` holds; on garbage, whatever msgpack raises (callers refuse it in their own words)."""
    return msgpack.unpackb(data, raw=False)


_NUMBERS = {int, float}
_SCORES = {int, float, str}  # a record window's score tree scores are its ties (strings)


def seal(payload: bytes) -> bytes:
    """``payload`` followed by its CRC-32 (4 bytes, big-endian), which :func:`unpack` verifies: it catches every
    flipped byte and every burst of up to 32 bits, so damaged bytes that still decode are refused, not served."""
    return payload + zlib.crc32(payload).to_bytes(4, "big")


def _sealed(data: bytes) -> memoryview | None:
    """The payload if ``data`` carries a valid checksum, else ``None``."""
    view = memoryview(data)
    if len(view) > 4 and zlib.crc32(view[:-4]).to_bytes(4, "big") == view[-4:]:
        return view[:-4]
    return None


def unpack(key: str, data: bytes, what: str, sealed: tuple[int, ...] = (FORMAT,), **options: Any) -> tuple[int, Any]:
    """``(format, object)`` from stored bytes: sealed, of a format in ``sealed`` (2), or the unsealed format 1. Damaged
    format-2 bytes fail the checksum and then fail as format 1 too (the trailer is extra data, or the version is not 1).
    """
    payload = _sealed(data)
    try:
        found = msgpack.unpackb(payload if payload is not None else data, raw=False, **options)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        found, error = None, f"{type(exc).__name__}: {exc}"
    else:
        version = (
            found.get("v") if type(found) is dict else found[0] if type(found) in (tuple, list) and found else None
        )
        if type(version) is int and (version in sealed if payload is not None else version == LEGACY):
            return version, found
        error = f"format {version!r}"
    if payload is None:
        raise CorruptDataError(f"stored {what} fails its checksum and is no format-1 {what} either ({error})", key)
    raise CorruptDataError(f"stored {what} has an unknown format ({error})", key)


def encode_leaf(members: Sequence[str], scores: Sequence[Any], compress: bool = True) -> bytes:
    """An entry set: ``[2, 0, members, scores]``, or compressed (format 4) when that saves bytes."""
    raw = pack([members, scores])
    if compress and len(raw) >= ZIP_FROM:
        block = lz4.block.compress(raw, store_size=False)
        if len(block) + ZIP_MARGIN < len(raw):
            return seal(pack([ZIPPED, LEAF, len(raw), block]))
    return seal(pack([FORMAT, LEAF, members, scores]))


_ZIPPED_HEAD = bytes([0x94, ZIPPED, LEAF])  # msgpack: an array of 4, the format, the kind


def weight_of(data: bytes) -> int:
    """What a stored node counts for in the node cache and in the log's sizing: its bytes, or a compressed entry set's
    before compression (its decoded size follows those, not the compressed ones)."""
    if data[:3] != _ZIPPED_HEAD:
        return len(data)
    reader = msgpack.Unpacker()
    reader.feed(data[3:12])  # the uncompressed size: a msgpack uint of at most 9 bytes
    try:
        size = reader.unpack()
    except Exception:  # damaged: decoding the node says so
        return len(data)
    return size if type(size) is int and 0 < size <= MAX_UNZIPPED else len(data)


def _unzipped(key: str, node: Any) -> tuple[Any, ...]:
    """A compressed entry set's ``(format, kind, members, scores)``, as a format-2 one decodes."""
    if (
        type(node) is tuple
        and len(node) == 4
        and node[1] == LEAF
        and type(node[2]) is int
        and 0 < node[2] <= MAX_UNZIPPED
        and type(node[3]) is bytes
    ):
        try:
            raw = lz4.block.decompress(node[3], uncompressed_size=node[2])
            fields = msgpack.unpackb(raw, raw=False, use_list=False) if len(raw) == node[2] else None
        except Exception:  # lz4 and msgpack raise several unrelated types on garbage
            fields = None
        if type(fields) is tuple and len(fields) == 2:
            return (FORMAT, LEAF, *fields)
    raise CorruptDataError("stored entry set is malformed (its compressed block does not decode)", key)


def encode_manifest(
    height: int,
    ids: Sequence[str],
    counts: Sequence[int],
    members: Sequence[str],
    scores: Sequence[Any],
    distincts: Sequence[int | None] | None = None,
    lasts: Sequence[Any] | None = None,
) -> bytes:
    """A manifest: format 3 with each child's distinct scores and last score (the score tree's), else format 2 (the
    member index's, whose scores are in no order); format 5 when a child is a patched entry set, 6 when it is a
    manifest with deltas."""
    if any(type(i) is str and "+" in i for i in ids):  # a patched child (mdss._nodes.JOIN)
        version = CHAINED if height > 1 else PATCHED
        return seal(pack([version, MANIFEST, height, ids, counts, members, scores, distincts, lasts]))
    if distincts is None:
        return seal(pack([FORMAT, MANIFEST, height, ids, counts, members, scores]))
    return seal(pack([DENSE, MANIFEST, height, ids, counts, members, scores, distincts, lasts]))


def _strings_only(values: tuple[Any, ...]) -> bool:
    """Whether every value is a ``str`` (msgpack makes no subclass of it): ``"".join`` refuses anything else, in a
    third of the time of ``set(map(type, values))`` (3 against 11 µs for the 1,000 ids of a manifest)."""
    try:
        "".join(values)
    except TypeError:
        return False
    return True


def _numbers_ok(scores: tuple[Any, ...]) -> bool:
    """Ints or floats, never NaN (only a float can be: int-only scores skip that scan). A NaN makes the sum NaN; a sum
    that is not a number (a NaN, or infinities of both signs) is looked into one by one."""
    types = set(map(type, scores))
    return types <= _NUMBERS and (float not in types or _no_nan(scores))


def _no_nan(scores: tuple[Any, ...]) -> bool:
    total = sum(scores)
    return total == total or all(map(eq, scores, scores))


def _scores_ok(scores: tuple[Any, ...]) -> bool:
    """Numbers (:func:`_numbers_ok`); or, in a record window's score tree, strings only (its ties:
    ``mdss._order.tie_key``; ``mdss._nodes.decode`` holds each kind to its tree). Strings are tried first: a join
    refuses a number at once, and checks 1,000 ties in 3 µs where a scan of their types takes 11."""
    return _strings_only(scores) or _numbers_ok(scores)


def _values_ok(values: tuple[Any, ...]) -> bool:
    """Scores, or in a member index also values (``(score, data)``, ``(score, data, seq)``): what an entry set holds.
    Values that are all ``(score, data)`` (a record window's rows, members with data) are checked at C speed: their
    types scanned once, their data joined (a join refuses any other type)."""
    if _strings_only(values):
        return True
    types = set(map(type, values))
    if types <= _NUMBERS:
        return float not in types or _no_nan(values)
    if types == {tuple} and set(map(len, values)) == {2}:
        data = tuple(map(_SECOND, values))
        return _numbers_ok(tuple(map(_FIRST, values))) and (
            _joined(data, b"") or _strings_only(data) or set(map(type, data)) <= _DATA
        )
    return all(_value_ok(v) for v in values)


def _joined(values: tuple[Any, ...], empty: bytes) -> bool:
    """Whether every value is ``bytes`` (``b"".join`` refuses anything else, a ``str`` too)."""
    try:
        empty.join(values)
    except TypeError:
        return False
    return True


_FIRST, _SECOND = itemgetter(0), itemgetter(1)


def _value_ok(value: Any, logged: bool = False) -> bool:
    """A score, ``(score, data)``, or a ``"first"`` set's ``(score, data or nil, sequence number)``; in the log
    (``logged``) the number may be nil: the entry's own (``mdss._overlay.Overlay.extend``)."""
    if type(value) is tuple:
        if len(value) == 2:
            return type(value[0]) in _NUMBERS and value[0] == value[0] and type(value[1]) in _DATA
        return (
            len(value) == 3
            and type(value[0]) in _NUMBERS
            and value[0] == value[0]
            and (value[1] is None or type(value[1]) in _DATA)
            and ((type(value[2]) is int and -(1 << 63) <= value[2] < 1 << 63) or (logged and value[2] is None))
        )
    return type(value) in _NUMBERS and value == value


_DATA = {str, bytes}


def values_later(values: tuple[Any, ...]) -> bool:
    """Whether an entry set's values are values with data (tuples: a record window's rows, members' data), which a
    member index checks as each is read (:func:`checked_value`) or all at once when all are used
    (:func:`checked_values`), not as the entry set is decoded: a lookup of one row in 1,000 then skips the checks of
    999 (about 65 of a decode's 137 us)."""
    return bool(values) and type(values[0]) is tuple


def checked_values(key: str, values: tuple[Any, ...]) -> tuple[Any, ...]:
    """``values`` if each is what an entry set may hold (as a decode checks them), else :class:`CorruptDataError`."""
    if not _values_ok(values):
        raise CorruptDataError("stored node is malformed (wrong shape or field types)", key)
    return values


def checked_value(key: str, value: Any) -> Any:
    """``value`` if it is what an entry set whose values have data may hold, else :class:`CorruptDataError`."""
    if not _value_ok(value):
        raise CorruptDataError("stored node is malformed (wrong shape or field types)", key)
    return value


def decode_node(key: str, data: bytes, values_checked: bool = True) -> tuple[Any, ...]:
    """The node's fields, each checked for its type: ``(LEAF, members, scores)`` or ``(MANIFEST, height, ids, counts,
    members, scores, distincts, lasts)``, the last two ``None`` for a manifest of format 1 or 2. Arrays decode as
    tuples: immutable like the nodes, and the garbage collector stops tracking a tuple of strings and numbers.
    ``values_checked=False``: an entry set's values with data (:func:`values_later`) are left to its reader."""
    version, node = unpack(key, data, "node", (FORMAT, DENSE, ZIPPED, PATCHED, CHAINED), use_list=False)
    if version == ZIPPED:
        node = _unzipped(key, node)
    if type(node) is not tuple or len(node) < 4:
        raise CorruptDataError("stored node is malformed", key)
    kind, fields = node[1], node[2:]
    if kind == LEAF and len(fields) == 2 and version not in (DENSE, PATCHED, CHAINED):
        members, scores = fields
        if (
            type(members) is tuple
            and type(scores) is tuple
            and len(members) == len(scores)
            and _strings_only(members)
            and ((not values_checked and values_later(scores)) or _values_ok(scores))
        ):
            return node[1:]
    elif kind == MANIFEST and len(fields) == 5 and version not in (DENSE, PATCHED) and _manifest_ok(fields):
        return (*node[1:], None, None)
    elif kind == MANIFEST and len(fields) == 7 and version in (PATCHED, CHAINED) and fields[5] is None is fields[6]:
        if _manifest_ok(fields[:5]):
            return node[1:]
    elif (
        kind == MANIFEST
        and len(fields) == 7
        and version in (DENSE, PATCHED, CHAINED)
        and _manifest_ok(fields[:5])
        and _dense_ok(fields[2], fields[5], fields[6])
    ):
        return node[1:]
    raise CorruptDataError("stored node is malformed (wrong shape or field types)", key)


def _dense_ok(counts: tuple[Any, ...], distincts: Any, lasts: Any) -> bool:
    """Whether a score-tree manifest's distinct scores and last scores per child are well typed: each child's from 1 to
    its count and a number (never NaN), or both nil. At C speed where none is nil, as in every manifest written since
    format 3."""
    if type(distincts) is not tuple or type(lasts) is not tuple or not len(distincts) == len(lasts) == len(counts):
        return False
    if set(map(type, distincts)) <= {int} and min(distincts, default=1) >= 1 and all(map(le, distincts, counts)):
        return _scores_ok(lasts)
    return all(
        (d is None and last is None) or (type(d) is int and 1 <= d <= n and type(last) in _SCORES and last == last)
        for d, n, last in zip(distincts, counts, lasts)
    )


def encode_patch(removed: tuple[Sequence[str], Sequence[Any]], added: tuple[Sequence[str], Sequence[Any]]) -> bytes:
    """A patch: the entries a merge removed from a stored entry set and those it added (each in key order)."""
    return seal(pack([PATCHED, PATCH, *removed, *added]))


def decode_patch(key: str, data: bytes) -> tuple[tuple[str, ...], tuple[Any, ...], tuple[str, ...], tuple[Any, ...]]:
    """A patch's ``(removed members, removed scores, added members, added scores)``, each field checked for its type."""
    _, found = unpack(key, data, "patch", (PATCHED,), use_list=False)
    fields = found[2:] if type(found) is tuple and len(found) == 6 and found[1] == PATCH else ()
    if (
        fields
        and all(type(f) is tuple for f in fields)
        and (len(fields[0]), len(fields[2])) == (len(fields[1]), len(fields[3]))
        and _strings_only(fields[0] + fields[2])
        and _values_ok(fields[1] + fields[3])
    ):
        return fields
    raise CorruptDataError("stored patch is malformed", key)


def encode_delta(
    height: int,
    removed: tuple[Sequence[str], Sequence[Any]],
    added: tuple[Any, ...],
) -> bytes:
    """A manifest delta: the children a merge took out of a stored manifest (their first members and scores) and the
    summaries it put in (ids, counts, first members and scores, and in the score tree distincts and lasts), in key
    order."""
    return seal(pack([CHAINED, DELTA, height, *removed, *added]))


def decode_delta(key: str, data: bytes) -> tuple[Any, ...]:
    """A delta's ``(height, removed members, removed scores, ids, counts, members, scores, distincts, lasts)``, each
    field checked for its type (``distincts`` and ``lasts`` ``None`` in the member index)."""
    _, found = unpack(key, data, "manifest delta", (CHAINED,), use_list=False)
    if type(found) is tuple and len(found) == 11 and found[1] == DELTA:
        height, gone_members, gone_scores, ids, counts, members, scores, distincts, lasts = found[2:]
        if (
            type(gone_members) is tuple
            and type(gone_scores) is tuple
            and len(gone_members) == len(gone_scores)
            and _strings_only(gone_members)
            and _scores_ok(gone_scores)
            and (ids == counts == members == scores == () or _manifest_ok((height, ids, counts, members, scores)))
            and type(height) is int
            and 1 <= height <= MAX_HEIGHT
            and (distincts is None is lasts or _dense_ok(counts, distincts, lasts))
            and len(gone_members) + len(ids) >= 1
        ):
            return found[2:]
    raise CorruptDataError("stored manifest delta is malformed", key)


def _manifest_ok(fields: tuple[Any, ...]) -> bool:
    """Whether a manifest's ``height, ids, counts, first members, first scores`` are well typed."""
    height, ids, counts, members, scores = fields
    return (
        type(height) is int
        and 1 <= height <= MAX_HEIGHT
        and all(type(x) is tuple for x in fields[1:])
        and len(ids) == len(counts) == len(members) == len(scores) >= 1
        and _strings_only(ids)
        and set(map(type, counts)) <= {int}
        and min(counts) >= 1
        and _strings_only(members)
        and _scores_ok(scores)
    )


def encode_note(node_ids: Sequence[str]) -> bytes:
    """A garbage note: the ids of the nodes one commit replaced."""
    return seal(pack([FORMAT, NOTE, node_ids]))


def encode_page(note_ids: Sequence[str], previous: str | None) -> bytes:
    """A note page: the ids of notes that no longer fit in the head, and the page before it."""
    return seal(pack([FORMAT, PAGE, note_ids, previous]))


def decode_note(key: str, data: bytes) -> tuple[str, ...]:
    _, found = unpack(key, data, "garbage note", use_list=False)
    if type(found) is tuple and len(found) == 3 and found[1] == NOTE and _strings(found[2]):
        return found[2]
    raise CorruptDataError("stored garbage note is malformed", key)


def decode_page(key: str, data: bytes) -> tuple[tuple[str, ...], str | None]:
    _, found = unpack(key, data, "note page", use_list=False)
    if (
        type(found) is tuple
        and len(found) == 4
        and found[1] == PAGE
        and _strings(found[2])
        and (found[3] is None or type(found[3]) is str)
    ):
        return found[2], found[3]
    raise CorruptDataError("stored note page is malformed", key)


def _strings(ids: Any) -> bool:
    return type(ids) is tuple and _strings_only(ids)


def encode_segment(first: int, entries: Sequence[Any]) -> bytes:
    """A sealed log segment: the update log's entries from sequence number ``first`` on (see ``mdss._log``)."""
    return seal(pack([FORMAT, SEGMENT, first, entries]))


def encode_log_page(segments: Sequence[tuple[str, int]]) -> bytes:
    """A log manifest: ``(segment id, first sequence number)`` of every sealed segment older than the head's
    (tuples pack as arrays: no copy of a list that can hold ``mdss._log.PAGE_SEGS`` of them)."""
    return seal(pack([FORMAT, LOG_PAGE, segments]))


def check_entry(entry: Any) -> bool:
    """Whether ``entry`` is a log entry ``(member, old value, new value, commit nonce)``, ``None`` allowed
    for the values (absent) and for the nonce (not a commit's last entry); a value is a score or ``(score, data)``."""
    if type(entry) not in (tuple, list) or len(entry) != 4:
        return False
    member, old, new, nonce = entry  # one test after another, no generator: heads hold dozens of entries
    return (
        type(member) is str
        and (old is None or (type(old) in _NUMBERS and old == old) or _value_ok(old))
        and (new is None or (type(new) in _NUMBERS and new == new) or _value_ok(new, True))
        and (nonce is None or type(nonce) is str)
    )


def log_entry(found: Any) -> tuple[Any, ...]:
    """A log entry as decoded from a list-decoding msgpack (a head, a tail record): a tuple, its values as tuples
    (``(score, data)`` decodes as a list there); :func:`check_entry` judges the result."""
    entry = tuple(found)
    if len(entry) == 4 and (type(entry[1]) is list or type(entry[2]) is list):
        member, old, new, nonce = entry
        return (member, tuple(old) if type(old) is list else old, tuple(new) if type(new) is list else new, nonce)
    return entry


def decode_segment(key: str, data: bytes) -> tuple[int, tuple[Any, ...]]:
    _, found = unpack(key, data, "log segment", use_list=False)
    if (
        type(found) is tuple
        and len(found) == 4
        and found[1] == SEGMENT
        and type(found[2]) is int
        and found[2] >= 0
        and type(found[3]) is tuple
        and all(map(check_entry, found[3]))
    ):
        return found[2], found[3]
    raise CorruptDataError("stored log segment is malformed", key)


def decode_log_page(key: str, data: bytes) -> tuple[tuple[str, int], ...]:
    _, found = unpack(key, data, "log manifest", use_list=False)
    if type(found) is tuple and len(found) == 3 and found[1] == LOG_PAGE and type(found[2]) is tuple:
        segments = found[2]
        if all(type(s) is tuple and len(s) == 2 and type(s[0]) is str and type(s[1]) is int for s in segments):
            return segments
    raise CorruptDataError("stored log manifest is malformed", key)


#: The value of a set's marker key (``Keyspace.marker``, ``mdss._snapshot.mark``): only its presence counts.
MARKER = b"m"

#: What each kind of stored value is, by the kind field of its msgpack array (a head is a map).
_KINDS = {
    LEAF: "an entry set (at most chunk_size entries)",
    MANIFEST: "a tree manifest (at most chunk_size children)",
    NOTE: "a garbage note",
    PAGE: "a garbage note page",
    SEGMENT: "an update log segment",
    LOG_PAGE: "an update log manifest",
    PATCH: "a patch of an entry set",
    DELTA: "a delta of a tree manifest",
}


def describe(data: bytes) -> str:
    """What a stored value is (an entry set, a log manifest, a head...), for an error that refuses it as too large: so
    that it names the culprit instead of guessing. Never raises."""
    if data[:1] in (b"\xc1", b"\xc2", b"\xc3"):  # mdss._tail's markers: a head with appends after it
        return "a set's head"
    if data == MARKER:
        return "a set's marker"
    payload = _sealed(data)
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(bytes((payload if payload is not None else memoryview(data))[:64]))
    try:
        size = unpacker.read_array_header()
        kind = (unpacker.unpack(), unpacker.unpack())[1] if size >= 2 else None
    except msgpack.UnpackValueError:  # not an array: a map is a head
        return "a set's head" if data[:1] and (0x80 <= data[0] <= 0x8F or data[0] in (0xDE, 0xDF)) else "a value"
    except Exception:  # only a label for an error message
        return "a value"
    return _KINDS.get(kind, "a value") if type(kind) is int else "a value"


#: Most shards a set may have.
MAX_SHARDS = 1024


@attrs.frozen
class Settings:
    """What a sharded set fixes when it is created: shard count, order, chunk size, the shards' key names."""

    shards: int
    order: str
    chunk: int
    parts: tuple[str, ...]
    tiebreak: str = "member"  # stored only when not the default, as in a head

    def encode(self) -> bytes:
        fields = {"v": FORMAT, "shards": self.shards, "order": self.order, "chunk": self.chunk, "parts": self.parts}
        return seal(pack({**fields, **({} if self.tiebreak == "member" else {"tb": self.tiebreak})}))

    @classmethod
    def decode(cls, key: str, data: bytes) -> Settings:
        _, found = unpack(key, data, "shard settings")
        try:
            settings = cls(
                found["shards"], found["order"], found["chunk"], tuple(found["parts"]), found.get("tb", "member")
            )
            ok = (
                type(settings.shards) is int
                and 2 <= settings.shards <= MAX_SHARDS
                and settings.order in ("asc", "desc")
                and settings.tiebreak in TIEBREAKS
                and type(settings.chunk) is int
                and len(settings.parts) == settings.shards
                and all(type(p) is str and PARTS.fullmatch(p) for p in settings.parts)
            )
        except (KeyError, TypeError) as exc:
            raise CorruptDataError(f"stored shard settings are malformed ({exc})", key) from None
        if not ok:
            raise CorruptDataError("stored shard settings are malformed", key)
        return settings

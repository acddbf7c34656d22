"""docs/format.md is enough to read what mdss stores: a reader written from it alone, with msgpack, zlib
and lz4 and without mdss, decodes the format-2 to 6 test vectors (tests/data/format/v2/ to v6/)
and finds in them exactly what mdss answered when it stored them.

For each vector: every key follows the key grammar, every value carries its CRC-32 seal and decodes
to the fields listed in ``decoded``; for a sorted set, the trees the head names hold every stored
node, in order, with manifests that agree with their children (in format 3, the score tree's also
in distinct scores and last scores; in format 5, a child ``base+patch`` is the entry set ``base``
with the patch applied; in format 6, a child ``base+delta+...`` is the manifest ``base`` with each delta applied), and
the score tree read left to right, with the update log applied (the log vectors of v6: segments, a log manifest, a
head's tail, bridged or not, each entry's old score the member's before it), is the list of entries with their ranks,
the member index holds the trees' pairs by member, and descending it finds each one's score; in
format 3, the dense rank of every tree entry found by descending the manifests is the naive one; for a
top-N set, the entries best first. The reader does not import mdss: only
``test_mdss_reads_the_format_5_and_6_vectors`` does, to check that mdss reads the same entries.
"""

from __future__ import annotations

import base64
import hashlib
import json
import pathlib
import re
import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import attrs
import lz4.block
import msgpack
import pytest

VECTORS = sorted((pathlib.Path(__file__).parent / "data" / "format").glob("v[2-6]/*.json"))
NAMESPACE = "mdss"
#: docs/format.md, "Keys": a set's head, its nodes and garbage notes, a top-N set.
KEY = re.compile(r"(?P<ns>[^:/{}]+):(?P<name>[^:/{}]+):(?:(?P<head>h)|[ng]:(?P<id>[^:]+)|(?P<topn>t)|(?P<marker>m))")
#: docs/format.md, "Node ids": gc epoch in hex, a dot, 11 hex digits of milliseconds, 16 random hex digits.
NODE_ID = re.compile(r"(?P<epoch>[0-9a-f]{1,16})\.(?P<ms>[0-9a-f]{11})[0-9a-f]{16}")
#: docs/format.md, "Patched leaves": a child of a format-5 manifest may be two node ids joined by this.
JOIN = "+"
#: Characters a percent-encoded set name or namespace keeps as they are.
UNRESERVED = re.compile(r"[A-Za-z0-9\-_.~!$&'()*+,;=@%]+")


def unseal(value: bytes) -> tuple[Any, str]:
    """docs/format.md, "Values": the msgpack payload and the 4-byte big-endian CRC-32 after it."""
    payload, seal = value[:-4], value[-4:]
    assert zlib.crc32(payload).to_bytes(4, "big") == seal, "checksum"
    return msgpack.unpackb(payload, raw=False), seal.hex()


def entry_set(node: list[Any]) -> list[Any]:
    """docs/format.md, "Leaf": ``[2, 0, members, scores]``, or compressed ``[4, 0, size, block]`` (format 4): the lz4
    block of the msgpack array ``[members, scores]``, ``size`` bytes long; both as ``[2, 0, members, scores]``."""
    if node[0] != 4:
        return node
    assert node[1] == 0 and len(node) == 4
    members, scores = msgpack.unpackb(lz4.block.decompress(node[3], uncompressed_size=node[2]), raw=False)
    return [2, 0, members, scores]


def score(text_or_int: int | str) -> int | float:
    """A score as the vectors' JSON writes it: an int, or a float's repr."""
    return text_or_int if type(text_or_int) is int else float(text_or_int)


def sort_key(order: str, member: str, s: int | float) -> tuple[int | float, bytes]:
    """docs/format.md, "Order": best first, ties by member in UTF-8 byte order (= code point order)."""
    return (s if order == "asc" else -s, member.encode("utf-8"))


def typed(values: list[Any]) -> list[tuple[type, Any]]:
    return [(type(v), v) for v in values]


def load(path: pathlib.Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    vector = json.loads(path.read_text(encoding="utf-8"))
    return vector, {key: base64.b64decode(value) for key, value in vector["store"].items()}


def name(path: pathlib.Path) -> str:
    return f"{path.parent.name}-{path.stem}"


@pytest.mark.parametrize("path", VECTORS, ids=name)
def test_every_value_is_sealed_and_decodes_to_its_fields(path: pathlib.Path) -> None:
    vector, store = load(path)
    assert vector["format"] == int(path.parent.name[1:]) and set(store) == set(vector["decoded"])
    for key, value in store.items():
        expected = vector["decoded"][key]
        if expected["kind"] == "marker":  # docs/format.md, "Keys": any value
            assert key.endswith(":m") and vector["format"] >= 4
            continue
        if expected["kind"] == "tailed_head":  # docs/format.md, "A head with a tail" and the bridged heads
            head = tailed_head(value)
            assert expected["marker"] == value[:1].hex() and expected["core_sha1"] == value[1:21].hex()
            assert [head.core, head.crc] == [expected["core"]["fields"], expected["core"]["crc32"]]
            assert [[b["sha1"], b["start"], b["end"]] for b in expected["bridges"]] == head.bridges
            assert expected["tail"] == head.tail
            assert [[r["offset"], r["nonce"], r["tokens"], r["entries"], r["crc32"]] for r in expected["records"]] == [
                [r.offset, r.nonce, r.tokens, r.entries, r.crc] for r in head.records
            ]
            continue
        found, crc = unseal(value)
        assert crc == expected["crc32"]
        fields = expected["fields"]
        if expected["kind"] == "segment":  # docs/format.md, "Log segment"
            assert found == [fields["format"], 4, fields["first"], fields["entries"]] and found[0] == 2
        elif expected["kind"] == "log_manifest":  # docs/format.md, "Log manifest"
            assert found == [fields["format"], 5, fields["segments"]] and found[0] == 2
        elif expected["kind"] == "head":
            assert found == fields and found["v"] == 2
        elif expected["kind"] == "topn":
            assert found[:3] == [fields["format"], fields["n"], fields["order"]] == [2, vector["n"], vector["order"]]
            assert found[3] == fields["members"] and typed(found[4]) == typed([score(s) for s in fields["scores"]])
        elif expected["kind"] == "patch":  # docs/format.md, "Patch": format 5, kind 6
            assert vector["format"] >= 5 and found[:2] == [fields["format"], 6] == [5, 6] and len(found) == 6
            assert found[2] == fields["removed_members"] and found[4] == fields["added_members"]
            assert typed(found[3]) == typed([score(s) for s in fields["removed_scores"]])
            assert typed(found[5]) == typed([score(s) for s in fields["added_scores"]])
        elif expected["kind"] == "delta":  # docs/format.md, "Manifest delta": format 6, kind 7
            assert vector["format"] >= 6 and found[:3] == [fields["format"], 7, fields["height"]] == [6, 7, found[2]]
            assert (
                len(found) == 11
                and found[3] == fields["removed_members"]
                and found[5:8] == [fields[f] for f in ("ids", "counts", "first_members")]
            )
            assert typed(found[4]) == typed([score(s) for s in fields["removed_scores"]])
            assert typed(found[8]) == typed([score(s) for s in fields["first_scores"]])
            assert found[9] == fields["distincts"]
            assert typed(found[10] or []) == typed(
                [None if s is None else score(s) for s in fields["last_scores"] or []]
            )
        elif expected["kind"] == "leaf":
            formats = (2, 4) if vector["format"] >= 4 else (2,)
            assert found[:2] == [fields["format"], 0] and fields["format"] in formats
            if fields["format"] == 4:
                assert found[2] == fields["size"] and len(found) == 4
                found = entry_set(found)
            assert found[2] == fields["members"]
            assert typed(found[3]) == typed([score(s) for s in fields["scores"]])
        else:
            assert found[:2] == [fields["format"], 1] and found[2:6] == [
                fields[f] for f in ("height", "ids", "counts", "first_members")
            ]
            assert typed(found[6]) == typed([score(s) for s in fields["first_scores"]])
            if fields["format"] in (3, 5, 6):  # docs/format.md, "Manifest": distinct scores and last score per child
                assert vector["format"] >= fields["format"] and found[7] == fields["distincts"] and len(found) == 9
                if fields["last_scores"] is None:  # formats 5 and 6, member index
                    assert fields["format"] in (5, 6) and found[7] is None is found[8]
                else:
                    assert typed(found[8]) == typed([None if s is None else score(s) for s in fields["last_scores"]])
            else:
                assert fields["format"] == 2 and len(found) == 7
        damaged = bytearray(value)
        damaged[len(damaged) // 2] ^= 0x01
        assert zlib.crc32(bytes(damaged[:-4])).to_bytes(4, "big") != bytes(damaged[-4:])


@pytest.mark.parametrize("path", VECTORS, ids=name)
def test_keys_follow_the_grammar(path: pathlib.Path) -> None:
    vector, store = load(path)
    for key in store:
        match = KEY.fullmatch(key)
        assert match, key
        assert match["ns"] == NAMESPACE and unquote(match["name"]) == vector["name"]
        assert UNRESERVED.fullmatch(match["name"]), "set names are percent-encoded"
        assert bool(match["topn"]) == (vector["kind"] == "topn")
        if match["id"]:
            assert NODE_ID.fullmatch(match["id"]), match["id"]


def distinct(scores: list[Any]) -> int:
    """How many different scores a run in set order holds (equal scores are adjacent; 1 == 1.0)."""
    return sum(1 for i, s in enumerate(scores) if i == 0 or s != scores[i - 1])


Key = Callable[[str, Any], Any]


def tree_key(order: str | None) -> Key:
    """A tree's key order (docs/format.md, "Scores and order"): the set's sort key in the score tree (``order``), the
    member's UTF-8 bytes in the member index (``None``)."""
    if order is None:
        return lambda member, _: member.encode("utf-8")
    return lambda member, s: sort_key(order, member, s)


def leaf(store: dict[str, bytes], prefix: str, child: str, key: Key) -> tuple[list[list[Any]], set[str]]:
    """A leaf's ``[member, score]`` pairs and the ids of the stored nodes it is made of.

    docs/format.md, "Patched leaves": a child ``base+patch`` is the leaf ``base`` with each of the patch's removed
    entries removed (each is in ``base``, same member, score of the same value and type), then each added entry
    inserted in key order (none is there already).
    """
    base, _, patch_id = child.partition(JOIN)
    node = entry_set(unseal(store[prefix + "n:" + base])[0])
    assert node[:2] == [2, 0] and len(node[2]) == len(node[3]) and len(node) == 4, "a patch is never read alone"
    pairs = [list(pair) for pair in zip(node[2], node[3])]
    if not patch_id:
        return pairs, {base}
    assert JOIN not in patch_id, "a patched child is two node ids"
    patch, _ = unseal(store[prefix + "n:" + patch_id])
    version, kind, removed_members, removed_scores, added_members, added_scores = patch
    assert (version, kind) == (5, 6)
    assert len(removed_members) == len(removed_scores) and len(added_members) == len(added_scores)
    for members, scores in ((removed_members, removed_scores), (added_members, added_scores)):
        keys = [key(m, s) for m, s in zip(members, scores)]
        assert all(a < b for a, b in zip(keys, keys[1:])), "each array of a patch is in the tree's key order"
    for member, s in zip(removed_members, removed_scores):
        [i] = [i for i, (m, x) in enumerate(pairs) if m == member and x == s and type(x) is type(s)]
        del pairs[i]
    keys = [key(m, x) for m, x in pairs]
    for member, s in zip(added_members, added_scores):
        i = bisect_left(keys, key(member, s))
        assert i == len(keys) or keys[i] != key(member, s), "an added entry is not in the leaf already"
        keys.insert(i, key(member, s))
        pairs.insert(i, [member, s])
    return pairs, {base, patch_id}


def manifest(store: dict[str, bytes], prefix: str, child: str, key: Key) -> tuple[list[Any], set[str]]:
    """A manifest's fields ``[format, 1, height, ids, counts, first members, first scores, distincts, lasts]`` (the
    last two nil where it has none) and the ids of the stored nodes it is made of.

    docs/format.md, "Manifests with deltas": a child ``base+delta1+delta2`` is the manifest ``base`` with each delta
    applied in turn: take out each child whose first entry is a removed one (it is there, same member, first score of
    the same value and type), then put in each of the delta's children in key order (none has that key already).
    """
    base, *deltas = child.split(JOIN)
    node = unseal(store[prefix + "n:" + base])[0]
    assert node[1] == 1, "a delta is never read alone"
    node += [None] * (9 - len(node))
    rows = [list(r) for r in zip(*node[3:7], node[7] or [None] * len(node[3]), node[8] or [None] * len(node[3]))]
    for delta_id in deltas:
        delta, _ = unseal(store[prefix + "n:" + delta_id])
        version, kind, height, removed_members, removed_scores, *added = delta
        assert (version, kind, height) == (6, 7, node[2]) and len(removed_members) == len(removed_scores)
        assert len(deltas) <= 8 and removed_members + added[0], "one to eight deltas, each with a change"
        for members, scores in ((removed_members, removed_scores), (added[2], added[3])):
            keys = [key(m, x) for m, x in zip(members, scores)]
            assert all(a < b for a, b in zip(keys, keys[1:])), "each array of a delta is in the tree's key order"
        for member, x in zip(removed_members, removed_scores):
            [i] = [i for i, r in enumerate(rows) if r[2] == member and r[3] == x and type(r[3]) is type(x)]
            del rows[i]
        nothing = [None] * len(added[0])
        for row in zip(*added[:4], added[4] or nothing, added[5] or nothing):
            keys = [key(r[2], r[3]) for r in rows]
            i = bisect_left(keys, key(row[2], row[3]))
            assert i == len(keys) or keys[i] != key(row[2], row[3]), "a child put in is not in the manifest already"
            rows.insert(i, list(row))
    columns = [list(c) for c in zip(*rows)]
    dense = node[7] is not None or any(c is not None for c in columns[4])
    return [*node[:3], *columns[:4], *(columns[4:] if dense else [None, None])], {base, *deltas}


def walk(
    store: dict[str, bytes], prefix: str, root: str | None, height: int, order: str | None, chunk: int | None = None
) -> tuple[list[list[Any]], set[str]]:
    """Every leaf's ``[member, score]`` pairs under ``root``, left to right, and the keys visited, in the score tree
    of a set of ``order``, or the member index (``None``); with ``chunk``, each patched leaf and manifest with deltas
    checked for its size, as any node (docs/format.md, "Reading a tree").

    Checks what docs/format.md promises of a tree: heights count down to 0 at the leaves, a
    manifest's count of a child is the child's number of entries and its first entry the child's
    first; a format-3 manifest's distinct scores and last score of a child are the child's; only a
    format-5 manifest of height 1 names patched leaves, only a format-6 one of height 2 or more manifests with
    deltas, and in the member index neither has distincts.
    """
    if root is None:
        assert height == 0
        return [], set()
    if height == 0:
        return leaf(store, prefix, root, tree_key(order))
    node, seen = manifest(store, prefix, root, tree_key(order))
    version, kind, node_height, ids, counts, first_members, first_scores, *dense = node
    assert (kind, node_height) == (1, height) and len(ids) == len(counts) == len(first_members) == len(first_scores)
    assert version in (2, 3, 5, 6) and len(ids) >= 2
    if order is None:
        assert dense == [None, None]
    distincts, lasts = dense if dense and dense[0] is not None else ([None] * len(ids), [None] * len(ids))
    pairs: list[list[Any]] = []
    for child, count, member, s, d, last in zip(ids, counts, first_members, first_scores, distincts, lasts):
        below, visited = walk(store, prefix, child, height - 1, order, chunk)
        if chunk is not None and JOIN in child and height == 1:
            assert max(chunk // 2, 1) <= len(below) <= chunk
        if chunk is not None and JOIN in child and height > 1:
            assert (
                max(max(chunk, 3) // 2, 2)
                <= len(manifest(store, prefix, child, tree_key(order))[0][3])
                <= max(chunk, 3)
            )
        assert len(below) == count and below[0] == [member, s]
        assert type(below[0][1]) is type(s)
        if d is not None:
            assert d == distinct([p[1] for p in below]) and typed([last]) == typed([below[-1][1]])
        pairs += below
        seen |= visited
    return pairs, seen


def dense_rank(store: dict[str, bytes], prefix: str, head: dict[str, Any], s: Any) -> int:
    """docs/format.md, "Dense ranks": 1 + the distinct scores strictly better than ``s``, descending the
    score tree's manifests by ``(s,)`` and adding, before each child taken, the distinct scores of the
    children to its left, less one for each tie group that crosses a boundary."""
    order = head["order"]
    better = (lambda a, b: a > b) if order == "desc" else (lambda a, b: a < b)
    root, height, _ = head["score"]
    total, last = 0, None  # distinct scores before the current node, and the score of the entry just before it
    while height:
        node, _ = manifest(store, prefix, root, tree_key(order))
        first_scores, distincts, lasts = node[6], node[7], node[8]
        i = 0  # the last child whose first score is strictly better than s: s's group starts in or after it
        while i + 1 < len(first_scores) and better(first_scores[i + 1], s):
            i += 1
        for j in range(i):
            total += distincts[j] - (last is not None and last == first_scores[j])
            last = lasts[j]
        root, height = node[3][i], height - 1
    for _, x in leaf(store, prefix, root, tree_key(order))[0]:
        if not better(x, s):
            break
        total += last is None or x != last
        last = x
    return total + 1


def member_score(store: dict[str, bytes], prefix: str, head: dict[str, Any], member: str) -> Any:
    """docs/format.md, "Reading a tree": a member's score, found by descending the member index (in each manifest,
    the last child whose first member is <= the member, by UTF-8 bytes); ``None`` if it is no member."""
    root, height, _ = head["member"]
    if root is None:
        return None
    wanted = member.encode("utf-8")
    while height:
        node, _ = manifest(store, prefix, root, tree_key(None))
        firsts = [m.encode("utf-8") for m in node[5]]
        root, height = node[3][max(bisect_right(firsts, wanted) - 1, 0)], height - 1
    found = [x for m, x in leaf(store, prefix, root, tree_key(None))[0] if m == member]
    return found[0] if found else None


def head_of(store: dict[str, bytes]) -> tuple[str, dict[str, Any]]:
    """The prefix of a sorted set's keys (``…:``) and its head (a tailed head's core)."""
    [head_key] = [k for k in store if k.endswith(":h")]
    value = store[head_key]
    return head_key[:-1], tailed_head(value).core if value[:1] in TAILED else unseal(value)[0]


#: docs/format.md: the first byte of a head with a tail, of a bridged head, of a head bridged from several cores.
TAILED = (b"\xc1", b"\xc2", b"\xc3")


@attrs.frozen
class Record:
    """One record of a tail: where it starts (from the first record), its commit's nonce, the tokens of the members
    the commit read, its log entries, and the CRC-32 of its body."""

    offset: int
    nonce: str
    tokens: list[str]
    entries: list[list[Any]]
    crc: str


@attrs.frozen
class Tailed:
    """A head with a tail: its core head map and that core's CRC-32, each core it bridges from ``[SHA-1, start,
    end]``, where its tail starts (the records before it are in the core's log), and every record."""

    core: dict[str, Any]
    crc: str
    bridges: list[list[Any]]
    tail: int
    records: list[Record]

    def applied(self) -> list[list[Any]]:
        """The log entries of the records the core does not hold, oldest first."""
        return [e for r in self.records if r.offset >= self.tail for e in r.entries]


def number(value: bytes, at: int) -> int:
    """The 4-byte big-endian number at ``at``."""
    return int.from_bytes(value[at : at + 4], "big")


def tailed_head(value: bytes) -> Tailed:
    """docs/format.md, "A head with a tail", "A bridged head", "A head bridged from several cores": the marker, the
    core's SHA-1 and length, the core; for ``0xC2``, the parent's SHA-1, *P* and *B*, then the bridge and the tail, both
    records; for ``0xC3``, *N*, each core's SHA-1, start and end, *B*, then the records. Offsets count from the first
    record. Checks the core's SHA-1, every record's framing and CRC-32, and that the offsets fall on records."""
    size = number(value, 21)
    core = value[25 : 25 + size]
    assert value[:1] in TAILED and len(core) == size and hashlib.sha1(core).digest() == value[1:21], "core"
    at = 25 + size
    if value[:1] == b"\xc1":
        bridges, tail = [], 0
    elif value[:1] == b"\xc2":
        bridges, tail, at = [[value[at : at + 20].hex(), 0, number(value, at + 20)]], number(value, at + 24), at + 28
        p = bridges[0][2]
        assert tail <= p
    else:
        n, at = value[at], at + 1
        assert 2 <= n <= 8
        cores = range(at, at + 28 * n, 28)
        bridges = [[value[i : i + 20].hex(), number(value, i + 20), number(value, i + 24)] for i in cores]
        tail, at = number(value, at + 28 * n), at + 28 * n + 4
        assert bridges[0][1] == 0
        for (_, start, end), (_, next_start, next_end) in zip(bridges, bridges[1:]):
            assert start <= end and next_start <= end and start <= next_start and end <= next_end
        assert bridges[-1][1] <= tail <= bridges[-1][2]
    first, records = at, []
    while at < len(value):
        length = int.from_bytes(value[at : at + 2], "big")
        payload, crc = value[at + 2 : at + length - 2], value[at + length - 2 : at + length + 2]
        assert at + 2 + length <= len(value) and zlib.crc32(payload).to_bytes(4, "big") == crc, "a record's CRC-32"
        count = payload[8]
        tokens = [payload[9 + 8 * i : 17 + 8 * i].hex() for i in range(count)]
        entries = msgpack.unpackb(payload[9 + 8 * count :], raw=False)
        records.append(Record(at - first, payload[:8].hex(), tokens, entries, crc.hex()))
        at += 2 + length
    bounds = {r.offset for r in records} | {at - first}
    assert {tail} | {x for b in bridges for x in b[1:]} <= bounds, "offsets fall on records"
    return Tailed(unseal(core)[0], core[-4:].hex(), bridges, tail, records)


def log_of(store: dict[str, bytes], prefix: str, head: dict[str, Any]) -> tuple[list[list[Any]], set[str]]:
    """docs/format.md, "Reading the update log": the entries ``base`` to ``seq - 1`` of a head's log (the log
    manifest's segments, then the head's, then its inline entries; each segment starts where the one before ended, the
    last ends where the inline entries start), and the ids of the stored objects that hold them."""
    if "log" not in head:
        return [], set()
    base, seq, pages, segs, inline, _ = head["log"]
    listed, ids = [], set()
    if pages is not None:
        version, kind, older = unseal(store[prefix + "n:" + pages])[0]
        assert (version, kind) == (2, 5)
        listed, ids = list(older), {pages}
    entries: list[list[Any]] = []
    start = None
    for seg, first in [*listed, *segs]:
        version, kind, stored_first, stored = unseal(store[prefix + "n:" + seg])[0]
        assert (version, kind) == (2, 4) and stored_first == first
        start = first if start is None else start
        assert first == start + len(entries), "segments follow each other"
        entries += stored
        ids.add(seg)
    start = seq - len(inline) if start is None else start
    assert start + len(entries) == seq - len(inline) and start <= base, "the segments reach the inline entries"
    return [*entries, *inline][base - start :], ids


SORTED_SETS = [p for p in VECTORS if load(p)[0]["kind"] == "sortedset"]


@pytest.mark.parametrize("path", SORTED_SETS, ids=name)
def test_the_trees_hold_the_entries_in_order(path: pathlib.Path) -> None:
    vector, store = load(path)
    prefix, head = head_of(store)
    assert (head["order"], head["chunk"]) == (vector["order"], vector["chunk_size"])
    assert len(head["recent"]) <= min(head["gen"], 16) and head["epoch"] >= 1
    order = head["order"]

    chunk = head["chunk"]
    by_score, score_nodes = walk(store, prefix, head["score"][0], head["score"][1], order, chunk)
    by_member, member_nodes = walk(store, prefix, head["member"][0], head["member"][1], None, chunk)
    assert head["score"][2] == head["member"][2] == len(by_score) == len(by_member)
    keys = [sort_key(order, m, s) for m, s in by_score]
    assert all(a < b for a, b in zip(keys, keys[1:])), "the score tree is strictly in set order"
    members = [m.encode("utf-8") for m, _ in by_member]
    assert all(a < b for a, b in zip(members, members[1:])), "the member index is strictly by member"
    assert sorted(map(tuple, by_score)) == sorted(map(tuple, by_member))
    for member, s in by_member:
        assert typed([member_score(store, prefix, head, member)]) == typed([s])
    assert member_score(store, prefix, head, "no such member") is None

    logged, log_nodes = log_of(store, prefix, head)
    value = store[prefix + "h"]
    if value[:1] in TAILED:
        logged += tailed_head(value).applied()
    current = dict(map(tuple, by_member))  # docs/format.md, "Reading the update log": each entry in turn
    for member, old, new, _ in logged:
        assert typed([current.get(member)]) == typed([old]), "an entry's old score is the member's before it"
        if new is None:
            del current[member]
        else:
            current[member] = new
    ranked = sorted(current.items(), key=lambda pair: sort_key(order, *pair))
    expected = [[m, score(s), rank] for m, s, rank in vector["entries"]]
    found = [[m, s, rank] for rank, (m, s) in enumerate(ranked, start=1)]
    assert [typed(e) for e in found] == [typed(e) for e in expected] and len(found) == vector["len"]
    assert bool(logged) == (vector["name"].startswith("log")), "only the log vectors hold an update log"
    node_keys = {k[len(prefix) + 2 :] for k in store if k.startswith(prefix + "n:")}
    assert score_nodes | member_nodes | log_nodes == node_keys, "every stored node is named, every named node stored"
    for node_id in node_keys:
        assert 1 <= int(NODE_ID.fullmatch(node_id)["epoch"], 16) <= head["epoch"]  # type: ignore[index]
    for node_id in node_keys:
        node, _ = unseal(store[prefix + "n:" + node_id])
        if node_id in log_nodes:  # a log segment or manifest: log_of() read it
            continue
        if node[1] == 6:  # a patch (format 5): walk() checks its leaf's size
            assert vector["format"] >= 5 and node[0] == 5
            continue
        if node[1] == 7:  # a delta (format 6): walk() checks its manifest's size
            assert vector["format"] >= 6 and node[0] == 6
            continue
        if node[1] == 0 and node[0] == 4:  # compressed entry sets since format 4
            assert vector["format"] >= 4
            node = entry_set(node)
        assert len(node[2 if node[1] == 0 else 3]) <= chunk
        if node[1] == 1 and any(JOIN in i for i in node[3]):  # "Patched leaves", "Manifests with deltas"
            assert vector["format"] >= node[0] == (5 if node[2] == 1 else 6)
        else:
            assert node[0] == (3 if node[1] == 1 and node_id in score_nodes and vector["format"] >= 3 else 2)
    if vector["format"] >= 3:
        better = (lambda a, b: a > b) if order == "desc" else (lambda a, b: a < b)
        for _, s in by_score:
            assert dense_rank(store, prefix, head, s) == 1 + len({x for _, x in by_score if better(x, s)})


def test_the_log_vectors_hold_each_kind_of_head_and_log() -> None:
    """Segments, a log manifest and inline entries; a head with a tail, a bridged head, one bridged from several cores,
    each with a record appended across its bridges (after the tail's start, by a core other than the newest)."""
    vectors = {p.stem: load(p) for p in SORTED_SETS if p.stem.startswith("log")}
    assert set(vectors) == {"log", "log-tailed", "log-bridged", "log-bridged-several"}
    kinds = [d["kind"] for d in vectors["log"][0]["decoded"].values()]
    assert kinds.count("segment") >= 2 and kinds.count("log_manifest") == 1
    assert head_of(vectors["log"][1])[1]["log"][4], "inline entries"
    for stem, marker, cores in (("log-tailed", "c1", 0), ("log-bridged", "c2", 1), ("log-bridged-several", "c3", 2)):
        vector, store = vectors[stem]
        head = tailed_head(store[head_of(store)[0] + "h"])
        assert store[head_of(store)[0] + "h"][:1].hex() == marker and len(head.bridges) == cores
        assert head.applied() and (not cores or head.records[0].offset < head.tail)


@pytest.mark.parametrize("stem", ["log-tailed", "log-bridged", "log-bridged-several"])
def test_a_damaged_byte_of_a_tailed_head_is_found(stem: str) -> None:
    """docs/format.md: a damaged core (its SHA-1), record (its CRC-32) or framing is refused: every byte after the
    marker, flipped, fails a check of the reader above, but those of the bridges' SHA-1s and offsets (*P*, *B*,
    starts and ends), which have no checksum of their own."""
    [path] = [p for p in SORTED_SETS if p.stem == stem]
    _, store = load(path)
    value = store[head_of(store)[0] + "h"]
    end = 25 + number(value, 21)
    if value[:1] == b"\xc1":
        unchecked: set[int] = set()
    elif value[:1] == b"\xc2":
        unchecked = set(range(end, end + 28))
    else:
        n = value[end]
        unchecked = set(range(end + 1, end + 5 + 28 * n))
    for i in range(1, len(value)):
        damaged = bytearray(value)
        damaged[i] ^= 0x10
        if i in unchecked:
            continue
        with pytest.raises((AssertionError, ValueError, IndexError, msgpack.UnpackException)):
            tailed_head(bytes(damaged))


def patched_children(vector: dict[str, Any]) -> tuple[int, int]:
    """How many children ``base+patch`` the manifests of a vector's score tree and of its member index name."""
    store = {key: base64.b64decode(value) for key, value in vector["store"].items()}
    prefix, head = head_of(store)
    counts = []
    for tree in ("score", "member"):
        nodes = walk(store, prefix, head[tree][0], head[tree][1], head["order"] if tree == "score" else None)[1]
        manifests = (unseal(store[prefix + "n:" + i])[0] for i in nodes)
        counts.append(sum(JOIN in i for node in manifests if node[1] == 1 and node[2] == 1 for i in node[3]))
    return counts[0], counts[1]


def chained_children(vector: dict[str, Any]) -> tuple[list[int], list[int]]:
    """The number of deltas of each child ``base+delta+...`` the manifests of a vector's score tree and of its member
    index name, as stored (a base may name a chain that a later delta replaced)."""
    store = {key: base64.b64decode(value) for key, value in vector["store"].items()}
    prefix, head = head_of(store)
    chains: tuple[list[int], list[int]] = ([], [])
    for found, tree in zip(chains, ("score", "member")):
        nodes = walk(store, prefix, head[tree][0], head[tree][1], head["order"] if tree == "score" else None)[1]
        manifests = (unseal(store[prefix + "n:" + i])[0] for i in nodes)
        found += [i.count(JOIN) for node in manifests if node[1] == 1 and node[2] > 1 for i in node[3] if JOIN in i]
    return chains


def test_the_format_6_vectors_chain_manifests_in_both_trees() -> None:
    vectors = [load(p)[0] for p in SORTED_SETS if p.parent.name == "v6"]
    chains = {v["name"]: chained_children(v) for v in vectors}
    assert all(len(c) >= 3 and max(c) >= 2 for c in chains["chained"])
    assert {v["order"] for v in vectors if any(chains[v["name"]])} == {"asc", "desc"}


def test_the_format_5_vectors_patch_entry_sets_in_both_trees() -> None:
    vectors = [load(p)[0] for p in SORTED_SETS if p.parent.name == "v5"]
    patched = {v["name"]: patched_children(v) for v in vectors}
    assert patched["patched"] >= (10, 10) and min(patched["patched compressed"]) >= 1
    assert {v["order"] for v in vectors if max(patched[v["name"]])} == {"asc", "desc"}
    patches = sum(d["kind"] == "patch" for v in vectors for d in v["decoded"].values())
    assert patches == sum(map(sum, patched.values())), "each patch is named once"


@pytest.mark.parametrize("path", [p for p in SORTED_SETS if p.parent.name in ("v5", "v6")], ids=name)
def test_mdss_reads_the_format_5_and_6_vectors(path: pathlib.Path) -> None:
    """The same entries, read by mdss from a store holding the vector's values: the reader above agrees with it."""
    import mdss  # only here: the tests above read the vectors without it

    vector, values = load(path)
    store = mdss.open_store("memory://")
    for key, value in values.items():
        store.put(key, value)
    board = mdss.SortedSet(store, vector["name"])
    expected = [(m, score(s), rank) for m, s, rank in vector["entries"]]
    assert [typed(list(e)) for e in board.range(0, len(expected) + 1)] == [typed(list(e)) for e in expected]
    assert board.check() == []


@pytest.mark.parametrize("path", [p for p in VECTORS if load(p)[0]["kind"] == "topn"], ids=name)
def test_a_top_n_value_holds_its_entries_best_first(path: pathlib.Path) -> None:
    vector, store = load(path)
    [(key, value)] = store.items()
    (version, n, order, members, scores), _ = unseal(value)
    assert (version, n, order) == (2, vector["n"], vector["order"]) and len(members) == len(scores) <= n
    keys = [sort_key(order, m, s) for m, s in zip(members, scores)]
    assert all(a < b for a, b in zip(keys, keys[1:]))
    expected = [[m, score(s), rank] for m, s, rank in vector["entries"]]
    assert [typed([m, s, r]) for r, (m, s) in enumerate(zip(members, scores), start=1)] == [typed(e) for e in expected]


def test_there_are_vectors_of_both_orders_and_a_top_n() -> None:
    kinds = {(v["kind"], v["order"], v.get("chunk_size")) for v in (load(p)[0] for p in VECTORS)}
    assert {("sortedset", "asc", 4), ("sortedset", "desc", 4)} <= kinds and any(k[0] == "topn" for k in kinds)

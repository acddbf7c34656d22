"""docs/format.md is enough to read what mdss stores: a reader written from it alone, with msgpack, zlib
and lz4 and without mdss, decodes the format-2, 3 and 4 test vectors (tests/data/format/v2/, v3/, v4/)
and finds in them exactly what mdss answered when it stored them.

For each vector: every key follows the key grammar, every value carries its CRC-32 seal and decodes
to the fields listed in ``decoded``; for a sorted set, the trees the head names hold every stored
node, in order, with manifests that agree with their children (in format 3, the score tree's also
in distinct scores and last scores), and the score tree read left to right is the list of entries
with their ranks, the member index the same pairs by member; in format 3, the dense rank of every
entry found by descending the manifests is the naive one; for a top-N set, the entries best first.
This module must not import mdss.
"""

from __future__ import annotations

import base64
import json
import pathlib
import re
import zlib
from typing import Any
from urllib.parse import unquote

import lz4.block
import msgpack
import pytest

VECTORS = sorted((pathlib.Path(__file__).parent / "data" / "format").glob("v[234]/*.json"))
NAMESPACE = "mdss"
#: docs/format.md, "Keys": a set's head, its nodes and garbage notes, a top-N set.
KEY = re.compile(r"(?P<ns>[^:/{}]+):(?P<name>[^:/{}]+):(?:(?P<head>h)|[ng]:(?P<id>[^:]+)|(?P<topn>t)|(?P<marker>m))")
#: docs/format.md, "Node ids": gc epoch in hex, a dot, 11 hex digits of milliseconds, 16 random hex digits.
NODE_ID = re.compile(r"(?P<epoch>[0-9a-f]{1,16})\.(?P<ms>[0-9a-f]{11})[0-9a-f]{16}")
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
        found, crc = unseal(value)
        assert crc == expected["crc32"]
        fields = expected["fields"]
        if expected["kind"] == "head":
            assert found == fields and found["v"] == 2
        elif expected["kind"] == "topn":
            assert found[:3] == [fields["format"], fields["n"], fields["order"]] == [2, vector["n"], vector["order"]]
            assert found[3] == fields["members"] and typed(found[4]) == typed([score(s) for s in fields["scores"]])
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
            if fields["format"] == 3:  # docs/format.md, "Manifest": distinct scores and last score per child
                assert vector["format"] >= 3 and found[7] == fields["distincts"]
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


def walk(store: dict[str, bytes], prefix: str, root: str | None, height: int) -> tuple[list[list[Any]], set[str]]:
    """Every leaf's ``[member, score]`` pairs under ``root``, left to right, and the keys visited.

    Checks what docs/format.md promises of a tree: heights count down to 0 at the leaves, a
    manifest's count of a child is the child's number of entries and its first entry the child's
    first; a format-3 manifest's distinct scores and last score of a child are the child's.
    """
    if root is None:
        assert height == 0
        return [], set()
    node, _ = unseal(store[prefix + "n:" + root])
    if height == 0:
        node = entry_set(node)
        assert node[:2] == [2, 0] and len(node[2]) == len(node[3])
        return [list(pair) for pair in zip(node[2], node[3])], {root}
    version, kind, node_height, ids, counts, first_members, first_scores, *dense = node
    assert (kind, node_height) == (1, height) and len(ids) == len(counts) == len(first_members) == len(first_scores)
    assert (version, len(dense)) in ((2, 0), (3, 2))
    distincts, lasts = dense or ([None] * len(ids), [None] * len(ids))
    pairs: list[list[Any]] = []
    seen = {root}
    for child, count, member, s, d, last in zip(ids, counts, first_members, first_scores, distincts, lasts):
        below, visited = walk(store, prefix, child, height - 1)
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
        node, _ = unseal(store[prefix + "n:" + root])
        first_scores, distincts, lasts = node[6], node[7], node[8]
        i = 0  # the last child whose first score is strictly better than s: s's group starts in or after it
        while i + 1 < len(first_scores) and better(first_scores[i + 1], s):
            i += 1
        for j in range(i):
            total += distincts[j] - (last is not None and last == first_scores[j])
            last = lasts[j]
        root, height = node[3][i], height - 1
    leaf = entry_set(unseal(store[prefix + "n:" + root])[0])
    for x in leaf[3]:
        if not better(x, s):
            break
        total += last is None or x != last
        last = x
    return total + 1


@pytest.mark.parametrize("path", [p for p in VECTORS if load(p)[0]["kind"] == "sortedset"], ids=name)
def test_the_trees_hold_the_entries_in_order(path: pathlib.Path) -> None:
    vector, store = load(path)
    [head_key] = [k for k in store if k.endswith(":h")]
    prefix = head_key[:-1]
    head, _ = unseal(store[head_key])
    assert (head["order"], head["chunk"]) == (vector["order"], vector["chunk_size"])
    assert len(head["recent"]) <= min(head["gen"], 16) and head["epoch"] >= 1
    order = head["order"]

    by_score, score_nodes = walk(store, prefix, head["score"][0], head["score"][1])
    by_member, member_nodes = walk(store, prefix, head["member"][0], head["member"][1])
    assert head["score"][2] == head["member"][2] == len(by_score) == len(by_member) == vector["len"]
    keys = [sort_key(order, m, s) for m, s in by_score]
    assert all(a < b for a, b in zip(keys, keys[1:])), "the score tree is strictly in set order"
    members = [m.encode("utf-8") for m, _ in by_member]
    assert all(a < b for a, b in zip(members, members[1:])), "the member index is strictly by member"
    assert sorted(map(tuple, by_score)) == sorted(map(tuple, by_member))

    expected = [[m, score(s), rank] for m, s, rank in vector["entries"]]
    found = [[m, s, rank] for rank, (m, s) in enumerate(by_score, start=1)]
    assert [typed(e) for e in found] == [typed(e) for e in expected]
    node_keys = {k[len(prefix) + 2 :] for k in store if k.startswith(prefix + "n:")}
    assert score_nodes | member_nodes == node_keys, "every stored node is in a tree, and every named node stored"
    for node_id in node_keys:
        assert 1 <= int(NODE_ID.fullmatch(node_id)["epoch"], 16) <= head["epoch"]  # type: ignore[index]
    chunk = head["chunk"]
    for node_id in node_keys:
        node, _ = unseal(store[prefix + "n:" + node_id])
        if node[1] == 0 and node[0] == 4:  # compressed entry sets since format 4
            assert vector["format"] >= 4
            node = entry_set(node)
        assert len(node[2 if node[1] == 0 else 3]) <= chunk
        assert node[0] == (3 if node[1] == 1 and node_id in score_nodes and vector["format"] >= 3 else 2)
    if vector["format"] >= 3:
        better = (lambda a, b: a > b) if order == "desc" else (lambda a, b: a < b)
        for _, s, _ in expected:
            assert dense_rank(store, prefix, head, s) == 1 + len({x for _, x, _ in expected if better(x, s)})


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

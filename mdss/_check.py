"""``check()``: every invariant of a stored set, read from the store.

Damage is reported; garbage is not (nodes that no head names wait for ``gc()``: see :meth:`SortedSet.unreferenced`).
"""

from __future__ import annotations

import itertools
from typing import Any

from . import _snapshot
from ._engine import Engine
from ._order import member_key, score_of
from ._snapshot import Snapshot
from ._tree import Manifest, Tree, fill, full, group_starts, weight
from .exceptions import CorruptDataError, StoreUnavailableError


def check(engine: Engine) -> list[str]:
    """The problems found in the stored set (empty when sound)."""
    try:
        return _snapshot.read(engine, lambda snap: _check_snapshot(engine, snap))
    except (CorruptDataError, StoreUnavailableError) as exc:
        return [str(exc)]


def _check_snapshot(engine: Engine, snap: Snapshot) -> list[str]:
    problems: list[str] = []
    if snap.version is None:
        if _snapshot.headless(engine):
            problems.append(f"set {engine.name!r} has stored nodes but no head: its head was lost")
        return problems
    order = engine.ordering
    scored = check_tree(snap.score_tree, engine.chunk_size, "score tree", problems)
    indexed = check_tree(snap.member_index, engine.chunk_size, "member index", problems)
    # The score tree holds exactly the keys the member index's values make (a "first" set's carry sequence numbers),
    # each score of the same type as the value's: 3 and 3.0 are equal keys, but a set must read back the one written.
    pairs: list[set[Any]]
    if order.records:  # a record window: each value's entries (a row's one per column, with its slot as score)
        pairs = [
            {(m, s, type(s)) for m, s in scored},
            {(m, s, type(s)) for member, v in indexed for _, m, s in order.entries(member, v)},
        ]
    elif order.reaching:
        pairs = [
            {(order.tree_key(m, s), type(s)) for m, s in scored},
            {(order.key(m, v), type(score_of(v))) for m, v in indexed},
        ]
    else:
        pairs = [{(m, s, type(s)) for m, s in scored}, {(m, score_of(v), type(score_of(v))) for m, v in indexed}]
    if pairs[0] != pairs[1]:
        only_s = sorted(pairs[0] - pairs[1], key=repr)[:5]
        only_m = sorted(pairs[1] - pairs[0], key=repr)[:5]
        problems.append(f"member index and score tree differ: only in scores {only_s}, only in index {only_m}")
    return problems


def check_tree(tree: Tree, chunk: int, what: str, problems: list[str]) -> set[tuple[str, Any]]:
    """Check one tree's invariants, appending problems; returns its (stored member, score or value) pairs. In the score
    tree, also the distinct scores and last score each manifest records of a child (format 3), computed bottom-up from
    the entry sets."""
    scored = tree.keyfn is not member_key
    pairs: set[tuple[str, Any]] = set()
    expected: dict[str, tuple[int, Any]] = {}  # node id -> (count, first key) its parent records
    recorded: dict[str, tuple[Any, Any]] = {}  # node id -> (distinct scores, last score) its parent records
    dense: dict[str, tuple[int, Any]] = {}  # node id -> its true (distinct scores, last score)
    manifests: list[tuple[str, Manifest]] = []  # in walk order: parents before children
    previous_last = None
    total = 0
    for height, path, node in tree.walk():
        node_id, where = path[-1], f"{what} node {path[-1]} (height {height})"
        is_root = len(path) == 1
        minimum, most = fill(chunk, height)
        bound = tree.node_bytes
        ids = node.ids if isinstance(node, Manifest) else ()
        weighs = weight(height, node.members, ids, () if height else node.scores) if bound is not None else 0
        if len(node) > most:
            problems.append(f"{where} holds {len(node)} items, more than {most}")
        if bound is not None and weighs > bound and len(node) > 1:
            problems.append(f"{where} weighs {weighs} bytes, more than {bound}")
        if not is_root and not full(len(node), weighs, minimum, bound):
            problems.append(f"{where} holds {len(node)} items of {weighs} bytes, under the minimum fill {minimum}")
        if bound is not None and not is_root and height and len(node) < 2:
            problems.append(f"{where} is a manifest with a single child")
        if is_root and height and len(node) < 2:
            problems.append(f"{where} is a root manifest with a single child")
        if isinstance(node, Manifest):
            keys = node.firsts
            for child, count, first in zip(node.ids, node.counts, node.firsts):
                expected[child] = (count, first)
            if node.distincts is not None:
                recorded.update(zip(node.ids, zip(node.distincts, node.lasts)))  # type: ignore[arg-type]
            manifests.append((node_id, node))
            count = node.total
        else:
            keys = node.keys
            count = len(node)
            pairs.update(zip(node.members, node.scores))
            if previous_last is not None and node.keys and not previous_last < node.keys[0]:
                problems.append(f"{where} starts at {node.keys[0]!r}, not after the previous entry set's last key")
            if node.keys:
                previous_last = node.keys[-1]
                if scored:
                    dense[node_id] = (len(group_starts(node.scores)), node.scores[-1])
            total += count
        if any(not a < b for a, b in zip(keys, keys[1:])):
            problems.append(f"{where} is not strictly sorted")
        if node_id in expected:
            want_count, want_first = expected[node_id]
            first = keys[0] if keys else None
            if (want_count, want_first) != (count, first):
                problems.append(
                    f"{where}: its manifest records count {want_count} and first key {want_first!r}, "
                    f"it holds {count} from {first!r}"
                )
    if total != tree.count:
        problems.append(f"head says the {what} holds {tree.count} entries, it holds {total}")
    if not scored:
        if recorded:
            problems.append(f"{what} manifests record distinct scores, which only score tree manifests keep")
        return pairs
    for node_id, node in reversed(manifests):  # children before parents
        if not all(child in dense for child in node.ids):
            continue  # a damaged child, reported above
        children = [dense[child] for child in node.ids]
        joins = sum(1 for (_, last), first in zip(children, node.scores[1:]) if last == first)
        dense[node_id] = (sum(d for d, _ in children) - joins, children[-1][1])
    for node_id, (distinct, last) in recorded.items():
        true = dense.get(node_id)
        if distinct is not None and true is not None and (distinct, last) != true:
            problems.append(
                f"{what} node {node_id}: its manifest records {distinct} distinct scores and last score {last!r}, "
                f"it holds {true[0]} and ends at {true[1]!r}"
            )
    return pairs


def describe(engine: Engine, limit: int = 40) -> str:
    """The head and the first ``limit`` nodes of both trees, for a failed check (as sortedcontainers prints)."""
    lines = []
    try:
        snap = _snapshot.snapshot(engine)
        lines.append(f"head: {snap.head!r}")
        for tree, what in ((snap.score_tree, "scores"), (snap.member_index, "members")):
            for height, path, node in itertools.islice(tree.walk(), limit):
                items = node.firsts if isinstance(node, Manifest) else node.keys
                lines.append(f"{what} h{height} {path[-1]}: {len(node)} items {list(items)[:8]!r}")
    except Exception as exc:  # printing what can be printed of a damaged set
        lines.append(f"(stopped: {exc!r})")
    return "\n  ".join(lines)


def members(engine: Engine) -> list[str]:
    """Every member of the engine's set, in one snapshot (for a sharded set's check of its shards)."""
    return _snapshot.read(engine, lambda snap: snap.ranking.slice(0, snap.ranking.count)[0])

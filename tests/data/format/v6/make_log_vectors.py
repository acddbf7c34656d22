"""Write the update-log test vectors beside this script: sets whose heads hold an update log that is not merged, in
the head map, in log segments and a log manifest, and in a tail of records, with every stored value decoded, in JSON,
as docs/format.md describes it.

    python tests/data/format/v6/make_log_vectors.py

The other vectors are merged before they are dumped; these are not, so a reader must apply the log to the trees to find
the entries (docs/format.md, "Reading the update log"). ``log`` (SQLite: plain heads) loads 200 members in entry sets of
8 and makes 330 single writes, adds and removes, with no merge: the head names a log manifest, segments and inline
entries. ``log-tailed``, ``log-bridged`` and ``log-bridged-several`` are on a memory store, which applies appends: heads
``0xC1`` (records after the core), ``0xC2`` (after a seal, with a bridge from the core it replaced, and a record
appended across it by a writer that held that core) and ``0xC3`` (bridged from several cores: every append is made to
count as slow, so that seals keep the cores they bridge from). Besides the kinds of ../v5/make_vectors.py and
./make_vectors.py, a value decodes to kind ``segment`` (``format``, ``first``, ``entries``), ``log_manifest``
(``format``, ``segments``) or ``tailed_head``: ``marker`` (hex), ``core_sha1``, ``core`` (the core head map, with its
``crc32``), ``bridges`` (each core it bridges from: ``sha1``, ``start``, ``end``, offsets from the first record; a
``0xC2`` head's parent starts at 0 and ends at *P*), ``tail`` (where the tail starts: *B*) and ``records`` (each one's
``offset``, ``nonce``, ``tokens`` and ``entries``, and the ``crc32`` of its body). Scores in log entries are JSON
numbers, floats written with a fraction. Made once, by the code that writes these heads, and never regenerated: the
script refuses to overwrite them.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import pathlib
import random
import sys
import tempfile
import zlib
from types import ModuleType
from typing import Any

import msgpack

import mdss
from mdss import _engine, _tail

HERE = pathlib.Path(__file__).resolve().parent
NAMES = ("log", "log-tailed", "log-bridged", "log-bridged-several")


def script(path: pathlib.Path) -> ModuleType:
    """A script beside the vectors (not a package module)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


V6 = script(HERE / "make_vectors.py")
FIXTURES = script(HERE.parent / "make_fixtures.py")


def tailed(value: bytes) -> dict[str, Any]:
    """A head with a tail, bridged or not, decoded field by field."""
    start, cores, tail = _tail.layout(value)
    size = int.from_bytes(value[21:25], "big")
    core = value[_tail.HEADER : _tail.HEADER + size]
    assert hashlib.sha1(core).digest() == value[1:21]
    records, at = [], start
    while at < len(value):
        length = int.from_bytes(value[at : at + 2], "big")
        body = value[at + 2 : at + 2 + length]
        payload, crc = body[:-4], body[-4:]
        assert zlib.crc32(payload).to_bytes(4, "big") == crc
        count = payload[_tail.NONCE]
        tokens = payload[_tail.NONCE + 1 : _tail.NONCE + 1 + _tail.TOKEN * count]
        entries = msgpack.unpackb(payload[_tail.NONCE + 1 + _tail.TOKEN * count :], raw=False)
        records.append(
            {
                "offset": at - start,
                "nonce": payload[: _tail.NONCE].hex(),
                "tokens": [tokens[i : i + _tail.TOKEN].hex() for i in range(0, len(tokens), _tail.TOKEN)],
                "entries": entries,
                "crc32": crc.hex(),
            }
        )
        at += 2 + length
    assert at == len(value)
    return {
        "kind": "tailed_head",
        "marker": value[:1].hex(),
        "core_sha1": value[1:21].hex(),
        "core": V6.decoded(":h", core),
        "bridges": [{"sha1": sha.hex(), "start": a - start, "end": b - start} for sha, a, b in cores],
        "tail": tail - start,
        "records": records,
    }


def decoded(key: str, value: bytes) -> dict[str, Any]:
    if key.endswith(":h") and _tail.marked(value):
        return tailed(value)
    if not key.endswith((":h", ":t", ":m")):
        assert zlib.crc32(value[:-4]).to_bytes(4, "big") == value[-4:], key
        found = msgpack.unpackb(value[:-4], raw=False)
        out = {"crc32": value[-4:].hex()}
        if found[1] == 4:
            return {**out, "kind": "segment", "fields": {"format": found[0], "first": found[2], "entries": found[3]}}
        if found[1] == 5:
            return {**out, "kind": "log_manifest", "fields": {"format": found[0], "segments": found[2]}}
    return V6.decoded(key, value)  # type: ignore[no-any-return]


def described(store: mdss.Store, board: mdss.SortedSet) -> dict[str, Any]:
    """The set as the other vectors describe it, not merged."""
    assert board.check() == [], board.check()
    info = board.info()
    dumped = FIXTURES.dump(store)
    return {
        "kind": "sortedset",
        "format": V6.CHAINED,
        "name": board.name,
        "order": board.order,
        "chunk_size": board.chunk_size,
        "len": len(board),
        "heights": [info["score_tree_height"], info["member_index_height"]],
        "entries": [[e.member, FIXTURES.score_json(e.score), e.rank] for e in board.range(0, len(board) + 1)],
        "store": dumped,
        "decoded": {key: decoded(key, base64.b64decode(v)) for key, v in dumped.items()},
    }


def writes(board: mdss.SortedSet, rng: random.Random, count: int, size: int) -> None:
    """``count`` single adds (int or float scores), increments and removes of members ``m-0000`` on."""
    for _ in range(count):
        member, roll = f"m-{rng.randrange(size + size // 10):04d}", rng.random()
        if roll < 0.2:
            board.remove(member)
        elif roll < 0.3:
            board.incr(member, rng.randrange(1, 9))
        else:
            board.add(member, rng.choice([rng.randrange(60), rng.randrange(60) + 0.5]))


def logged() -> dict[str, Any]:
    store = mdss.open_store(f"sqlite:///{tempfile.mkdtemp(prefix='mdss-vector-')}/vector.db")
    rng = random.Random(11)
    mdss.SortedSet.load(store, "log", {f"m-{i:04d}": rng.randrange(60) for i in range(200)}, chunk_size=8, gc_grace=0)
    board = mdss.SortedSet(store, "log", chunk_size=8, log_limit=10_000, gc_grace=0)
    writes(board, rng, 330, 200)
    board.gc(min_age=0, wait=False)
    log = board.engine.head.log
    assert log.pages is not None and log.segs and log.inline, "a log manifest, segments and inline entries"
    return described(store, board)


def tailed_set(name: str, order: str, seed: int) -> tuple[mdss.Store, mdss.SortedSet, random.Random]:
    store = mdss.open_store("memory://")
    rng = random.Random(seed)
    pairs = {f"m-{i:04d}": rng.randrange(60) for i in range(80)}
    mdss.SortedSet.load(store, name, pairs, order=order, chunk_size=8, gc_grace=0)
    return store, mdss.SortedSet(store, name, order=order, chunk_size=8, log_limit=10_000, gc_grace=0), rng


def with_tail() -> dict[str, Any]:
    store, board, rng = tailed_set("log tailed", "asc", 12)
    writes(board, rng, 12, 80)
    assert store.get(board.keys.head).value[:1] == _tail.TAILED
    return described(store, board)


def bridged(name: str, mark: bytes, seed: int) -> dict[str, Any]:
    """Appends by ``sealer`` until its seal writes a head marked ``mark``, then one by ``stale``, which holds a core
    that head bridges from: the record lands across the bridge."""
    store, sealer, rng = tailed_set(name, "desc", seed)
    stale = mdss.SortedSet(store, name, log_limit=10_000, gc_grace=0)
    stale.scores(["m-0000"])
    for _ in range(400):
        writes(sealer, rng, 1, 80)
        if store.get(sealer.keys.head).value[:1] == mark:
            break
    else:
        raise AssertionError(f"no head marked {mark.hex()} in 400 writes")
    stale.add("late", 99.5)
    value = store.get(sealer.keys.head).value
    assert value[:1] == mark and _tail.split("k", value)[1][-1][0] == stale.engine.head.recent[0]
    return described(store, sealer)


def main() -> None:
    if any((HERE / f"{name}.json").exists() for name in NAMES):
        sys.exit(f"{HERE} holds the log vectors already: they are made once")
    built = {"log": logged(), "log-tailed": with_tail(), "log-bridged": bridged("log bridged", _tail.BRIDGED, 13)}
    _engine.SLOW = 0.0  # every append counts as slow: seals keep the cores they bridge from
    built["log-bridged-several"] = bridged("log bridged several", _tail.BRIDGES, 14)
    for name, vector in built.items():
        text = json.dumps(vector, indent=1, ensure_ascii=False) + "\n"
        (HERE / f"{name}.json").write_text(text, encoding="utf-8")
    print(f"wrote the update-log vectors to {HERE}")


if __name__ == "__main__":
    main()

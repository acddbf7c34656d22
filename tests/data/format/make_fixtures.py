"""Write the stored-format fixtures that tests/test_format_compat.py reads: ``v<FORMAT>/*.json``.

Each fixture is a small sorted set (or a top-N set) built on a memory store
through the public API, dumped key by key (values in base64) together with
what every read of it must answer. Fixtures of a format are made once, by
the code that wrote that format, and never regenerated: they are the proof
that later code still reads what earlier versions stored.

Format 1 was made at commit eb688bf (the last commit before format 2):

    git worktree add /tmp/mdss-v1 eb688bf
    PYTHONPATH=/tmp/mdss-v1 python tests/data/format/make_fixtures.py
    git worktree remove /tmp/mdss-v1

Formats 2 to 5 were made by the commits that introduced them (``v2/`` to
``v5/`` hold them as test vectors, with every value decoded; see
docs/format.md). Format 3 changed only score tree manifests (distinct counts
and last scores, for dense ranks); format 4 only entry sets (lz4-compressed
when that saves bytes), and added the ``compressed`` fixture, whose entry sets
are large enough to be; format 5 added patches of entry sets (``v5/make_vectors.py``
adds sets that hold them). Format 6 added deltas of manifests, which these
sets are too small to take: ``v6/`` holds only the sets of its
``make_vectors.py``, which do.

The script writes ``v<FORMAT>`` for the newest format of the ``mdss`` it
imports and refuses to overwrite a directory that exists.
"""

from __future__ import annotations

import base64
import json
import pathlib
import random
import sys
import tempfile
from typing import Any

import mdss
from mdss import _codec

#: The newest format the imported mdss writes: format 3 (``_codec.DENSE``) changed only score tree manifests, format 4
#: (``_codec.ZIPPED``) only entry sets (compressed), format 5 (``_codec.PATCHED``) added patches of entry sets and
#: format 6 (``_codec.CHAINED``) deltas of manifests.
FORMAT = getattr(
    _codec, "CHAINED", getattr(_codec, "PATCHED", getattr(_codec, "ZIPPED", getattr(_codec, "DENSE", _codec.FORMAT)))
)

HERE = pathlib.Path(__file__).resolve().parent
BIG = 2**63 - 1


def score_json(score: int | float) -> int | str:
    """Ints as JSON integers (exact at any size), floats as their repr (JSON has no inf)."""
    return score if type(score) is int else repr(score)


def dump(store: mdss.Store) -> dict[str, str]:
    return {key: base64.b64encode(store.get(key).value).decode() for key in sorted(store.keys(store.namespace + ":"))}


def new_store() -> mdss.Store:
    """A store for one fixture: from format 4 on, SQLite in a scratch directory, whose heads are always plain maps
    (the memory store applies appends: its heads may carry a tail or a bridge, which only the log vectors of
    ``v6/make_log_vectors.py`` hold)."""
    if FORMAT < 4:
        return mdss.open_store("memory://")
    return mdss.open_store(f"sqlite:///{tempfile.mkdtemp(prefix='mdss-fixture-')}/fixture.db")


def sorted_set(build: Any) -> dict[str, Any]:
    """Build a set with ``build(store)`` (which returns it), drop its garbage, and describe it."""
    store = new_store()
    board = build(store)
    if hasattr(board, "merge"):  # the trees hold every entry (only the log vectors of v6/ have a log)
        board.merge()
    board.gc(min_age=0, wait=False)  # replaced nodes would read as leaks to a check() an hour later
    assert board.check() == [], board.check()
    info = board.info()
    return {
        "kind": "sortedset",
        "format": FORMAT,
        "name": board.name,
        "order": board.order,
        "chunk_size": board.chunk_size,
        "len": len(board),
        "heights": [info["score_tree_height"], info["member_index_height"]],
        "entries": [[e.member, score_json(e.score), e.rank] for e in board.range(0, len(board) + 1)],
        "store": dump(store),
    }


def top_n(name: str, n: int, order: str, posts: list[tuple[str, int | float]]) -> dict[str, Any]:
    store = new_store()
    podium = mdss.TopN(store, name, n=n, order=order)
    for member, score in posts:
        podium.post(member, score)
    return {
        "kind": "topn",
        "format": FORMAT,
        "name": name,
        "n": n,
        "order": order,
        "entries": [[e.member, score_json(e.score), e.rank] for e in podium.top()],
        "store": dump(store),
    }


def build_fixtures() -> dict[str, dict[str, Any]]:
    rng = random.Random(20240601)
    ints = [rng.randrange(-50, 50) for _ in range(52)] + [BIG, -BIG - 1, 2**53 + 1, 2**53, 2**62, -(2**53) - 1, 0, 0]
    floats = [rng.uniform(-1e6, 1e6) for _ in range(50)] + [float("inf"), float("-inf"), 0.5, 0.5, -0.0, 1e-300]
    unicode = ["ärger", "日本語", "🎲dice", "a\u0301", "á", "Ωmega", "z", "ZZ", "𝔘𝔫𝔦", "ÿ", "\u00a0nbsp", "ﬁ", "ß"]

    def desc_ints(store: mdss.Store) -> mdss.SortedSet:
        board = mdss.SortedSet(store, "desc ints", order="desc", chunk_size=4, gc_grace=0)
        board.add_many({f"player-{i:02d}": s for i, s in enumerate(ints)})
        board.incr("player-03", 7)
        return board

    def asc_floats(store: mdss.Store) -> mdss.SortedSet:
        board = mdss.SortedSet(store, "asc/floats:{x}", order="asc", chunk_size=4, gc_grace=0)
        for i, s in enumerate(floats):
            board.add(f"lap-{i:02d}", s)
        board.add_many({"int-7": 7, "int-big": BIG, "int-min": -BIG - 1})  # ints and floats in one set
        return board

    def after_removals(store: mdss.Store) -> mdss.SortedSet:
        board = mdss.SortedSet(store, "after removals", chunk_size=4, gc_grace=0)
        board.add_many({f"m{i:03d}": (i * 37) % 101 for i in range(120)})
        board.remove_many([f"m{i:03d}" for i in range(0, 120, 2)])
        board.add("m001", 1000, op="best")
        return board

    def unicode_members(store: mdss.Store) -> mdss.SortedSet:
        board = mdss.SortedSet(store, "ünïcode ☃", order="asc", chunk_size=4, gc_grace=0)
        board.add_many({m * k: len(m) * k % 7 for m in unicode for k in (1, 2, 3, 4, 5)})
        return board

    def loaded(store: mdss.Store) -> mdss.SortedSet:
        pairs = {f"loaded-{i:02d}": rng.choice([rng.randrange(10**12), rng.random()]) for i in range(61)}
        return mdss.SortedSet.load(store, "loaded", pairs, order="asc", chunk_size=4, gc_grace=0)

    def default_chunk(store: mdss.Store) -> mdss.SortedSet:
        board = mdss.SortedSet(store, "default chunk", gc_grace=0)
        board.add_many({"alice": 310, "bob": 120, "carol": 310, "dave": 50.5})
        return board

    def compressed(store: mdss.Store) -> mdss.SortedSet:
        """Entry sets of 40 to 80 entries: a kilobyte or more, stored compressed since format 4."""
        pairs = {f"player-{i:05d}": rng.randrange(10**6) for i in range(400)}
        board = mdss.SortedSet.load(store, "compressed", pairs, chunk_size=80, gc_grace=0)
        board.add_many({f"player-{i:05d}": rng.randrange(10**6) for i in range(0, 400, 7)})
        return board

    def emptied(store: mdss.Store) -> mdss.SortedSet:
        board = mdss.SortedSet(store, "emptied", chunk_size=4, gc_grace=0)
        board.add_many({f"m{i}": i for i in range(20)})
        board.remove_many([f"m{i}" for i in range(20)])
        return board

    fixtures = {
        name: sorted_set(build)
        for name, build in [
            ("desc-ints", desc_ints),
            ("asc-floats", asc_floats),
            ("after-removals", after_removals),
            ("unicode", unicode_members),
            ("loaded", loaded),
            ("default-chunk", default_chunk),
            ("emptied", emptied),
            *([("compressed", compressed)] if FORMAT >= 4 else []),
        ]
    }
    for name in ("desc-ints", "asc-floats", "after-removals", "unicode", "loaded"):
        assert min(fixtures[name]["heights"]) >= 2, (name, fixtures[name]["heights"])
    posts = [(f"p{i % 9}", rng.randrange(100)) for i in range(40)] + [("ünï", 99), ("big", BIG)]
    fixtures["topn-desc"] = top_n("podium", 5, "desc", posts)
    fixtures["topn-asc"] = top_n("fastest lap", 3, "asc", [("ann", 61.5), ("bob", 59.9), ("cid", 60), ("ann", 58.0)])
    return fixtures


def main() -> None:
    out = HERE / f"v{FORMAT}"
    if out.exists():
        sys.exit(f"{out} exists: fixtures of a stored format are made once, by the code that wrote it")
    fixtures = build_fixtures()
    out.mkdir()
    for name, fixture in fixtures.items():
        (out / f"{name}.json").write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(fixtures)} fixtures of format {FORMAT} to {out} with mdss from {mdss.__file__}")


if __name__ == "__main__":
    main()

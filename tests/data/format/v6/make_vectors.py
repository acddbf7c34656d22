"""Write the format-6 test vectors beside this script: two sets of manifests with deltas, with every stored value
decoded, in JSON, as docs/format.md describes it.

    python tests/data/format/v6/make_vectors.py

The same as ../v5/make_vectors.py (whose decoding it reuses), for format 6: a merge that changes few children of a
stored manifest below the root may write only a delta, ``[6, 7, height, removed members, removed scores, ids, counts,
first members, first scores, distincts, last scores]``, which decodes to ``format``, ``height``, ``removed_members``,
``removed_scores``, ``ids``, ``counts``, ``first_members``, ``first_scores``, ``distincts`` and ``last_scores`` (kind
``delta``); the manifest above names the child ``base+delta+...``, and is ``[6, 1, ...]`` with the fields of a
format-5 manifest. Every other value is as in format 5.

The fixtures of ../make_fixtures.py are not written again here: their sets are too small to take a delta, so in format
6 they store what ../v5/ holds. ``chained`` loads 900 members in entry sets of 8 (desc, int and float scores: four
levels), then makes 300 single writes and removes with a log of 3, merged as it fills, so that each merge changes a
child or two of the manifests it reaches; ``chained-asc`` does the same to 700 members (asc, 200 writes). Made once,
by the code that writes format 6, and never regenerated: the script refuses to overwrite them.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import pathlib
import random
import sys
import zlib
from types import ModuleType
from typing import Any

import msgpack

import mdss
from mdss import _codec

HERE = pathlib.Path(__file__).resolve().parent
CHAINED = 6


def script(path: pathlib.Path) -> ModuleType:
    """A script beside the vectors (not a package module)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


V5 = script(HERE.parent / "v5" / "make_vectors.py")
scores_json = V5.scores_json


def _lasts(lasts: list[Any] | None) -> list[Any] | None:
    return None if lasts is None else [None if s is None else scores_json([s])[0] for s in lasts]


def decoded(key: str, value: bytes) -> dict[str, Any]:
    if key.endswith((":h", ":t", ":m")) or msgpack.unpackb(value[:-4], raw=False)[0] != CHAINED:
        return V5.decoded(key, value)  # type: ignore[no-any-return]
    assert zlib.crc32(value[:-4]).to_bytes(4, "big") == value[-4:], key
    found = msgpack.unpackb(value[:-4], raw=False)
    out: dict[str, Any] = {"crc32": value[-4:].hex()}
    if found[1] == 7:  # a delta
        version, _, height, removed_members, removed_scores, ids, counts, members, scores, distincts, lasts = found
        fields = {"format": version, "height": height, "removed_members": removed_members}
        fields |= {"removed_scores": scores_json(removed_scores), "ids": ids, "counts": counts}
        fields |= {"first_members": members, "first_scores": scores_json(scores), "distincts": distincts}
        return {**out, "kind": "delta", "fields": fields | {"last_scores": _lasts(lasts)}}
    version, kind, height, ids, counts, members, scores, distincts, lasts = found
    assert kind == 1, key
    fields = {"format": version, "height": height, "ids": ids, "counts": counts}
    fields |= {"first_members": members, "first_scores": scores_json(scores), "distincts": distincts}
    return {**out, "kind": "manifest", "fields": fields | {"last_scores": _lasts(lasts)}}


def chained_set(store: mdss.Store, name: str, order: str, size: int, writes: int, seed: int) -> mdss.SortedSet:
    """``size`` members loaded in entry sets of 8, then ``writes`` single adds (int or float scores) and removes with
    a log of 3: each merge changes a child or two of the manifests it reaches, and writes deltas."""
    rng = random.Random(seed)
    pairs = {f"m-{i:04d}": rng.randrange(60) for i in range(size)}
    mdss.SortedSet.load(store, name, pairs, order=order, chunk_size=8, gc_grace=0)
    board = mdss.SortedSet(store, name, order=order, chunk_size=8, log_limit=3, gc_grace=0)
    for _ in range(writes):
        member = f"m-{rng.randrange(size + size // 10):04d}"
        if rng.random() < 0.2:
            board.remove(member)
        else:
            board.add(member, rng.choice([rng.randrange(60), rng.randrange(60) + 0.5]))
    return board


def chains(fixture: dict[str, Any]) -> tuple[int, int]:
    """The longest chain of deltas the fixture's manifests name in the score tree, and in the member index."""
    score_tree = member_index = 0
    for found in fixture["decoded"].values():
        if found["kind"] == "manifest" and found["fields"]["format"] == CHAINED:
            longest = max(i.count("+") for i in found["fields"]["ids"])
            assert longest and found["fields"]["height"] > 1, "a format-6 manifest names a manifest with deltas"
            if found["fields"]["distincts"] is None:
                member_index = max(member_index, longest)
            else:
                score_tree = max(score_tree, longest)
    return score_tree, member_index


def main() -> None:
    fixtures = script(HERE.parent / "make_fixtures.py")
    if getattr(_codec, "CHAINED", None) != CHAINED or fixtures.FORMAT != CHAINED:
        sys.exit("the mdss imported does not write format 6")
    if any(HERE.glob("*.json")):
        sys.exit(f"{HERE} holds vectors already: they are made once, by the code that wrote format 6")
    built = {"chained": fixtures.sorted_set(lambda s: chained_set(s, "chained", "desc", 900, 300, 7))}
    built["chained-asc"] = fixtures.sorted_set(lambda s: chained_set(s, "chained asc", "asc", 700, 200, 8))
    for fixture in built.values():
        fixture["format"] = CHAINED
        fixture["decoded"] = {key: decoded(key, base64.b64decode(v)) for key, v in fixture["store"].items()}
    for name in ("chained", "chained-asc"):
        assert min(chains(built[name])) >= 2, (name, "chains of two deltas or more in both trees")
    for name, fixture in built.items():
        text = json.dumps(fixture, indent=1, ensure_ascii=False) + "\n"
        (HERE / f"{name}.json").write_text(text, encoding="utf-8")
    print(f"wrote the format-6 vectors to {HERE}")


if __name__ == "__main__":
    main()

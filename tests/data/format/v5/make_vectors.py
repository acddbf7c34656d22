"""Write the format-5 test vectors beside this script: the fixtures of ../make_fixtures.py and two sets of patched
entry sets, plus every stored value decoded, in JSON, as docs/format.md describes it.

    python tests/data/format/v5/make_vectors.py

The same as ../v4/make_vectors.py (whose decoding it reuses), for format 5: a merge that changes few entries of a
stored entry set may write only a patch, ``[5, 6, removed members, removed scores, added members, added scores]``,
which decodes to ``format``, ``removed_members``, ``removed_scores``, ``added_members`` and ``added_scores`` (kind
``patch``); the manifest above names the child ``base+patch``, and is ``[5, 1, height, ids, counts, first members,
first scores, distincts, last scores]`` in both trees, decoded with the field names of a format-3 manifest
(``distincts`` and ``last_scores`` nil in the member index). Every other value is as in format 4.

Besides the fixtures (some of which hold patches already: their last merge patches the entry sets it touches little),
``patched`` loads 300 members in entry sets of 8 (desc, int and float scores), then makes 100 single writes with a log
of 6, merged as it fills; ``patched-compressed`` does the same to 320 members in entry sets of 64 (asc), which are
stored compressed, so that its patches have format-4 bases. Made once, by the code that writes format 5, and never
regenerated: the script refuses to overwrite them.
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
PATCHED = 5


def script(path: pathlib.Path) -> ModuleType:
    """A script beside the vectors (not a package module)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


V4 = script(HERE.parent / "v4" / "make_vectors.py")
scores_json = V4.V3.V2.scores_json


def decoded(key: str, value: bytes) -> dict[str, Any]:
    if key.endswith((":h", ":t", ":m")) or msgpack.unpackb(value[:-4], raw=False)[0] != PATCHED:
        return V4.decoded(key, value)  # type: ignore[no-any-return]
    assert zlib.crc32(value[:-4]).to_bytes(4, "big") == value[-4:], key
    found = msgpack.unpackb(value[:-4], raw=False)
    out: dict[str, Any] = {"crc32": value[-4:].hex()}
    if found[1] == 6:  # a patch
        version, _, removed_members, removed_scores, added_members, added_scores = found
        fields = {"format": version, "removed_members": removed_members, "removed_scores": scores_json(removed_scores)}
        fields |= {"added_members": added_members, "added_scores": scores_json(added_scores)}
        return {**out, "kind": "patch", "fields": fields}
    version, kind, height, ids, counts, members, scores, distincts, lasts = found
    assert kind == 1, key
    fields = {"format": version, "height": height, "ids": ids, "counts": counts}
    fields |= {"first_members": members, "first_scores": scores_json(scores), "distincts": distincts}
    fields |= {"last_scores": None if lasts is None else [None if s is None else scores_json([s])[0] for s in lasts]}
    return {**out, "kind": "manifest", "fields": fields}


def patched_set(
    store: mdss.Store, name: str, order: str, chunk: int, size: int, writes: int, seed: int, scale: int
) -> mdss.SortedSet:
    """``size`` members loaded in entry sets of ``chunk``, then ``writes`` single adds (int or float scores) and removes
    with a log of 6: each merge changes a few entries of the entry sets it touches, and writes patches."""
    rng = random.Random(seed)
    pairs = {f"m-{i:04d}": rng.randrange(scale) for i in range(size)}
    mdss.SortedSet.load(store, name, pairs, order=order, chunk_size=chunk, gc_grace=0)
    board = mdss.SortedSet(store, name, order=order, chunk_size=chunk, log_limit=6, gc_grace=0)
    for _ in range(writes):
        member = f"m-{rng.randrange(size + size // 10):04d}"
        if rng.random() < 0.2:
            board.remove(member)
        else:
            board.add(member, rng.choice([rng.randrange(scale), rng.randrange(scale) + 0.5]))
    return board


def patched_children(fixture: dict[str, Any]) -> tuple[int, int]:
    """How many children ``base+patch`` the fixture's manifests name in the score tree, and in the member index."""
    score_tree = member_index = 0
    for found in fixture["decoded"].values():
        if found["kind"] == "manifest" and found["fields"]["format"] == PATCHED:
            joined = sum("+" in i for i in found["fields"]["ids"])
            assert joined, "a format-5 manifest names a patched child"
            if found["fields"]["distincts"] is None:
                member_index += joined
            else:
                score_tree += joined
    return score_tree, member_index


def main() -> None:
    fixtures = script(HERE.parent / "make_fixtures.py")
    if getattr(_codec, "PATCHED", None) != PATCHED or fixtures.FORMAT != PATCHED:
        sys.exit("the mdss imported does not write format 5")
    if any(HERE.glob("*.json")):
        sys.exit(f"{HERE} holds vectors already: they are made once, by the code that wrote format 5")
    built = fixtures.build_fixtures()
    built["patched"] = fixtures.sorted_set(lambda s: patched_set(s, "patched", "desc", 8, 300, 100, 5, 60))
    built["patched-compressed"] = fixtures.sorted_set(
        lambda s: patched_set(s, "patched compressed", "asc", 64, 320, 30, 6, 10**6)
    )
    for fixture in built.values():
        fixture["format"] = PATCHED
        fixture["decoded"] = {key: decoded(key, base64.b64decode(v)) for key, v in fixture["store"].items()}
    for name in ("patched", "patched-compressed"):
        assert min(patched_children(built[name])) > 0, (name, "patches in both trees")
    found = built["patched-compressed"]["decoded"]
    zipped = {key.rpartition(":")[2] for key, d in found.items() if d["kind"] == "leaf" and d["fields"]["format"] == 4}
    ids = [i for d in found.values() if d["kind"] == "manifest" for i in d["fields"]["ids"]]
    assert zipped & {i.split("+")[0] for i in ids if "+" in i}, "a compressed entry set is patched"
    for name, fixture in built.items():
        text = json.dumps(fixture, indent=1, ensure_ascii=False) + "\n"
        (HERE / f"{name}.json").write_text(text, encoding="utf-8")
    print(f"wrote the format-5 vectors to {HERE}")


if __name__ == "__main__":
    main()

"""Write the format-3 test vectors beside this script: the fixtures of ../make_fixtures.py, plus every
stored value decoded, in JSON, as docs/format.md describes it.

    python tests/data/format/v3/make_vectors.py

The same as ../v2/make_vectors.py (whose decoding it reuses), for format 3:
score tree manifests are ``[3, 1, height, ids, counts, first members, first
scores, distincts, last scores]`` and decode with the two more fields
``distincts`` and ``last_scores``; every other value is as in format 2. Made
once, by the code that writes format 3, and never regenerated: the script
refuses to overwrite them.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import pathlib
import sys
import zlib
from types import ModuleType
from typing import Any

import msgpack

HERE = pathlib.Path(__file__).resolve().parent


def script(path: pathlib.Path) -> ModuleType:
    """A script beside the vectors (not a package module)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


V2 = script(HERE.parent / "v2" / "make_vectors.py")


def decoded(key: str, value: bytes) -> dict[str, Any]:
    found = msgpack.unpackb(value[:-4], raw=False)
    if key.endswith((":h", ":t")) or found[0] != 3:
        return V2.decoded(key, value)  # type: ignore[no-any-return]
    assert zlib.crc32(value[:-4]).to_bytes(4, "big") == value[-4:], key
    version, kind, height, ids, counts, members, scores, distincts, lasts = found
    fields = {"format": version, "height": height, "ids": ids, "counts": counts}
    fields |= {"first_members": members, "first_scores": V2.scores_json(scores)}
    fields |= {"distincts": distincts, "last_scores": [None if s is None else V2.scores_json([s])[0] for s in lasts]}
    return {"crc32": value[-4:].hex(), "kind": "manifest", "fields": fields}


def main() -> None:
    fixtures = script(HERE.parent / "make_fixtures.py")
    if fixtures.FORMAT != 3:
        sys.exit(f"the mdss imported writes format {fixtures.FORMAT}, not 3")
    if any(HERE.glob("*.json")):
        sys.exit(f"{HERE} holds vectors already: they are made once, by the code that wrote format 3")
    for name, fixture in fixtures.build_fixtures().items():
        fixture["decoded"] = {key: decoded(key, base64.b64decode(v)) for key, v in fixture["store"].items()}
        text = json.dumps(fixture, indent=1, ensure_ascii=False) + "\n"
        (HERE / f"{name}.json").write_text(text, encoding="utf-8")
    print(f"wrote the format-3 vectors to {HERE}")


if __name__ == "__main__":
    main()

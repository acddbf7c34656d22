"""Write the format-2 test vectors beside this script: the fixtures of ../make_fixtures.py, plus every
stored value decoded, in JSON, as docs/format.md describes it.

    python tests/data/format/v2/make_vectors.py

Each ``*.json`` holds what make_fixtures.py dumps (the keys with their values
in base64, the set's settings and every entry with its rank; so
tests/test_format_compat.py reads these too) and ``decoded``: for each key,
its kind, the CRC-32 that seals it and its fields. tests/test_format_vectors.py
decodes the values with msgpack and zlib alone and checks them against all of
it. Like every fixture, they are made once, by the code that writes format 2,
and never regenerated: the script refuses to overwrite them.
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


def make_fixtures() -> ModuleType:
    """../make_fixtures.py, which builds the sets (it is a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("make_fixtures", HERE.parent / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scores_json(scores: list[Any]) -> list[int | str]:
    """Ints as JSON integers, floats as their repr (JSON has no inf, and 1.0 must stay a float)."""
    return [s if type(s) is int else repr(s) for s in scores]


def decoded(key: str, value: bytes) -> dict[str, Any]:
    payload, seal = value[:-4], value[-4:]
    assert zlib.crc32(payload).to_bytes(4, "big") == seal, key
    found = msgpack.unpackb(payload, raw=False)
    out: dict[str, Any] = {"crc32": seal.hex()}
    if key.endswith(":h"):
        return {**out, "kind": "head", "fields": found}
    if key.endswith(":t"):
        version, n, order, members, scores = found
        fields = {"format": version, "n": n, "order": order, "members": members, "scores": scores_json(scores)}
        return {**out, "kind": "topn", "fields": fields}
    version, kind, *rest = found
    if kind == 0:
        members, scores = rest
        return {**out, "kind": "leaf", "fields": {"format": version, "members": members, "scores": scores_json(scores)}}
    height, ids, counts, members, scores = rest
    fields = {"format": version, "height": height, "ids": ids, "counts": counts}
    fields |= {"first_members": members, "first_scores": scores_json(scores)}
    return {**out, "kind": "manifest", "fields": fields}


def main() -> None:
    fixtures = make_fixtures()
    if fixtures.FORMAT != 2:
        sys.exit(f"the mdss imported writes format {fixtures.FORMAT}, not 2")
    if any(HERE.glob("*.json")):
        sys.exit(f"{HERE} holds vectors already: they are made once, by the code that wrote format 2")
    for name, fixture in fixtures.build_fixtures().items():
        fixture["decoded"] = {key: decoded(key, base64.b64decode(v)) for key, v in fixture["store"].items()}
        text = json.dumps(fixture, indent=1, ensure_ascii=False) + "\n"
        (HERE / f"{name}.json").write_text(text, encoding="utf-8")
    print(f"wrote the format-2 vectors to {HERE}")


if __name__ == "__main__":
    main()

"""Write the format-4 test vectors beside this script: the fixtures of ../make_fixtures.py, plus every
stored value decoded, in JSON, as docs/format.md describes it.

    python tests/data/format/v4/make_vectors.py

The same as ../v3/make_vectors.py (whose decoding it reuses), for format 4:
an entry set of 256 bytes or more may be stored compressed, ``[4, 0, size,
block]``, ``block`` the lz4 block of the msgpack array ``[members, scores]``,
``size`` bytes long. It decodes to ``format``, ``size``, ``members`` and
``scores``; a set's marker (``…:m``, any value) is ``{"kind": "marker"}``;
every other value is as in format 3. Made once, by the code that
writes format 4, and never regenerated: the script refuses to overwrite them.
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

import lz4.block
import msgpack

HERE = pathlib.Path(__file__).resolve().parent


def script(path: pathlib.Path) -> ModuleType:
    """A script beside the vectors (not a package module)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


V3 = script(HERE.parent / "v3" / "make_vectors.py")


def decoded(key: str, value: bytes) -> dict[str, Any]:
    if key.endswith(":m"):  # a set's marker: any value (docs/format.md, "Keys")
        return {"kind": "marker", "value": value.decode("latin-1")}
    if key.endswith((":h", ":t")) or msgpack.unpackb(value[:-4], raw=False)[0] != 4:
        return V3.decoded(key, value)  # type: ignore[no-any-return]
    found = msgpack.unpackb(value[:-4], raw=False)
    assert zlib.crc32(value[:-4]).to_bytes(4, "big") == value[-4:], key
    version, kind, size, block = found
    members, scores = msgpack.unpackb(lz4.block.decompress(block, uncompressed_size=size), raw=False)
    fields = {"format": version, "size": size, "members": members, "scores": V3.V2.scores_json(scores)}
    return {"crc32": value[-4:].hex(), "kind": "leaf", "fields": fields}


def main() -> None:
    fixtures = script(HERE.parent / "make_fixtures.py")
    if fixtures.FORMAT != 4:
        sys.exit(f"the mdss imported writes format {fixtures.FORMAT}, not 4")
    if any(HERE.glob("*.json")):
        sys.exit(f"{HERE} holds vectors already: they are made once, by the code that wrote format 4")
    built = fixtures.build_fixtures()
    for fixture in built.values():
        fixture["decoded"] = {key: decoded(key, base64.b64decode(v)) for key, v in fixture["store"].items()}
    assert any(d.get("fields", {}).get("format") == 4 for d in built["compressed"]["decoded"].values()), "none zipped"
    for name, fixture in built.items():
        text = json.dumps(fixture, indent=1, ensure_ascii=False) + "\n"
        (HERE / f"{name}.json").write_text(text, encoding="utf-8")
    print(f"wrote the format-4 vectors to {HERE}")


if __name__ == "__main__":
    main()

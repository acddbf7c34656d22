"""Write old-keys.json: a board stored by a version of mdss whose boards named their parts as sets.

Before boards had internal keys, board ``game``'s settings, registry and
windows were the sets ``game#board``, ``game#windows``, ``game#all`` (keys
``mdss:game%23all:...``). tests/test_keyspaces.py checks that such a board is
still read and written. Run with that version first on the path::

    git archive 04d65a4 mdss | tar -x -C /tmp/old && PYTHONPATH=/tmp/old python make_old_keys.py
"""

import base64
import json
import pathlib

import mdss

store = mdss.open_store("memory://")
board = mdss.Leaderboard(
    store,
    "game",
    columns={"xp": "desc"},
    accumulate=["shots"],
    windows=["all", "day"],
    now=lambda: 1795000000,
    chunk_size=4,
)
rows = {}
for i in range(12):
    board.post(f"o{i}", {"xp": (i * 7) % 13, "shots": i}, post_id=f"p{i}")
board._set("all").merge()  # one window's rows in its trees, the other's in its update log
for window in board.windows():
    rows[window] = {r.owner: [r.values, r.updated] for r in board.page("xp", limit=100, window=window).rows}
dump = {
    "made_by": "mdss main at 04d65a4 (boards' parts named as sets), by make_old_keys.py",
    "windows": board.windows(),
    "rows": rows,
    "store": {k: base64.b64encode(store.get(k).value).decode() for k in sorted(store.keys("mdss:"))},
}
(pathlib.Path(__file__).parent / "old-keys.json").write_text(json.dumps(dump, indent=1, sort_keys=True) + "\n")

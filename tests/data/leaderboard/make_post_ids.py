"""Writes post-ids-in-rows.json: a board whose rows keep their last post ids in the row (mdss before post id
entries). Run from a checkout of that version:

    PYTHONPATH=. python tests/data/leaderboard/make_post_ids.py <commit>
"""

import base64
import json
import pathlib
import sys

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
posts = []
for i in range(12):  # ann's row keeps p4..p11 (its last 8); bob's b0..b2
    owner, post_id = ("ann", f"p{i}") if i % 4 else ("bob", f"b{i // 4}")
    values = {"xp": i, "shots": 1}
    board.post(owner, values, post_id=post_id)
    posts.append([owner, values, post_id])
board.gc(sweep=True)
dump = {
    "made_by": f"mdss main at {sys.argv[1]} (post ids in rows), for tests/test_board_retries.py",
    "posts": posts,
    "rows": {
        w: {o: [r.values, r.updated] for o in ("ann", "bob") if (r := board.row(o, window=w))} for w in board.windows()
    },
    "store": {k: base64.b64encode(store.get(k).value).decode() for k in sorted(store.keys("mdss:"))},
}
path = pathlib.Path(__file__).with_name("post-ids-in-rows.json")
path.write_text(json.dumps(dump, indent=1, sort_keys=True) + "\n", encoding="utf-8")

"""Writes layout2.json: a board whose windows keep rows as entries of their sets (layout 2: column entries, tie
groups, row entries, owner markers, post id entries), before record windows. Run from a checkout of that version:

    PYTHONPATH=. python tests/data/leaderboard/make_layout2.py <commit>
"""

import base64
import json
import pathlib
import sys

import mdss

store = mdss.open_store("memory://")
clock = [1795000000.0]
board = mdss.Leaderboard(
    store,
    "game",
    columns={"xp": "desc", "race": [("laps", "desc"), ("ms", "asc")]},
    tiebreak={"race": "first"},
    accumulate=["shots"],
    keep_best={"best": "max"},
    windows=["all", "day"],
    now=lambda: clock[0],
    chunk_size=4,
    log_limit=8,
)
posts = []
for i in range(40):  # ties in both columns; the day turns at post 30; some posts retried, one owner removed
    clock[0] += 60000 if i == 30 else 7
    owner = f"o{(i * 7) % 11}"
    values = {"xp": i % 5, "laps": i % 3, "ms": 100 + i % 4, "shots": 1, "best": i % 6, "name": f"n{i}"}
    post_id = f"p{i}" if i % 3 else None
    board.post(owner, values, post_id=post_id)
    posts.append([owner, values, post_id, clock[0]])
    if i == 20:
        board.post(owner, values, post_id=post_id)  # a retry: counts nothing
board.remove("o4")
board._set("all").merge()  # "all" merged; the day windows keep their update logs
board.gc(sweep=True)
views = {}
for w in board.windows():
    owners = sorted({o for o, *_ in posts})
    views[w] = {
        "rows": {o: [r.values, r.updated] for o in owners if (r := board.row(o, window=w))},
        "ranks": {
            ties: {c: [[r.rank, r.owner] for r in board.top(c, 50, window=w, ties=ties)] for c in ("xp", "race")}
            for ties in ("ordinal", "competition", "dense")
        },
    }
dump = {
    "made_by": f"mdss main at {sys.argv[1]} (layout 2: rows as entries), for tests/test_leaderboard.py",
    "clock": clock[0],
    "posts": posts,
    "views": views,
    "store": {k: base64.b64encode(store.get(k).value).decode() for k in sorted(store.keys("mdss:"))},
}
path = pathlib.Path(__file__).with_name("layout2.json")
path.write_text(json.dumps(dump, indent=1, sort_keys=True) + "\n", encoding="utf-8")

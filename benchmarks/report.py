"""Render benchmarks/results/*.json as the markdown tables of docs/performance.md.

python benchmarks/report.py > /tmp/tables.md
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
ROWS = [
    ("load_per_s", "bulk load, members/s", "{:,.0f}"),
    ("update_per_s", "batched updates/s", "{:,.0f}"),
    ("rank_p50_us", "rank p50 µs", "{:,.1f}"),
    ("rank_p99_us", "rank p99 µs", "{:,.1f}"),
    ("rank_median_p50_us", "rank of a median player p50 µs", "{:,.1f}"),
    ("rank_median_p99_us", "rank of a median player p99 µs", "{:,.1f}"),
    ("page_p50_us", "page of 100 p50 µs", "{:,.1f}"),
    ("page_p99_us", "page of 100 p99 µs", "{:,.1f}"),
    ("around_p50_us", "around (5+1+5) p50 µs", "{:,.1f}"),
    ("top_p50_us", "top 100 p50 µs", "{:,.1f}"),
    ("top_p99_us", "top 100 p99 µs", "{:,.1f}"),
    ("round_trips_per_rank", "store round trips per rank", "{:.2f}"),
    ("bytes_per_member", "bytes per member", "{:,.1f}"),
]


def table(name: str) -> str:
    result = json.loads((RESULTS / f"{name}.json").read_text())
    systems = [s for s, v in result.items() if isinstance(v, dict) and s != "leaderboard"]
    lines = [
        f"N = {result['members']:,}, store `{result['store']}`, chunk size {result['chunk_size']}, "
        f"update batches of {result['mdss']['update_batch']:,}.",
        "",
        "| | " + " | ".join(systems) + " |",
        "|---|" + "---:|" * len(systems),
    ]
    for key, label, fmt in ROWS:
        cells = [fmt.format(result[s][key]) if result[s].get(key) is not None else "–" for s in systems]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


BOARD_ROWS = [
    ("posts_per_s", "posts/s (3 columns, 3 windows)", "{:,.0f}"),
    ("round_trips_per_post", "round trips per post", "{:.2f}"),
    ("rows_p50_us", "rows of 100 friends p50 µs", "{:,.1f}"),
    ("rows_p99_us", "rows of 100 friends p99 µs", "{:,.1f}"),
    ("round_trips_per_rows", "round trips per rows", "{:.2f}"),
]


def leaderboard(names: tuple[str, ...] = ("memory", "sqlite", "redis")) -> str:
    """The leaderboard row of each store's run: mdss and that store's anchors."""
    lines = []
    for name in names:
        board = json.loads((RESULTS / f"{name}.json").read_text()).get("leaderboard")
        if board is None:
            lines.append(f"{name}: no leaderboard row in this run\n")
            continue
        systems = [s for s, v in board.items() if isinstance(v, dict)]
        lines += [
            f"{name}: {board['owners']:,} owners, {board['posts']:,} posts, rows of {board['friends']} friends.",
            "",
            "| | " + " | ".join(systems) + " |",
            "|---|" + "---:|" * len(systems),
        ]
        for key, label, fmt in BOARD_ROWS:
            cells = [fmt.format(board[s][key]) if board[s].get(key) is not None else "–" for s in systems]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def growth() -> str:
    result = json.loads((RESULTS / "growth.json").read_text())
    lines = [
        "| members | rank p50 µs | rank p99 µs | page p50 µs | page p99 µs | load members/s "
        "| SortedList rank p50 µs | SortedList page p50 µs |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        anchor = r["sortedcontainers"]
        lines.append(
            f"| {r['members']:,} | {r['rank_p50_us']:.1f} | {r['rank_p99_us']:.1f} | {r['page_p50_us']:.1f} "
            f"| {r['page_p99_us']:.1f} | {r['load_per_s']:,.0f} | {anchor['rank_p50_us']:.1f} "
            f"| {anchor['page_p50_us']:.1f} |"
        )
    return "\n".join(lines)


def update_batch() -> str:
    result = json.loads((RESULTS / "update_batch.json").read_text())
    anchor = next(k for k in result["rows"][0] if k.endswith("_update_per_s") and not k.startswith("mdss"))
    lines = [f"| updates per commit | mdss updates/s | {anchor[: -len('_update_per_s')]} updates/s | ratio |"]
    lines.append("|---:|---:|---:|---:|")
    for r in result["rows"]:
        ratio = r["mdss_update_per_s"] / r[anchor]
        lines.append(f"| {r['batch']:,} | {r['mdss_update_per_s']:,.0f} | {r[anchor]:,.0f} | {ratio:.2f}× |")
    return "\n".join(lines)


def writers() -> str:
    result = json.loads((RESULTS / "writers.json").read_text())
    lines = ["| store | writers | mode | ops/s | commits | retries |", "|---|---|---|---:|---:|---:|"]
    for store, rows in result["stores"].items():
        for r in rows:
            counts = f"{r['ops_per_s']:,.0f} | {r['commits']:,} | {r['retries']:,}"
            lines.append(f"| {store} | {r['writers']} | {r['mode']} | {counts} |")
    return "\n".join(lines)


if __name__ == "__main__":
    for name in ("memory", "sqlite", "redis"):
        print(f"### {name}\n\n{table(name)}\n")
    print(f"### leaderboard\n\n{leaderboard()}\n")
    print(f"### growth\n\n{growth()}\n\n### writers\n\n{writers()}\n\n### update batch\n\n{update_batch()}")

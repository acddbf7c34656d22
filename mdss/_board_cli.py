"""``mdss board``: a leaderboard's posts and five views from the command line (``--json`` for scripts).

The board is the global ``--set`` name. Its columns, accumulators and best-of fields are stored by the first use: give
them once with ``--columns`` (JSON), ``--accumulate`` and ``--keep-best``; then the board opens from what is stored.
How it cuts time (``--windows``, ``--tz``, ``--week-start``, ``--schedule``) is given at each use, as to the library.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import click
from tqdm import tqdm

import mdss

from . import _parse
from ._cli_csv import RowLines, parse_value, read_rows
from ._cli_table import padded, shown, width
from ._windows import WEEKDAYS
from .leaderboard import Leaderboard, RankedRow


class IntRange(click.IntRange):
    """``click.IntRange`` in ASCII digits: click's ``int()`` takes ``"٣"``, ``"1_0"``, ``" 7\\n"`` (see mdss._parse)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not _parse.INTEGER.fullmatch(value):
            self.fail(f"{value!r} is not an integer in ASCII digits", param, ctx)
        return super().convert(value, param, ctx)


class FloatRange(click.FloatRange):
    """``click.FloatRange`` in ASCII digits (see :class:`IntRange`)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not _parse.NUMBER.fullmatch(value):
            self.fail(f"{value!r} is not a number in ASCII digits", param, ctx)
        return super().convert(value, param, ctx)


class _Board:
    def __init__(self, options: dict[str, Any], as_json: bool) -> None:
        self.options, self.as_json = options, as_json

    def open(self) -> Leaderboard:
        ctx = click.get_current_context().find_root().obj
        ctx.store_url = ctx.store_url or "sqlite:///mdss.db"
        columns = self.options.pop("columns")
        if columns is None:
            return Leaderboard.open(ctx.store, ctx.set_name, **self.options)
        try:
            parsed = json.loads(columns)
        except ValueError as exc:
            raise mdss.InvalidArgumentError(f"--columns must be JSON: {exc}") from None
        return Leaderboard(ctx.store, ctx.set_name, columns=parsed, **self.options)


def _echo(board: _Board, found: Any) -> None:
    if board.as_json:
        click.echo(json.dumps(_plain(found), sort_keys=True, allow_nan=False))
    elif isinstance(found, list):
        click.echo(_table(found))
    else:
        click.echo(found)


def _plain(found: Any) -> Any:
    """Rows (named tuples) as JSON objects, everywhere in ``found``; infinities as ``"inf"`` and ``"-inf"`` (as Redis
    spells them), which JSON has no number for."""
    if isinstance(found, float) and found in (math.inf, -math.inf):
        return "inf" if found > 0 else "-inf"
    if isinstance(found, tuple) and hasattr(found, "_asdict"):
        return {k: _plain(v) for k, v in found._asdict().items()}
    if isinstance(found, (list, tuple)):
        return [_plain(v) for v in found]
    if isinstance(found, dict):
        return {k: _plain(v) for k, v in found.items()}
    return found


def _table(rows: list[Any]) -> str:
    if not rows:
        return "  (no rows)"
    if not isinstance(rows[0], RankedRow):
        return "\n".join(map(str, rows))
    owners = [shown(r.owner) for r in rows]
    columns = max(width("owner"), *map(width, owners))
    lines = [f"  {'rank':>8}  {padded('owner', columns)}  values"]
    lines += [
        f"  {'-' if r.rank is None else f'{r.rank:,}':>8}  {padded(o, columns)}  {json.dumps(r.values, sort_keys=True)}"
        for r, o in zip(rows, owners)
    ]
    return "\n".join(lines)


def spill_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--memory-mb`` and ``--spill-dir``, the options of a bulk load (``mdss load``, ``mdss board load``)."""
    command = click.option(
        "--spill-dir",
        type=click.Path(file_okay=False),
        default=None,
        help="Where a bulk load sorts what its memory does not hold. [default: the system's temporary directory]",
    )(command)
    return click.option(
        "--memory-mb",
        type=IntRange(min=1),
        default=256,
        show_default=True,
        help="Memory a bulk load may use; past it, rows are sorted in temporary SQLite files.",
    )(command)


@click.group()
@click.option("--columns", default=None, metavar="JSON", help='A new board\'s columns, e.g. \'{"xp": "desc"}\'.')
@click.option("--accumulate", default="", metavar="F1,F2", help="A new board's accumulated fields.")
@click.option("--keep-best", default="", metavar="F=min,G=max", help="A new board's best-of fields.")
@click.option(
    "--tiebreak",
    default="",
    metavar="C=first,D=owner",
    help="How a new board's columns break ties: by owner id (the default) or by who reached the key first.",
)
@click.option(
    "--windows",
    default="all",
    show_default=True,
    metavar="K1,K2",
    help="Kinds posts go to: all, hour, day, week, month, year, or the name of a --schedule.",
)
@click.option("--tz", default=None, help="Time zone that cuts the windows (default UTC).")
@click.option(
    "--week-start",
    type=click.Choice(WEEKDAYS),
    default="monday",
    show_default=True,
    help="First day of a week (monday: ISO weeks, week:2026-W48; others are named by their first day).",
)
@click.option(
    "--schedule",
    "schedules",
    multiple=True,
    metavar="NAME=CRON",
    help="A named schedule, e.g. raid='0 18 * * FRI': its windows run from one firing to the next. Repeatable.",
)
@click.option("--json", "as_json", is_flag=True, help='JSON output (infinite values as "inf" and "-inf").')
@click.pass_context
def board(
    ctx: click.Context,
    columns: str | None,
    accumulate: str,
    keep_best: str,
    tiebreak: str,
    windows: str,
    tz: str | None,
    week_start: str,
    schedules: tuple[str, ...],
    as_json: bool,
) -> None:
    """A leaderboard (named by --set): posts and its five views."""
    named = {}
    for item in schedules:
        name, sep, line = item.partition("=")
        if not sep:
            raise click.BadParameter(f"a schedule is NAME=CRON, e.g. raid='0 18 * * FRI'; got {item!r}")
        named[name] = line
    options: dict[str, Any] = {"columns": columns, "windows": [w for w in windows.split(",") if w], "tz": tz}
    options.update(week_start=week_start, schedules=named)
    if columns is not None:
        options["accumulate"] = [f for f in accumulate.split(",") if f]
        best = {}
        for item in filter(None, keep_best.split(",")):
            field, _, how = item.partition("=")
            best[field] = how
        options["keep_best"] = best
        options["tiebreak"] = dict(item.partition("=")[::2] for item in filter(None, tiebreak.split(",")))
    elif tiebreak:
        raise click.BadParameter("--tiebreak goes with --columns: a stored board keeps its own")
    ctx.obj = _Board(options, as_json)


def _board() -> tuple[_Board, Leaderboard]:
    found: _Board = click.get_current_context().obj
    return found, found.open()


_WINDOW = click.option(
    "--window",
    default=None,
    help="A kind (current instance) or an instance, e.g. week:2026-W48, hour:2026-11-23T17:00Z.",
)
_TIES = click.option(
    "--ties", type=click.Choice(["ordinal", "competition", "dense"]), default="ordinal", show_default=True
)


@board.command()
@click.argument("owner")
@click.argument("values", nargs=-1, required=True, metavar="FIELD=VALUE...")
@click.option("--post-id", default=None, help="Makes a post retried within --post-id-ttl a no-op.")
@click.option(
    "--post-id-ttl", type=float, default=None, metavar="SECONDS", help="How long a post id is remembered (a day)."
)
@click.option("--only", type=click.Choice(["new", "existing"]), default=None)
def post(owner: str, values: tuple[str, ...], post_id: str | None, post_id_ttl: float | None, only: str | None) -> None:
    """Post VALUES for OWNER to every window."""
    parsed = {}
    for item in values:
        field, sep, text = item.partition("=")
        if not sep:
            raise mdss.InvalidArgumentError(f"values are FIELD=VALUE, got {item!r}")
        parsed[field] = parse_value(text)
    found: _Board = click.get_current_context().obj
    if post_id_ttl is not None:
        found.options["post_id_ttl"] = post_id_ttl
    lb = found.open()
    _echo(found, lb.post(owner, parsed, post_id=post_id, only=only))


@board.command()
@click.argument("path")
@click.option("--window", default=None, help="A kind (its current instance) or an instance. [default: each kind]")
@click.option("--replace", is_flag=True, help="Replace the rows of windows that hold some.")
@spill_options
def load(path: str, window: str | None, replace: bool, memory_mb: int, spill_dir: str | None) -> None:
    """Load a UTF-8 CSV of rows (- for standard input): a header (owner,FIELD,...), then a row per owner; an empty cell
    leaves its field out. Each window is built in one commit; every row is checked before any is written."""
    found, lb = _board()
    try:
        opened = click.open_file(path, "rb")
    except OSError as exc:
        raise click.ClickException(f"cannot read {path}: {exc.strerror}") from exc
    bars: dict[str, tqdm[Any]] = {}

    def progress(instance: str, done: int, total: int) -> None:
        bar = bars.get(instance)
        if bar is None:
            bar = bars[instance] = tqdm(total=total, unit="node", desc=f"writing {instance}", disable=None)
        bar.update(done - bar.n)

    lines = RowLines()
    try:
        with opened as stream:
            loaded = lb.load(
                read_rows(stream, lines),
                window=window,
                replace=replace,
                progress=progress,
                memory_bytes=memory_mb << 20,
                spill_dir=spill_dir,
            )
    except mdss.InvalidArgumentError as exc:  # a row the board refused as it was read: name its line
        raise lines.named(exc) from None
    finally:
        for bar in bars.values():
            bar.close()
    _echo(found, loaded if found.as_json else f"{loaded:,} rows loaded")


@board.command()
@click.argument("owner")
@_WINDOW
def row(owner: str, window: str | None) -> None:
    """OWNER's row."""
    found, lb = _board()
    _echo(found, lb.row(owner, window=window))


@board.command()
@click.argument("owner")
@_WINDOW
def remove(owner: str, window: str | None) -> None:
    """Remove OWNER's row from --window, or from every window."""
    found, lb = _board()
    _echo(found, lb.remove(owner, window=window))


@board.command()
@click.argument("owner")
@_WINDOW
@_TIES
def positions(owner: str, window: str | None, ties: str) -> None:
    """OWNER's rank in every column."""
    found, lb = _board()
    _echo(found, lb.positions(owner, window=window, ties=ties))


@board.command()
@click.argument("owner")
@click.argument("column")
@click.option("--before", type=IntRange(min=0), default=5, show_default=True)
@click.option("--after", type=IntRange(min=0), default=5, show_default=True)
@_WINDOW
@_TIES
def around(owner: str, column: str, before: int, after: int, window: str | None, ties: str) -> None:
    """The rows around OWNER's in COLUMN."""
    found, lb = _board()
    _echo(found, lb.around(owner, column, before=before, after=after, window=window, ties=ties))


@board.command()
@click.argument("owners", nargs=-1, required=True)
@click.argument("column")
@_WINDOW
@_TIES
def rows(owners: tuple[str, ...], column: str, window: str | None, ties: str) -> None:
    """OWNERS' rows ranked by COLUMN (friends), as Leaderboard.rows(owners, column): the column comes last."""
    found, lb = _board()
    _echo(found, lb.rows(owners, column, window=window, ties=ties))


@board.command()
@click.argument("column")
@click.option("--limit", type=IntRange(min=1), default=10, show_default=True)
@click.option("--cursor", default=None, help="A page's 'next:' or 'previous:' cursor.")
@click.option("--around", default=None, metavar="OWNER", help="The page with OWNER's row in its middle.")
@click.option("--offset", type=IntRange(min=0), default=0, show_default=True, help="Rows to skip first (page by rank).")
@_WINDOW
@_TIES
def page(
    column: str, limit: int, cursor: str | None, around: str | None, offset: int, window: str | None, ties: str
) -> None:
    """A page of COLUMN; prints the cursors of the pages after and before it."""
    found, lb = _board()
    result = lb.page(column, limit=limit, cursor=cursor, around=around, offset=offset, window=window, ties=ties)
    if found.as_json:
        _echo(found, {"rows": result.rows, "cursor": result.next, "next": result.next, "previous": result.previous})
        return
    _echo(found, result.rows)
    click.echo(f"next: {result.next}" if result.next else "(last page)")
    if result.previous:
        click.echo(f"previous: {result.previous}")


@board.command()
@click.argument("column")
@click.option("-n", "count", type=IntRange(min=0), default=10, show_default=True)
@_WINDOW
@_TIES
def top(column: str, count: int, window: str | None, ties: str) -> None:
    """The best rows of COLUMN."""
    found, lb = _board()
    _echo(found, lb.top(column, count, window=window, ties=ties))


@board.command()
@click.argument("windows", nargs=-1, required=True)
@click.option("--into", required=True, help="The window made: an instance (month:2026-11) or a name (season:2026).")
@click.option("--replace", is_flag=True, help="Replace its rows if it holds some (it may be one of WINDOWS).")
@spill_options
def combine(windows: tuple[str, ...], into: str, replace: bool, memory_mb: int, spill_dir: str | None) -> None:
    """Make window --into from the rows of WINDOWS by the board's rules (Leaderboard.combine): accumulated fields add
    up, best-of fields keep the best, others take the owner's newest row's value."""
    found, lb = _board()
    count = lb.combine(list(windows), into=into, replace=replace, memory_bytes=memory_mb << 20, spill_dir=spill_dir)
    _echo(found, {"window": into, "rows": count})


@board.command()
@click.argument("kind", required=False)
def windows(kind: str | None) -> None:
    """The window instances that hold posts (of KIND)."""
    found, lb = _board()
    _echo(found, lb.windows(kind))


@board.command()
@click.argument("window")
def bounds(window: str) -> None:
    """When WINDOW (a kind: its current instance; or an instance) starts and ends, in the board's time zone."""
    found, lb = _board()
    begins, ends = lb.window_bounds(window)
    if found.as_json:
        _echo(found, {"start": begins.isoformat(), "end": ends.isoformat()})
    else:
        click.echo(f"{begins.isoformat()}  {ends.isoformat()}")


@board.command("next-reset")
@click.argument("kind")
def next_reset(kind: str) -> None:
    """When the current window of KIND ends (the next one starts), in the board's time zone."""
    found, lb = _board()
    _echo(found, lb.next_reset(kind).isoformat())


@board.command()
@click.option("--window", default=None, help="One window instance (default: every window and the registry).")
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Wait the grace period before deleting, so that readers of older snapshots finish.",
)
@click.option("--sweep", is_flag=True, help="Also list the windows' keys: nodes that crashed posts left.")
def gc(window: str | None, wait: bool, sweep: bool) -> None:
    """Delete what no head can name again (safe beside any writer)."""
    found, lb = _board()
    deleted = lb.gc(window, wait=wait, sweep=sweep)
    _echo(found, deleted if found.as_json else f"deleted {deleted:,} unreferenced keys")


@board.command()
@click.argument("column")
@_WINDOW
def count(column: str, window: str | None) -> None:
    """How many rows COLUMN ranks."""
    found, lb = _board()
    _echo(found, lb.count(column, window=window))


@board.command()
@click.argument("owner")
@click.argument("column")
@click.option(
    "--method",
    type=click.Choice(["better", "agoragames"]),
    default="better",
    show_default=True,
    help="better: the share ranked strictly better (0 for the best); agoragames: that library's percentile_for.",
)
@_WINDOW
def percentile(owner: str, column: str, method: str, window: str | None) -> None:
    """OWNER's percentile in COLUMN (nothing when the row lacks it)."""
    found, lb = _board()
    _echo(found, lb.percentile(owner, column, method=method, window=window))


@board.command("at-percentile")
@click.argument("column")
@click.argument("p", type=FloatRange(0, 1))
@_WINDOW
@_TIES
def at_percentile(column: str, p: float, window: str | None, ties: str) -> None:
    """The row at position floor(P * rows) of COLUMN (P from 0 to 1)."""
    found, lb = _board()
    row = lb.at_percentile(column, p, window=window, ties=ties)
    _echo(found, [] if row is None else [row])


@board.command("score-for-percentile")
@click.argument("column")
@click.argument("percent", type=FloatRange(0, 100))
@_WINDOW
def score_for_percentile(column: str, percent: float, window: str | None) -> None:
    """The value at PERCENT of a one-field COLUMN (0: the worst, 100: the best), interpolated (the agoragames
    library's score_for_percentile)."""
    found, lb = _board()
    _echo(found, lb.score_for_percentile(column, percent, window=window))


@board.command()
@_WINDOW
def check(window: str | None) -> None:
    """Verify one window's invariants (exit code 1 on a problem)."""
    found, lb = _board()
    problems = lb.check(window)
    _echo(found, problems if found.as_json else "\n".join(problems) or "ok")
    if problems:
        raise SystemExit(1)


@board.command(context_settings={"ignore_unknown_options": True})
@click.argument("seconds", type=FloatRange())
def expire(seconds: float) -> None:
    """Expire the whole board SECONDS from now (every window, its registry and post ids); prints whether it existed."""
    found, lb = _board()
    _echo(found, lb.expire(seconds))


@board.command()
def ttl() -> None:
    """The seconds left before the board expires; none (null with --json) when it has no expiry or no board."""
    found, lb = _board()
    left = lb.ttl()
    _echo(found, left if found.as_json or left is not None else "none")


@board.command()
def persist() -> None:
    """Clear the board's expiry; prints whether it had one."""
    found, lb = _board()
    _echo(found, lb.persist())


@board.command()
@click.option("--window", default=None, help="Drop only this window instance (default: the whole board).")
@click.confirmation_option(prompt="Drop it, rows and all?")
def drop(window: str | None) -> None:
    """Delete a window instance, or the whole board."""
    found, lb = _board()
    dropped = lb.drop() if window is None else lb.drop_window(window)
    _echo(found, dropped if found.as_json else "dropped" if dropped else "nothing to drop")

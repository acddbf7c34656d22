"""The ``mdss`` command: the demo, and every set operation on any store URL."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import click
from tqdm import tqdm

import mdss

from . import _parse, _percentiles
from ._board_cli import FloatRange, IntRange, spill_options
from ._board_cli import board as board_command
from ._cli_csv import SPACES, csv_pairs, parse_score, read_number
from ._cli_csv import looks_like_header as looks_like_header  # re-exported: tests import it from here
from ._cli_table import padded, shown, width

T = TypeVar("T")

DEFAULT_STORE = "sqlite:///mdss.db"
DEMO_STORE = "sqlite:///mdss-demo.db"
#: Where ``mdss bench`` finds its harness: the source checkout's ``benchmarks/`` (not in a wheel).
BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def ordinal(n: int) -> str:
    """``n`` with its English ordinal suffix and thousands separators.

    >>> [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111, 211475)]
    ['1st', '2nd', '3rd', '4th', '11th', '12th', '13th', '21st', '22nd', '101st', '111th', '211,475th']
    """
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n:,}{suffix}"


class ScoreType(click.ParamType):
    name = "score"

    def convert(self, value: Any, param: Any, ctx: Any) -> int | float:
        """A usage error for what is no number; a number out of a score's range (``1e400``) is mdss' one-line
        refusal, as NaN and an integer past 64 bits are."""
        if read_number(str(value).strip(SPACES)) is None:
            self.fail(f"not a number: {value!r}", param, ctx)
        return parse_score(str(value))


SCORE = ScoreType()


def _human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _table(entries: list[mdss.Entry]) -> str:
    """Rank, member and score of each entry, and a data column for entries read ``with_data``."""
    if not entries:
        return "  (no entries)"
    members = [shown(e.member) for e in entries]
    columns = max(width("member"), *map(width, members))
    if isinstance(entries[0], mdss.DataEntry):
        scores = [_score(e.score) for e in entries]
        column = max(len(x) for x in [*scores, "score"])
        lines = [f"  {'rank':>10}  {padded('member', columns)}  {'score':<{column}}  data"]
        lines += [
            f"  {e.rank:>10,}  {padded(m, columns)}  {x:<{column}}  {shown(_data(e.data))}"
            for e, m, x in zip(entries, members, scores)
        ]
        return "\n".join(lines)
    lines = [f"  {'rank':>10}  {padded('member', columns)}  score"]
    lines += [f"  {e.rank:>10,}  {padded(m, columns)}  {_score(e.score)}" for e, m in zip(entries, members)]
    return "\n".join(lines)


def _data(data: str | bytes | None) -> str:
    """A member's data as printed: text as it is, bytes as Python writes them, none as a dash."""
    return "-" if data is None else data if isinstance(data, str) else repr(data)


def _members(count: int) -> str:
    """``1 member``, ``2,000 members``."""
    return f"{count:,} member{'' if count == 1 else 's'}"


def _score(score: int | float) -> str:
    """A score as stored: an int with thousands separators, a float exactly (its shortest round-tripping form)."""
    return f"{score:,}" if isinstance(score, int) else repr(score)


class Commands(click.Group):
    """The ``mdss`` group: mdss' errors become a one-line message and exit code 1, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except mdss.MdssError as exc:  # the library's advice in the commands' words: replace=True is --replace, ...
            message = str(exc).replace("replace=True", "--replace").replace("ties='competition'", "--ties competition")
            raise click.ClickException(message) from exc


class Context:
    def __init__(self, store_url: str, set_name: str) -> None:
        self.store_url, self.set_name = store_url, set_name
        self._store: mdss.Store | None = None

    @property
    def store(self) -> mdss.Store:
        if self._store is None:
            self._store = mdss.open_store(self.store_url)
        return self._store

    def board(self, **options: Any) -> mdss.SortedSet:
        return mdss.SortedSet(self.store, self.set_name, **options)

    def close(self) -> None:
        """Close the store if a command opened it."""
        if self._store is not None:
            self._store.close()


@click.group(cls=Commands)
@click.option(
    "--store",
    "store_url",
    envvar="MDSS_STORE",
    default=None,
    metavar="URL",
    help=f"Store URL (memory://, sqlite:///file.db, redis://host:6379/0, ...). [default: {DEFAULT_STORE}]",
)
@click.option("--set", "set_name", envvar="MDSS_SET", default="leaderboard", show_default=True, help="Set name.")
@click.version_option(mdss.__version__, prog_name="mdss")
@click.pass_context
def cli(ctx: click.Context, store_url: str | None, set_name: str) -> None:
    """mdss: exact leaderboards of any size in a plain key-value store."""
    ctx.obj = Context(store_url or "", set_name)
    ctx.call_on_close(ctx.obj.close)


cli.add_command(board_command)


def _ctx(default_store: str = DEFAULT_STORE) -> Context:
    obj: Context = click.get_current_context().obj
    obj.store_url = obj.store_url or default_store
    return obj


#: Commands whose arguments are scores: ``-5`` is a negative score there, not an unknown option.
NUMBERS = {"ignore_unknown_options": True}


@cli.command(context_settings=NUMBERS)
@click.argument("member")
@click.argument("score", type=SCORE)
@click.option("--op", type=click.Choice(["set", "incr", "best", "gt", "lt"]), default="set", show_default=True)
@click.option("--only", type=click.Choice(["new", "existing"]), default=None, help="Redis' NX / XX.")
@click.option("--data", default=None, help="Text the member carries, stored with the score when the op takes it.")
def add(member: str, score: int | float, op: str, only: str | None, data: str | None) -> None:
    """Set, increase (incr), improve (best), raise (gt) or lower (lt) MEMBER's score (negative scores as
    they are: ``mdss add bob -5``); says whether it was new, updated or unchanged."""
    board = _ctx().board()
    before = board.score(member)
    changed = board.add(member, score, op=op, only=only, changed=True, data=data)  # added, or its score moved (CH)
    now = board.score(member)
    if now is None:  # only="existing" kept it out
        click.echo(f"{member}: absent (not added)")
        return
    click.echo(f"{member}: {_score(now)} ({'unchanged' if not changed else 'new' if before is None else 'updated'})")


@cli.command()
@click.argument("members", nargs=-1, required=True)
def remove(members: tuple[str, ...]) -> None:
    """Remove MEMBERS."""
    board = _ctx().board()
    click.echo(f"removed {board.remove_many(members)} of {len(members)}")


@cli.command()
@click.argument("member")
def score(member: str) -> None:
    """Print MEMBER's score."""
    board = _ctx().board()
    found = board.score(member)
    if found is None:
        raise click.ClickException(f"{member} is not in set {board.name!r}")
    click.echo(_score(found))


@cli.command()
@click.argument("member")
def data(member: str) -> None:
    """Print the data MEMBER carries (``add --data``, ``set-data``): as stored into a pipe or a file, with control
    characters escaped on a terminal (as in the tables)."""
    board = _ctx().board()
    score, found = board.score(member), board.data(member)
    if score is None:
        raise click.ClickException(f"{member} is not in set {board.name!r}")
    text = f"{member} carries no data" if found is None else _data(found)
    click.echo(shown(text) if sys.stdout.isatty() else text)


@cli.command("set-data")
@click.argument("member")
@click.argument("text", required=False)
@click.option("--clear", is_flag=True, help="Remove MEMBER's data instead.")
def set_data(member: str, text: str | None, clear: bool) -> None:
    """Set the data MEMBER carries to TEXT (its score unchanged), or remove it with --clear."""
    if (text is None) != clear:
        raise click.UsageError("give TEXT, or --clear")
    board = _ctx().board()
    if not board.set_data(member, text):
        raise click.ClickException(f"{member} is not in set {board.name!r}")
    click.echo(f"{member}: {'data cleared' if clear else 'data set'}")


#: Whether a command that prints entries prints each member's data too (``with_data=True``).
data_option = click.option("--with-data", is_flag=True, help="Print each member's data too.")

#: How equal scores rank, for every command that prints ranks (``SortedSet``'s ``ties=``).
ties_option = click.option(
    "--ties",
    type=click.Choice(["ordinal", "competition", "dense"]),
    default="ordinal",
    show_default=True,
    help="How equal scores rank (dense: not on sharded sets).",
)


@cli.command()
@click.argument("member")
@ties_option
def rank(member: str, ties: str) -> None:
    """Print MEMBER's 1-based rank and score (dense: 1 + the distinct scores better; not on sharded sets)."""
    board = _ctx().board()
    found = board.rank(member, ties=ties, with_score=True)
    size = len(board)
    if found is None:
        raise click.ClickException(f"{member} is not in set {board.name!r}")
    click.echo(f"{member} is ranked {ordinal(found[0])} of {size:,} with {_score(found[1])}")


@cli.command()
@click.option("-n", "count", type=IntRange(min=0), default=10, show_default=True)
@ties_option
@data_option
def top(count: int, ties: str, with_data: bool) -> None:
    """Print the best N entries."""
    click.echo(_table(_ctx().board().range(0, count, ties=ties, with_data=with_data)))


@cli.command("range")
@click.argument("offset", type=IntRange(min=0))
@click.option("--limit", type=IntRange(min=0), default=10, show_default=True)
@ties_option
@data_option
def range_(offset: int, limit: int, ties: str, with_data: bool) -> None:
    """Print LIMIT entries from OFFSET (0 is rank 1), as SortedSet.range(offset, limit)."""
    click.echo(_table(_ctx().board().range(offset, limit, ties=ties, with_data=with_data)))


@cli.command()
@click.option("--cursor", default=None, help="A page's 'next:' or 'previous:' cursor. [default: the top]")
@click.option("--around", default=None, metavar="MEMBER", help="The page with MEMBER in its middle.")
@click.option("--limit", type=IntRange(min=1), default=10, show_default=True)
@ties_option
@data_option
def page(cursor: str | None, around: str | None, limit: int, ties: str, with_data: bool) -> None:
    """Print a page of LIMIT entries and the cursors of the pages after and before it, as SortedSet.page(limit,
    cursor): pages that follow each other never repeat or skip a member while the set changes (for mdss range's
    offsets, they may)."""
    found = _ctx().board().page(limit, cursor, ties=ties, around=around, with_data=with_data)
    click.echo(_table(found.entries))
    click.echo(_cursors(found.next, found.previous))


def _cursors(after: str | None, before: str | None) -> str:
    """A page's cursors as ``mdss page`` and ``mdss board page`` print them."""
    return "\n".join([f"next: {after}" if after else "(last page)", *([f"previous: {before}"] if before else [])])


@cli.command()
@click.argument("member")
@click.option("--before", type=IntRange(min=0), default=5, show_default=True)
@click.option("--after", type=IntRange(min=0), default=5, show_default=True)
@ties_option
@data_option
def around(member: str, before: int, after: int, ties: str, with_data: bool) -> None:
    """Print the entries around MEMBER."""
    entries = _ctx().board().around(member, before, after, ties=ties, with_data=with_data)
    if not entries:
        raise click.ClickException(f"{member} is not in the set")
    click.echo(_table(entries))


@cli.command(context_settings=NUMBERS)
@click.argument("best", type=SCORE)
@click.argument("worst", type=SCORE)
def count(best: int | float, worst: int | float) -> None:
    """Count the members scoring from BEST to WORST inclusive."""
    click.echo(f"{_ctx().board().count(best, worst):,}")


@cli.command("rank-of-score", context_settings=NUMBERS)
@click.argument("score", type=SCORE)
def rank_of_score(score: int | float) -> None:
    """Print the competition rank a member with SCORE would have."""
    click.echo(f"{_ctx().board().rank_of_score(score):,}")


@cli.command("range-by-score", context_settings=NUMBERS)
@click.argument("best", type=SCORE)
@click.argument("worst", type=SCORE)
@click.option("--offset", type=IntRange(min=0), default=0, show_default=True)
@click.option("--limit", type=IntRange(min=0), default=None, help="At most this many. [default: all]")
@ties_option
def range_by_score(best: int | float, worst: int | float, offset: int, limit: int | None, ties: str) -> None:
    """Print the entries scored from BEST to WORST inclusive, best first."""
    board = _ctx().board()
    click.echo(_table(board.range_by_score(best, worst, offset=offset, limit=limit, ties=ties)))


@cli.command()
@click.argument("member")
@click.option(
    "--method",
    type=click.Choice(_percentiles.METHODS),
    default="better",
    show_default=True,
    help="better: the share ranked strictly better (0 for the best); agoragames: that library's percentile_for.",
)
def percentile(member: str, method: str) -> None:
    """Print MEMBER's percentile: the share of members ranked strictly better (0 for the best), or --method's."""
    board = _ctx().board()
    found = board.percentile(member, method=method)
    if found is None:
        raise click.ClickException(f"{member} is not in set {board.name!r}")
    click.echo(f"{found:.6g}")


@cli.command("score-for-percentile")
@click.argument("percent", type=FloatRange(0, 100))
def score_for_percentile(percent: float) -> None:
    """Print the score at PERCENT (0: the worst, 100: the best), interpolated as the agoragames library does."""
    found = _ctx().board().score_for_percentile(percent)
    if found is None:
        raise click.ClickException("the set is empty")
    click.echo(f"{found:.17g}" if isinstance(found, float) else str(found))


@cli.group()
@click.option("-n", "size", type=IntRange(min=1), default=10, show_default=True, help="How many it keeps (fixed).")
@click.option("--order", type=click.Choice(["desc", "asc"]), default="desc", show_default=True)
@click.pass_context
def topn(ctx: click.Context, size: int, order: str) -> None:
    """A top-N set named by --set: the best N entries ever posted, in one key (mdss.TopN)."""
    ctx.obj = mdss.TopN(_ctx().store, _ctx().set_name, size, order)


@topn.command("post", context_settings=NUMBERS)
@click.argument("member")
@click.argument("score", type=SCORE)
@click.pass_obj
def topn_post(found: mdss.TopN, member: str, score: int | float) -> None:
    """Post MEMBER's SCORE: kept if it makes the top N."""
    click.echo(f"{member}: {_score(score)} ({'kept' if found.post(member, score) else 'not in the top'})")


@topn.command("top")
@ties_option
@click.pass_obj
def topn_top(found: mdss.TopN, ties: str) -> None:
    """Print the top N."""
    click.echo(_table(found.top(ties=ties)))


@topn.command("threshold")
@click.pass_obj
def topn_threshold(found: mdss.TopN) -> None:
    """Print the score of the last entry of a full top N, which a post enters by beating it, or by equalling it and
    coming first by member (nothing while it has room)."""
    least = found.threshold()
    click.echo("(room left)" if least is None else _score(least))


@cli.command(context_settings=NUMBERS)
@click.argument("member", required=False)
@click.option("--score", type=SCORE, default=None, help="The rank a member with this score would have, instead.")
@click.option("--max-error", type=IntRange(min=0), default=None, help="Make bounds wider than this many ranks exact.")
def estimate(member: str | None, score: int | float | None, max_error: int | None) -> None:
    """Print an estimate of MEMBER's rank (or --score's) and percentile, with bounds that always hold, from the cached
    manifests only (estimate_rank, estimate_percentile)."""
    if (member is None) == (score is None):
        raise click.UsageError("give MEMBER or --score (one of them)")
    board = _ctx().board()
    rank = board.estimate_rank(member, score=score, max_error=max_error)
    share_error = None if max_error is None else max_error / max(len(board), 1)  # the same bound, as a share
    share = board.estimate_percentile(member, score=score, max_error=share_error)
    if rank is None or share is None:
        raise click.ClickException(f"{member} is not in set {board.name!r}")
    click.echo(f"rank ~{rank.rank:,} (from {rank.low:,} to {rank.high:,})")
    click.echo(f"percentile ~{share.value:.6g} (from {share.low:.6g} to {share.high:.6g})")


@cli.command()
@click.option("--min", "lowest", flag_value=True, default=True, help="The lowest scores. [default]")
@click.option("--max", "lowest", flag_value=False, help="The highest scores.")
@click.option("-n", "count", type=IntRange(min=0), default=1, show_default=True)
def pop(lowest: bool, count: int) -> None:
    """Remove and print the COUNT entries with the lowest (or highest) scores."""
    board = _ctx().board()
    click.echo(_table(board.pop_min(count) if lowest else board.pop_max(count)))


@cli.command("random")
@click.option("-n", "count", type=IntRange(min=0), default=1, show_default=True)
def random_entries(count: int) -> None:
    """Print up to COUNT distinct entries drawn uniformly."""
    click.echo(_table(_ctx().board().random_members(count)))


@cli.command()
@click.argument("path", type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--header/--no-header",
    default=None,
    help="Whether the first row is a header. [default: only when its score column is a word such as 'score']",
)
@click.option("--replace", is_flag=True, help="Replace the whole set instead of adding to it.")
@click.option("--order", type=click.Choice(["desc", "asc"]), default=None, help="Order of a new set.")
@click.option(
    "--tiebreak",
    type=click.Choice(["member", "member_desc", "first"]),
    default=None,
    help="How a new set orders equal scores. [default: member]",
)
@click.option("--chunk-size", type=IntRange(2, 100_000), default=None, help="Chunk size of a new set.")
@click.option(
    "--shards", type=IntRange(1, 1024), default=None, help="Shards of a new set (fixed at creation). [default: 1]"
)
@click.option(
    "--batch",
    type=IntRange(min=1),
    default=10_000,
    show_default=True,
    help="Members per commit when adding to an existing set.",
)
@spill_options
def load(path: str, header: bool | None, replace: bool, batch: int, **settings: Any) -> None:
    """Load a UTF-8 CSV of member,score rows (- for standard input).

    Into an empty set (or with --replace) the rows are read once, as a bulk load, in bounded memory: past about a
    million rows they are sorted in a temporary file (see --memory-mb and --spill-dir)."""
    memory, spill_dir = settings.pop("memory_mb") << 20, settings.pop("spill_dir")
    obj = _ctx()
    board = obj.board(**settings)  # order, tiebreak, chunk_size, shards: for a new set
    problems: list[str] = []
    try:
        opened = click.open_file(path, "rb")
    except OSError as exc:
        raise click.ClickException(f"cannot read {path}: {exc.strerror}") from exc
    try:
        with opened as stream:
            if replace or len(board) == 0:
                pairs = _refusing(csv_pairs(stream, header, problems), problems)
                board = _bulk_load(
                    obj.store,
                    obj.set_name,
                    pairs,
                    replace=replace,
                    memory_bytes=memory,
                    spill_dir=spill_dir,
                    **settings,
                )
                click.echo(f"{_members(len(board))} loaded; the set holds {len(board):,}")
                return
            loaded = dict(csv_pairs(stream, header, problems))
            _refuse(problems)
    except _BadRows as exc:
        raise click.ClickException(f"{exc.args[0]} in {path}, nothing loaded:{exc.args[1]}") from None
    except mdss.InvalidArgumentError as exc:
        raise click.ClickException(f"cannot read {path}, nothing loaded: {exc}") from exc
    items = list(loaded.items())
    with tqdm(total=len(items), unit="member", desc="adding", disable=None) as bar:
        for start in range(0, len(items), batch):
            board.add_many(items[start : start + batch])
            bar.update(len(items[start : start + batch]))
    click.echo(f"{_members(len(loaded))} loaded; the set holds {len(board):,}")


class _BadRows(Exception):
    """A CSV with bad rows: (how many, the first ten by line)."""


def _refuse(problems: list[str]) -> None:
    if problems:
        listed = "\n  ".join(problems[:10])
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise _BadRows(f"{len(problems)} bad rows", f"\n  {listed}{more}")


def _refusing(pairs: Iterator[tuple[str, Any]], problems: list[str]) -> Iterator[tuple[str, Any]]:
    """``pairs``, then :class:`_BadRows` if reading them found problems: a load reads every pair before it writes."""
    yield from pairs
    _refuse(problems)


def _bulk_load(store: mdss.Store, name: str, pairs: Any, **options: Any) -> mdss.SortedSet:
    with tqdm(total=None, unit="node", desc="writing nodes", disable=None) as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        return mdss.SortedSet.load(store, name, pairs, progress=progress, **options)


def _set_operation(every: bool) -> Callable[..., None]:
    """The body of ``mdss union`` (``every`` False) and ``mdss intersection``: ``mdss.union`` into the set ``--set``."""

    def run(sources: tuple[str, ...], weights: str | None, aggregate: str, replace: bool, **settings: Any) -> None:
        memory, spill_dir = settings.pop("memory_mb") << 20, settings.pop("spill_dir")
        factors = None
        if weights is not None:
            try:
                factors = [parse_score(w.strip()) for w in weights.split(",")]
            except mdss.InvalidScoreError as exc:
                raise click.BadParameter(str(exc), param_hint="--weights") from None
        obj = _ctx()
        call = mdss.intersection if every else mdss.union
        size = call(
            obj.store,
            obj.set_name,
            list(sources),
            weights=factors,
            aggregate=aggregate,
            replace=replace,
            memory_bytes=memory,
            spill_dir=spill_dir,
            **{k: v for k, v in settings.items() if v is not None},
        )
        click.echo(
            f"{obj.set_name}: {_plural(size, 'member')} ({'intersection' if every else 'union'} of {len(sources)})"
        )

    return run


def _set_operation_command(name: str, every: bool, doc: str) -> None:
    """Register ``mdss union`` or ``mdss intersection``: the same options, Redis' ZUNIONSTORE and ZINTERSTORE."""
    command = _set_operation(every)
    command.__doc__ = doc
    for option in (
        spill_options,
        click.option("--chunk-size", type=IntRange(2, 100_000), default=None, help="Chunk size of a new set."),
        click.option(
            "--order",
            type=click.Choice(["desc", "asc"]),
            default=None,
            help="The result's order. [default: the sources', when they agree]",
        ),
        click.option("--replace", is_flag=True, help="Replace the set if it holds entries (it may be a source)."),
        click.option(
            "--aggregate",
            type=click.Choice(["sum", "min", "max"]),
            default="sum",
            show_default=True,
            help="How a member's scores combine.",
        ),
        click.option(
            "--weights", default=None, metavar="W1,W2", help="One factor per source (e.g. 2,-1). [default: 1]"
        ),
        click.argument("sources", nargs=-1, required=True),
    ):
        command = option(command)
    cli.command(name)(command)


_set_operation_command(
    "union",
    False,
    """Store in --set every member of any of SOURCES (set names), its score the sum (--aggregate) of its weighted
    scores: Redis' ZUNIONSTORE. Built as a bulk load, in bounded memory (--memory-mb, --spill-dir).""",
)
_set_operation_command(
    "intersection",
    True,
    """Store in --set the members found in every one of SOURCES, scores combined as by union: Redis'
    ZINTERSTORE.""",
)


@cli.command()
def check() -> None:
    """Verify every invariant of the stored tree (exit code 1 if broken)."""
    board = _ctx().board()
    problems = board.check()
    if problems:
        click.echo("\n".join(problems))
        raise click.ClickException(f"set {board.name!r} has {len(problems)} problems")
    click.echo(f"set {board.name!r}: {_members(len(board))}, every invariant holds")
    garbage = len(board.unreferenced())
    if garbage:  # not damage: replaced nodes in their grace period, or left by ended processes until gc
        click.echo(
            f"{_plural(garbage, 'stored node')} no head names await gc (not a problem; `mdss gc --sweep` deletes them)"
        )


@cli.command()
def stats() -> None:
    """Print the set's size, settings, tree heights and storage (and each shard's, for a sharded set)."""
    board = _ctx().board()
    info = board.info()
    shards = info.pop("per_shard", None)
    for name, value in info.items():
        click.echo(f"{name:>22}: {value:,}" if isinstance(value, int) else f"{name:>22}: {value}")
    if shards:
        click.echo(f"{'shard':>8} {'members':>12} {'score tree':>10} {'member index':>12} {'log':>7}  head key")
        for i, shard in enumerate(shards):
            click.echo(
                f"{i:>8} {shard['members']:>12,} {shard['score_tree_height']:>10} "
                f"{shard['member_index_height']:>12} {shard['log_entries']:>7,}  {shard['head_key']}"
            )
    click.echo(f"{'nodes':>22}: {len(board.node_keys()):,}")
    counters = board.stats.snapshot()
    click.echo(
        f"{'this command':>22}: {_plural(counters['calls'], 'round trip')}, {_human_bytes(counters['bytes_read'])} read"
    )


@cli.command()
@click.option(
    "--min-age",
    type=FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Spare nodes minted less than this many seconds ago (for slow readers; gc is safe without it).",
)
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Wait the set's grace period before deleting, so that readers of older heads finish.",
)
@click.option(
    "--sweep",
    is_flag=True,
    help="Also list the set's keys to find what commits that never published left (after crashes).",
)
def gc(min_age: float, wait: bool, sweep: bool) -> None:
    """Delete stored nodes no head can name again (left by ended processes), safely beside any writer."""
    click.echo(f"deleted {_ctx().board().gc(min_age=min_age, wait=wait, sweep=sweep):,} unreferenced nodes")


@cli.command()
def merge() -> None:
    """Fold the set's update log into its trees now (writes do it by themselves at the log's limit)."""
    board = _ctx().board()
    entries = board.info()["log_entries"]
    if board.merge():
        click.echo(f"merged {entries:,} log {'entry' if entries == 1 else 'entries'} into the trees")
    else:
        click.echo("nothing to merge" if not entries else "another process is merging the log")


@cli.command(context_settings=NUMBERS)
@click.argument("seconds", type=FloatRange())
def expire(seconds: float) -> None:
    """Expire the set SECONDS from now (Redis' EXPIRE): then it reads as dropped (0 or less: at once)."""
    board = _ctx().board()
    if board.expire(seconds):
        click.echo(f"set {board.name!r} expires in {max(seconds, 0):g} s")
    else:
        click.echo(f"no set {board.name!r}: nothing to expire")


@cli.command()
def ttl() -> None:
    """The seconds left before the set expires, or 'none' (no expiry, or no set)."""
    left = _ctx().board().ttl()
    click.echo("none" if left is None else f"{left:.3f}")


@cli.command()
def persist() -> None:
    """Clear the set's expiry (Redis' PERSIST)."""
    board = _ctx().board()
    click.echo(f"set {board.name!r} no longer expires" if board.persist() else f"set {board.name!r} had no expiry")


@cli.command()
@click.confirmation_option(prompt="Delete the whole set?")
def drop() -> None:
    """Delete the whole set."""
    board = _ctx().board()
    click.echo(f"dropped set {board.name!r}" if board.drop() else f"no set {board.name!r} to drop")


# -- the demo ------------------------------------------------------------------


def _measured(board: mdss.SortedSet, title: str, call: Callable[[], T]) -> T:
    before = board.stats.snapshot()
    start = time.perf_counter()
    result = call()
    elapsed = time.perf_counter() - start
    cost = board.stats.since(before)
    trips, read = _plural(cost["calls"], "round trip"), _human_bytes(cost["bytes_read"])
    click.echo(click.style(f"\n{title}", bold=True) + f"   ({elapsed * 1000:,.2f} ms, {trips}, {read} read)")
    return result


def synthetic_players(n: int, seed: int) -> Iterator[tuple[str, int]]:
    """``n`` players with tie-heavy integer points: most players score little, a few a lot."""
    rng = random.Random(seed)
    for i in range(n):
        yield f"player-{i:07d}", int(rng.paretovariate(1.3) * 100) - 100


@cli.command()
@click.option("--members", type=IntRange(min=1), default=1_000_000, show_default=True)
@click.option("--chunk-size", type=IntRange(2, 100_000), default=1000, show_default=True)
@click.option("--seed", type=IntRange(min=0), default=7, show_default=True)
@click.option("--shards", type=IntRange(1, 1024), default=1, show_default=True, help="Shards of the set.")
def demo(members: int, chunk_size: int, seed: int, shards: int) -> None:
    """Build a leaderboard of synthetic players and query it, showing each query's cost."""
    obj = _ctx(DEMO_STORE)
    click.echo(f"Building a leaderboard of {members:,} players in {obj.store_url} (chunk size {chunk_size})")
    start = time.perf_counter()
    players = dict(
        tqdm(synthetic_players(members, seed), total=members, unit="player", desc="generating", disable=None)
    )
    obj.board().drop()  # whatever an earlier demo left, with whatever settings: start afresh
    board = _bulk_load(
        obj.store, obj.set_name, players, chunk_size=chunk_size, order="desc", replace=True, shards=shards
    )
    written = board.stats.snapshot()
    click.echo(
        f"Loaded in {time.perf_counter() - start:,.1f} s: {written['writes']:,} nodes, "
        f"{_human_bytes(written['bytes_written'])} ({written['bytes_written'] / members:,.1f} bytes per player)"
    )
    click.echo(_table(_measured(board, "Top 10", lambda: board.range(0, 10))))
    offset = 500_000 if members > 500_010 else members // 2
    click.echo(_table(_measured(board, f"Page at offset {offset:,}", lambda: board.range(offset, 10))))
    player = f"player-{random.Random(seed + 1).randrange(members):07d}"
    points = _measured(board, f"Score of {player}", lambda: board.score(player))
    click.echo(f"  {points:,} points")
    place = _measured(board, f"Rank of {player}", lambda: board.rank(player))
    click.echo(f"  {player} ranked {ordinal(place)} of {len(board):,}")  # type: ignore[arg-type]
    click.echo(_table(_measured(board, f"Around {player}", lambda: board.around(player, 3, 3))))
    again = _measured(board, f"Rank of {player} again (nodes cached)", lambda: board.rank(player))
    click.echo(f"  {ordinal(again)}")  # type: ignore[arg-type]
    if obj.store_url.startswith("memory:"):
        click.echo("\nThe set was in this process's memory, gone now; --store sqlite:///demo.db keeps it.")
    else:
        click.echo(f"\nThe set stays in {obj.store_url}; try: mdss --store {obj.store_url} top -n 5")


# -- the benchmark ---------------------------------------------------------------


def _harness() -> ModuleType:
    """``benchmarks/harness.py`` of the source checkout mdss runs from; a clear error when there is none."""
    path = BENCHMARKS / "harness.py"
    if not path.is_file():
        raise click.ClickException(
            "mdss bench runs from a source checkout of mdss (its benchmarks/ folder is not part of the "
            "installed package): git clone the repository, pip install -e '.[bench]' there, and run it again"
        )
    spec = importlib.util.spec_from_file_location("mdss_benchmark_harness", path)
    assert spec is not None and spec.loader is not None
    harness = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(harness)
    except ImportError as exc:
        raise click.ClickException(f"the benchmark needs {exc.name}: pip install 'mdss[bench]'") from exc
    return harness


def _shard_counts(value: str) -> list[int]:
    """``--shards``: one shard count or several, comma-separated, each from 1 to 1024."""
    try:
        counts = [_parse.integer(part) for part in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"expected shard counts like 16 or 1,4,16, got {value!r}") from None
    if not counts or not all(1 <= count <= 1024 for count in counts):
        raise click.BadParameter(f"each shard count must be from 1 to 1024, got {value!r}")
    return counts


@cli.command()
@click.option("--store", "store_url", default="memory://", show_default=True, metavar="URL")
@click.option("--members", type=IntRange(min=200), default=100_000, show_default=True)
@click.option("--chunk-size", type=IntRange(2, 100_000), default=1000, show_default=True)
@click.option(
    "--batch-size",
    type=IntRange(min=1),
    default=20_000,
    show_default=True,
    help="Random score updates per commit (update_per_s).",
)
@click.option(
    "--samples", type=IntRange(min=10), default=2000, show_default=True, help="Calls timed per latency figure."
)
@click.option(
    "--singles",
    type=IntRange(min=1),
    default=10_000,
    show_default=True,
    help="Single updates (one add per call) timed, merges included.",
)
@click.option("--cache-mb", type=IntRange(min=0), default=4096, show_default=True, help="mdss' node cache budget.")
@click.option("--seed", type=IntRange(min=0), default=1, show_default=True)
@click.option(
    "--shards",
    default="1",
    show_default=True,
    callback=lambda ctx, param, value: _shard_counts(value),
    help="Shards of the set; several (1,4,16) measure each on the same workload, side by side.",
)
@click.option(
    "--board-owners",
    type=IntRange(min=0),
    default=5000,
    show_default=True,
    help="Owners of the leaderboard row (each posts once first); 0 leaves the row out.",
)
@click.option(
    "--board-posts",
    type=IntRange(min=1),
    default=2000,
    show_default=True,
    help="Leaderboard posts timed (3 columns to 3 windows).",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the figures here.")
def bench(store_url: str, shards: list[int], json_path: str | None, **figures: int) -> None:
    """Measure mdss against the anchors that fit the store, in the same run (from a source checkout); then
    mdss.Leaderboard against the same posts and reads in plain code."""
    harness = _harness()
    result = harness.run(
        store_url,
        shards=shards[0] if len(shards) == 1 else shards,
        cache_bytes=figures.pop("cache_mb") << 20,
        board_samples=min(figures["samples"], 200),
        progress=lambda text: click.echo(text, err=True),
        **figures,
    )
    for line in harness.report(result):
        click.echo(line)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)


# -- the Erlang port ---------------------------------------------------------------


@cli.command()
@click.option("--store", "store_url", default=None, metavar="URL", help="Store URL [default: the group's --store].")
@click.option("--threads", type=IntRange(min=1), default=16, show_default=True, help="Requests served at once.")
def port(store_url: str | None, threads: int) -> None:
    """Serve the Erlang port protocol on stdin/stdout (for erlang/src/mdss.erl; see mdss/port.py)."""
    try:
        from . import port as erlang_port
    except ImportError as exc:
        raise click.ClickException(str(exc)) from exc
    erlang_port.run(store_url or _ctx().store_url, threads)


def main() -> None:
    cli(prog_name="mdss")


if __name__ == "__main__":
    main()

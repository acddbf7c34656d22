"""mdss: massive distributed sorted sets.

Exact leaderboards of any size kept in a plain key-value store: entry sets of at most ``chunk_size`` entries under
manifests, committed copy-on-write with one compare-and-set of a small head.

>>> import mdss
>>> board = mdss.SortedSet(mdss.open_store("memory://"), "board")
>>> board.add_many({"alice": 30, "bob": 10, "carol": 20})
3
>>> board.rank("carol")
2
>>> board.range(0, 2)
[Entry(member='alice', score=30, rank=1), Entry(member='carol', score=20, rank=2)]
"""

from ._estimate import Estimate, Percentile
from ._order import MAX_MEMBER_BYTES, DataEntry, Entry
from ._shards import ShardedSet
from ._sizing import shards_for
from ._sortedset import SortedSet
from ._union import intersection, union
from .exceptions import (
    ConflictError,
    CorruptDataError,
    HeadMissingError,
    InvalidArgumentError,
    InvalidMemberError,
    InvalidScoreError,
    MdssError,
    MissingNodeError,
    OutcomeUnknownError,
    SettingsMismatchError,
    SiblingsError,
    StoreError,
    StoreRefusedError,
    StoreUnavailableError,
)
from .leaderboard import Leaderboard, RankedRow, Row
from .stores import Record, Stats, Store, open_store
from .topn import TopN

__version__ = "0.1.0"

__all__ = [
    "MAX_MEMBER_BYTES",
    "ConflictError",
    "CorruptDataError",
    "DataEntry",
    "Entry",
    "Estimate",
    "HeadMissingError",
    "InvalidArgumentError",
    "InvalidMemberError",
    "InvalidScoreError",
    "Leaderboard",
    "MdssError",
    "MissingNodeError",
    "OutcomeUnknownError",
    "Percentile",
    "RankedRow",
    "Record",
    "Row",
    "SettingsMismatchError",
    "ShardedSet",
    "SiblingsError",
    "SortedSet",
    "Stats",
    "Store",
    "StoreError",
    "StoreRefusedError",
    "StoreUnavailableError",
    "TopN",
    "__version__",
    "intersection",
    "open_store",
    "shards_for",
    "union",
]

"""The embedded durable store: one SQLite file in WAL mode, safe for many threads and processes.

One table ``kv(key, value, version)``; a version is a random 63-bit number that changes on every write, never a counter
(a counter restarts when a key is deleted and written anew, and a compare-and-set in flight from before would then
win). A compare-and-set is one ``UPDATE ... WHERE version = ?`` (``INSERT OR IGNORE`` for "only if absent") whose row
count says who won: atomic across processes, no transaction held open between the read and the write.

Durability: ``synchronous=normal`` (the default) survives any crash of the process (``kill -9`` included); on power loss
the last transactions may roll back, leaving an older consistent set. ``synchronous=full`` survives power loss too, at
one fsync per commit.

URL options: ``synchronous``, ``timeout`` (seconds a write waits for another connection's write lock; 30 by default)
and ``namespace``. Checkpoints: every 10,000 WAL pages, not SQLite's 1,000.

Waiting for locks: SQLite's busy handler sleeps 1, 2, 5, 10 ms... between tries, while mdss holds the write lock for
tens of microseconds (a head's compare-and-set): a writer waiting in it slept through dozens of commits. So no busy
timeout: a write waits for the lock in full-jitter steps from 20 µs to 1 ms, and the rare SQLITE_BUSY of a read (a WAL
being recovered by another process) is retried from 1 ms.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import attrs

from .._retry import Backoff
from ..exceptions import ConflictError, CorruptDataError, InvalidArgumentError, StoreRefusedError, StoreUnavailableError
from .base import Record, Store, parse_number, store_options

# SQLite's default limit on host parameters in one statement is 32766 since 3.32, 999 before.
_CHUNK = 900
#: Parsers of the URL's query options (``?timeout=5&synchronous=full``).
_OPTIONS: dict[str, Callable[[str], Any]] = {"namespace": str, "synchronous": str.lower, "timeout": parse_number}
T = TypeVar("T")


def _value(key: str, value: object) -> bytes:
    """A stored value as bytes: a row written by hand (SQLite columns are dynamically typed) may hold another type."""
    if not isinstance(value, bytes):
        raise CorruptDataError(f"the stored value is SQLite {type(value).__name__}, not a BLOB", key)
    return value


#: WAL pages before a commit checkpoints (SQLite's default: 1,000). Heads' compare-and-sets rewrite the same few pages
#: thousands of times a second, and a checkpoint copies each distinct page once: with 10,000, four writer processes
#: took less CPU per update and lost fewer compare-and-sets (docs/performance.md). The WAL grows to ~40 MB meanwhile.
_WAL_PAGES = 10_000
#: How a read retries SQLITE_BUSY (rare in WAL mode), and how a write waits for the write lock.
_READ_WAIT = Backoff(base=0.001, cap=0.05)
_LOCK_WAIT = Backoff(base=2e-5, cap=0.001)


def _busy(exc: sqlite3.Error) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def _waited(db: sqlite3.Connection, waits: Backoff, call: Callable[[], T]) -> T:
    """``call()``, waiting out SQLITE_BUSY (another connection's write lock) in ``waits``' steps."""
    try:  # the common case, without the wait's bookkeeping
        return call()
    except sqlite3.OperationalError as exc:
        if not _busy(exc):
            raise
        busy = exc
    for _ in waits.attempts():
        try:
            return call()
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
            busy = exc
    raise busy


class SQLiteStore(Store):
    """Keys and values in an SQLite file; a connection per thread, WAL, bounded lock retries."""

    def __init__(
        self, path: str, *, namespace: str = "mdss", synchronous: str = "normal", timeout: float = 30.0
    ) -> None:
        super().__init__(namespace=namespace)
        if synchronous not in ("normal", "full"):
            raise InvalidArgumentError(f'synchronous must be "normal" or "full", got {synchronous!r}')
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout < math.inf:
            raise InvalidArgumentError(f"timeout must be a non-negative number of seconds, got {timeout!r}")
        self.path = os.path.abspath(path)
        self.synchronous = synchronous
        self.timeout = float(timeout)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._waits = (attrs.evolve(_READ_WAIT, budget=self.timeout), attrs.evolve(_LOCK_WAIT, budget=self.timeout))
        self._lock = threading.Lock()
        directory = os.path.dirname(self.path)
        if not os.path.isdir(directory):
            raise StoreUnavailableError(f"cannot open SQLite store {self.path}: directory {directory} does not exist")
        # Look before creating: creation takes the write lock, which another process may hold for minutes (a load).
        if not self._has_table():
            with self._transaction() as db:
                db.execute(
                    "CREATE TABLE IF NOT EXISTS kv"
                    " (key TEXT PRIMARY KEY, value BLOB NOT NULL, version INTEGER NOT NULL) WITHOUT ROWID"
                )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteStore:
        """``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``, with query options."""
        path = unquote(urlsplit(url).path)
        path = path[1:] if path.startswith("/") else path  # sqlite:///x.db -> "x.db"; sqlite:////x.db -> "/x.db"
        if not path:
            raise InvalidArgumentError(f"an SQLite store URL needs a file path, e.g. sqlite:///board.db, got {url!r}")
        return cls(path, **store_options(url, options, _OPTIONS))

    # -- connections and transactions -------------------------------------

    def _connection(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            try:
                # isolation_level=None: we issue BEGIN ourselves, so a transaction is exactly our block.
                db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
                # Switching a new file to WAL takes its lock without SQLite's busy handler: processes opening one file
                # at once wait their turn here (they failed at once: a helper's probe of 8 processes).
                _waited(db, self._waits[False], lambda: db.execute("PRAGMA journal_mode=WAL"))
                db.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
                db.execute("PRAGMA busy_timeout = 0")  # every wait is ours (see the module's docstring)
                db.execute(f"PRAGMA wal_autocheckpoint={_WAL_PAGES}")
            except sqlite3.DatabaseError as exc:
                raise self._error(exc) from exc
            self._local.db = db
            with self._lock:
                self._connections.append(db)
        return db

    def _has_table(self) -> bool:
        query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'kv'"
        return self._read(lambda db: db.execute(query).fetchone() is not None)

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)``, retried on SQLITE_BUSY (rolled back first) within the timeout."""
        db = self._connection()
        busy: sqlite3.Error | None = None
        for _ in self._waits[False].attempts():
            try:
                return fn(db)
            except sqlite3.OperationalError as exc:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                if not _busy(exc):
                    raise self._error(exc) from exc
                busy = exc
            except sqlite3.DatabaseError as exc:
                raise self._error(exc) from exc
        raise self._error(busy) from busy  # type: ignore[arg-type]

    def _error(self, exc: sqlite3.Error) -> Exception:
        text = str(exc)
        if "not a database" in text or "malformed" in text:
            return CorruptDataError(f"{self.path} is not a readable SQLite database: {text}")
        # Each write is one transaction, rolled back whole when it fails: these say it never ran or ran to no effect.
        if "disk is full" in text:  # SQLITE_FULL: the file system, or the max_page_count limit
            return StoreRefusedError(f"SQLite store {self.path}: the disk is full, nothing was written ({text})")
        if _busy(exc):
            return StoreRefusedError(
                f"SQLite store {self.path}: another connection held the write lock for over {self.timeout:g} s ({text})"
            )
        if "readonly" in text:  # SQLITE_READONLY: the file, its directory or the mount
            return StoreRefusedError(f"SQLite store {self.path} cannot be written: {text}")
        return StoreUnavailableError(f"SQLite store {self.path}: {text}")

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any exception; SQLITE_BUSY is waited out. IMMEDIATE takes
        the write lock at BEGIN, so two writers never both read and deadlock on the upgrade."""
        db = self._connection()

        def run(statement: str) -> None:
            _waited(db, self._waits[True], lambda: db.execute(statement))

        try:
            run("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        try:
            yield db
            # In rollback-journal mode (not WAL) a commit waits for readers: SQLITE_BUSY leaves it open to retry.
            run("COMMIT")
        except BaseException as exc:
            # SQLite rolls some failures back itself (SQLITE_FULL, SQLITE_IOERR): a ROLLBACK would then hide the cause.
            if db.in_transaction:
                db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self._error(exc) from exc
            raise

    # -- primitives ---------------------------------------------------------

    def _get(self, key: str) -> Record | None:
        row = self._read(lambda db: db.execute("SELECT value, version FROM kv WHERE key = ?", (key,)).fetchone())
        return None if row is None else Record((_value(key, row[0]),), row[1])

    def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        unique = list(dict.fromkeys(keys))

        def chunk(db: sqlite3.Connection, part: list[str]) -> Iterator[tuple[str, bytes]]:
            return db.execute(f"SELECT key, value FROM kv WHERE key IN ({','.join('?' * len(part))})", part)

        def select(db: sqlite3.Connection) -> dict[str, bytes]:
            if len(unique) <= _CHUNK:  # one statement is one snapshot
                return dict(chunk(db, unique))
            found: dict[str, bytes] = {}
            db.execute("BEGIN")  # one snapshot for every chunk
            for start in range(0, len(unique), _CHUNK):
                found.update(chunk(db, unique[start : start + _CHUNK]))
            db.execute("COMMIT")
            return found

        found = self._read(select)
        return [None if (value := found.get(key)) is None else _value(key, value) for key in keys]

    def _put(self, key: str, value: bytes, context: Any) -> None:
        self._put_many({key: value})

    def _put_many(self, items: Mapping[str, bytes]) -> None:
        with self._transaction() as db:
            db.executemany(
                "INSERT INTO kv (key, value, version) VALUES (?, ?, random())"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value, version = random()",
                items.items(),
            )

    def _cas(self, key: str, value: bytes, version: Any) -> Any:
        written = secrets.randbits(63)
        if version is None:
            changed = self._statement(
                "INSERT OR IGNORE INTO kv (key, value, version) VALUES (?, ?, ?)", (key, value, written)
            )
        else:
            changed = self._statement(
                "UPDATE kv SET value = ?, version = ? WHERE key = ? AND version = ?", (value, written, key, version)
            )
        if changed.rowcount != 1:
            # A definite conflict. What the key holds now is read after the statement; if that read fails, the caller
            # reads it itself (never StoreUnavailableError, which would put a lost race in doubt).
            try:
                current = self._get(key)
            except StoreUnavailableError:
                raise ConflictError(f"key {key!r} changed since it was read") from None
            raise ConflictError(f"key {key!r} changed since it was read", current=current, current_known=True)
        return written

    def _statement(self, statement: str, parameters: Sequence[Any]) -> sqlite3.Cursor:
        """One write statement in SQLite's implicit transaction: it takes and releases the write lock in one
        call, instead of ``BEGIN IMMEDIATE``, the statement and ``COMMIT`` (the hot path of a commit)."""
        db = self._connection()
        try:
            return _waited(db, self._waits[True], lambda: db.execute(statement, parameters))
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    def _delete(self, key: str) -> None:
        self._delete_many([key])

    def _delete_if(self, key: str, version: Any) -> None:
        with self._transaction() as db:
            gone = db.execute("DELETE FROM kv WHERE key = ? AND version = ?", (key, version)).rowcount
            if not gone and db.execute("SELECT 1 FROM kv WHERE key = ?", (key,)).fetchone() is not None:
                raise ConflictError(f"key {key!r} changed since it was read")

    def _delete_many(self, keys: Sequence[str]) -> None:
        with self._transaction() as db:
            db.executemany("DELETE FROM kv WHERE key = ?", ((key,) for key in keys))

    def _keys(self, prefix: str) -> Iterator[str]:
        # A range scan on the primary key: prefix <= key < prefix with its last character incremented.
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else None

        def select(db: sqlite3.Connection) -> list[Any]:
            if upper is None:
                return db.execute("SELECT key FROM kv").fetchall()
            return db.execute("SELECT key FROM kv WHERE key >= ? AND key < ?", (prefix, upper)).fetchall()

        return iter([row[0] for row in self._read(select)])

    def _close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for db in connections:
            db.close()
        self._local = threading.local()

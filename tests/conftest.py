"""Shared fixtures: one parametrised store factory that every suite runs through.

Which stores run comes from ``MDSS_TEST_STORES`` (comma-separated; default:
every store that needs no external service plus the Redis and DynamoDB ones, which the
tests start themselves from the ``redis-server`` binary and npm's ``dynalite``). A store that cannot
be started is skipped on a developer's machine but fails under ``CI=true``:
in CI a skipped backend is a failure.

How deep the run searches comes from ``MDSS_DEEP`` (see ``depth.py``): by default enumerations are
sampled and Hypothesis runs the ``ci`` (under ``CI=true``) or ``dev`` profile; ``MDSS_DEEP=1`` runs
every enumeration in full and the ``deep`` profile.
"""

from __future__ import annotations

import itertools
import os
import uuid

import pytest
from depth import DEEP, offset
from fake_riak import FakeRiak
from hypothesis import HealthCheck, settings

import mdss
from mdss.stores.riak import RiakStore

#: Fixture data, and the scripts that wrote it (two ``make_vectors.py``: not test modules).
collect_ignore_glob = ["data/*"]

# Session fixtures ``redis_url``, ``redis_cluster_url`` and ``dynamodb_url``: servers the tests start.
pytest_plugins = ["redis_servers", "dynamo_server"]

settings.register_profile(  # the README's test command under CI=true: 6 to 7 minutes on two cores (its limit: 8)
    "ci", max_examples=40, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=25, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(  # a long search: MDSS_DEEP=1 MDSS_TEST_STORES=memory python -m pytest ...
    "deep", max_examples=1500, stateful_step_count=80, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
if DEEP:  # exported: test_log_faults.py's full enumeration (and any worker process) follow it too
    os.environ.setdefault("HYPOTHESIS_PROFILE", "deep")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))

#: ``riak-fake`` is the Riak store over an in-memory fake of Riak's HTTP API (``fake_riak.py``).
ALL_STORES = ("memory", "memory-cas", "memory-slots", "sqlite", "redis", "redis-cluster", "riak-fake", "dynamodb")
#: Stores that need a server nobody can install here; the only ones allowed to skip in CI.
OPTIONAL_STORES = ("riak",)
#: Riak joins every suite when MDSS_RIAK_URL names a node (no Riak server can be installed here).
DEFAULT_STORES = ALL_STORES + (("riak",) if os.environ.get("MDSS_RIAK_URL") else ())
SELECTED = tuple(
    s.strip() for s in os.environ.get("MDSS_TEST_STORES", ",".join(DEFAULT_STORES)).split(",") if s.strip()
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``grid(a, b, size=n)`` run, by default, one row of a Latin square of their ``a`` x ``b``
    grid of parameters (n values each, an autouse fixture's params, say): n of the n*n combinations, every
    value of ``a`` and every value of ``b`` once. Tests marked ``grid(a, size=n)`` run one value of ``a``.

    The row moves with the store and with the test, so that every combination still runs on some store
    for every test, and every combination on every store over a module's tests. Every store runs every
    test. ``MDSS_DEEP=1`` runs the whole grid.
    """
    if DEEP:
        return
    kept, deselected = [], []
    for item in items:
        marker = item.get_closest_marker("grid")
        callspec = getattr(item, "callspec", None)
        if marker is None or callspec is None:
            kept.append(item)
            continue
        n = marker.kwargs["size"]
        store = callspec.params.get("store_factory", callspec.params.get("shared_store_factory"))
        row = offset(item.originalname, n) + (ALL_STORES.index(store) if store in ALL_STORES else 0)
        cell = callspec.indices[marker.args[0]]
        if len(marker.args) == 2:
            cell = callspec.indices[marker.args[1]] - cell
        (kept if (cell - row) % n == 0 else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def unavailable(store: str, why: str) -> None:
    """Skip a store's tests locally; fail them in CI, where a skip would hide a backend."""
    if IN_CI and store not in OPTIONAL_STORES:
        pytest.fail(f"{store} store unavailable in CI: {why}", pytrace=False)
    pytest.skip(f"{store} store unavailable: {why}")


_counter = itertools.count()


class StoreFactory:
    """Makes fresh, isolated stores of one kind: ``factory()`` -> Store."""

    def __init__(self, kind: str, url: str, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.kind, self.url, self._tmp = kind, url, tmp_path_factory
        self._opened: list[mdss.Store] = []

    def url_for_new(self) -> str:
        """A URL naming a fresh, empty store (its own file or namespace); a kind ``<kind>+slots`` (not in CI: the
        stores that only compare and set, over ``mdss.stores.slots``), that kind's with ``slots=3``."""
        if self.kind.endswith("+slots"):
            url = StoreFactory(self.kind[: -len("+slots")], self.url, self._tmp).url_for_new()
            return f"{url}{'&' if '?' in url else '?'}slots=3"
        if self.kind == "memory":
            return "memory://"
        if self.kind == "memory-cas":  # commits compare-and-set the head, as on Riak and DynamoDB (no mdss._tail)
            return "memory://?appends=false"
        if self.kind == "memory-slots":  # appends in keys of their own over compare-and-set (mdss.stores.slots)
            return "memory://?appends=false&slots=3"
        if self.kind == "sqlite":
            return f"sqlite:///{self._tmp.mktemp('sqlite')}/store-{next(_counter)}.db"
        if "{table}" in self.url:  # dynalite: a table of its own, so that listing its keys scans only them
            return self.url.replace("{table}", f"mdss-{uuid.uuid4().hex[:12]}")
        sep = "&" if "?" in self.url else "?"
        return f"{self.url}{sep}namespace=t{uuid.uuid4().hex[:12]}"

    def __call__(self, **options: object) -> mdss.Store:
        if self.kind == "riak-fake":
            store: mdss.Store = RiakStore(pool=FakeRiak(), backoff=0.001, **options)  # type: ignore[arg-type]
        else:
            store = mdss.open_store(self.url_for_new(), **options)
        self._opened.append(store)
        return store

    def close(self) -> None:
        for store in self._opened:
            store.close()


def _server_url(kind: str, request: pytest.FixtureRequest) -> str:
    kind = kind.removesuffix("+slots")
    if kind in ("memory", "memory-cas", "memory-slots", "sqlite", "riak-fake"):
        return f"{kind}://"
    if kind == "redis":
        return request.getfixturevalue("redis_url")
    if kind == "redis-cluster":
        return request.getfixturevalue("redis_cluster_url")
    if kind == "dynamodb":
        return request.getfixturevalue("dynamodb_url")
    if kind == "riak":
        url = os.environ.get("MDSS_RIAK_URL")
        if not url:
            unavailable("riak", "set MDSS_RIAK_URL to a Riak node to run these tests")
        return url  # type: ignore[return-value]
    raise AssertionError(kind)


@pytest.fixture(params=SELECTED)
def store_factory(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A factory of fresh stores, once per selected backend."""
    kind = request.param
    factory = StoreFactory(kind, _server_url(kind, request), tmp_path_factory)
    yield factory
    factory.close()


@pytest.fixture(params=[s for s in SELECTED if s not in ("memory", "memory-cas", "memory-slots", "riak-fake")])
def shared_store_factory(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Like ``store_factory``, for the stores several processes can share (all but the in-process ones)."""
    kind = request.param
    factory = StoreFactory(kind, _server_url(kind, request), tmp_path_factory)
    yield factory
    factory.close()


@pytest.fixture
def store(store_factory: StoreFactory) -> mdss.Store:
    """A fresh store of each selected backend."""
    return store_factory()


@pytest.fixture
def tree_commits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sets made in the test commit straight into the trees (``log_limit=0``): for tests of the tree
    commit protocol itself, whose assertions name tree nodes and notes."""
    monkeypatch.setitem(mdss._engine.Engine.__init__.__kwdefaults__, "log_limit", 0)

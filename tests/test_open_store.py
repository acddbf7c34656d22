"""``open_store``: URL options are checked, and every bad one is an InvalidArgumentError naming it."""

from __future__ import annotations

import sys
import types

import pytest

import mdss
from mdss import _merge
from mdss.stores import BACKENDS
from mdss.stores.base import Store
from mdss.stores.memory import MemoryStore


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path}/store.db"


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("foo=1", "'foo'"),
        ("timeout=abc", "timeout='abc'"),
        ("synchronous=maybe", "synchronous"),
        ("timeout=-2", "timeout"),
        ("namespace=", "namespace"),
        ("namespace=a&Timeout=1", "'Timeout'"),
    ],
)
def test_bad_sqlite_url_options(sqlite_url, query, named) -> None:
    with pytest.raises(mdss.InvalidArgumentError) as caught:
        mdss.open_store(f"{sqlite_url}?{query}")
    assert type(caught.value) is mdss.InvalidArgumentError and named in str(caught.value)


@pytest.mark.parametrize(
    ("query", "named"),
    [("foo=1", "'foo'"), ("siblings=perhaps", "siblings='perhaps'"), ("timeout=1", "'timeout'")],
)
def test_bad_memory_url_options(query, named) -> None:
    with pytest.raises(mdss.InvalidArgumentError) as caught:
        mdss.open_store(f"memory://?{query}")
    assert type(caught.value) is mdss.InvalidArgumentError and named in str(caught.value)


@pytest.mark.parametrize(
    ("url", "options", "named"),
    [
        ("memory://", {"foo": 1}, "'foo'"),
        ("memory://", {"siblings": "yes"}, "siblings"),
        ("sqlite", {"timeout": "abc"}, "timeout"),
        ("sqlite", {"synchronous": 1}, "synchronous"),
    ],
)
def test_bad_keyword_options(sqlite_url, url, options, named) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match=named):
        mdss.open_store(sqlite_url if url == "sqlite" else url, **options)


def test_good_options_are_parsed(sqlite_url) -> None:
    memory = mdss.open_store("memory://?siblings=Yes&namespace=app")
    assert memory.keeps_siblings is True and memory.namespace == "app"
    assert mdss.open_store("memory://?siblings=off").keeps_siblings is False
    with mdss.open_store(f"{sqlite_url}?timeout=2.5&synchronous=FULL", namespace="kw") as sqlite:
        assert (sqlite.timeout, sqlite.synchronous, sqlite.namespace) == (2.5, "full", "kw")
    with mdss.open_store(f"{sqlite_url}?timeout=9", timeout=1) as sqlite:
        assert sqlite.timeout == 1  # a keyword option wins over the URL's


class _Plain(Store):
    """A third-party backend that leaves its options to Python: the generic path must still be clear."""

    def __init__(self, *, namespace: str = "mdss", size: int = 1) -> None:
        super().__init__(namespace=namespace)
        self.size = int(size)


@pytest.fixture
def plain_backend(monkeypatch):
    module = types.ModuleType("plain_backend")
    module.PlainStore = _Plain  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "plain_backend", module)
    monkeypatch.setitem(BACKENDS, "plain", ("plain_backend", "PlainStore"))


@pytest.mark.parametrize(("query", "named"), [("foo=1", "foo"), ("size=big", "big")])
def test_a_backend_that_does_not_check_its_options(plain_backend, query, named) -> None:
    with pytest.raises(mdss.InvalidArgumentError, match=named) as caught:
        mdss.open_store(f"plain://?{query}")
    assert "plain:// store" in str(caught.value)
    assert isinstance(caught.value.__cause__, (TypeError, ValueError))
    assert mdss.open_store("plain://?size=3").size == 3


@pytest.mark.parametrize("url", ["redis://[::1", "memory://[", "dynamodb://[t"])
def test_a_malformed_url_is_invalid_argument(url: str) -> None:
    """An unclosed IPv6 bracket made urlsplit's ValueError a traceback on the command line (a helper's probe)."""
    with pytest.raises(mdss.InvalidArgumentError, match="malformed store URL"):
        mdss.open_store(url)


def test_a_name_whose_node_keys_pass_the_store_s_key_limit_is_refused_before_any_write(monkeypatch) -> None:
    """A helper's probe on DynamoDB (keys of at most 2048 bytes): a set whose head key fit but whose node keys did not
    took 19 writes, then its first merge raised InvalidArgumentError after the 20th had landed (an incr retried on it
    counted twice), and every write after the log filled was refused. The name is refused when the set is opened (a
    board's: for each of its windows), and a merge that fails after a write landed never fails the write."""

    class Capped(MemoryStore):
        max_key_bytes = 2048

    store = Capped()
    for make in (
        lambda: mdss.SortedSet(store, "x" * 2000),
        lambda: mdss.SortedSet(store, "x" * 2000, shards=2),
        lambda: mdss.Leaderboard(store, "y" * 1990, columns={"xp": "desc"}, windows=["all", "day"]),
    ):
        with pytest.raises(mdss.InvalidArgumentError, match="node keys reach"):
            make()
    assert list(store.keys("")) == []
    sset = mdss.SortedSet(store, "x" * 1900, log_limit=4)  # its merges are due from 4 entries, forced from 8

    def refused(engine, wait=False):
        raise mdss.InvalidArgumentError("injected: the merge's keys do not fit")

    monkeypatch.setattr(_merge, "merge", refused)
    for i in range(6):
        assert sset.incr("hits", 1) == i + 1
    assert mdss.SortedSet(store, "x" * 1900).score("hits") == 6

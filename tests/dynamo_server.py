"""A DynamoDB-compatible engine the tests start themselves: dynalite, from npm.

``npm ci`` at the repository root installs it into ``node_modules/`` (see
``package.json``); ``MDSS_DYNALITE`` names another dynalite executable. It
listens on a free 127.0.0.1 port, keeps its tables in memory, and is
stopped at the end of the session. Without it the DynamoDB store is
unavailable: skipped on a developer's machine, a failure in CI (see
``conftest.unavailable``). ``MDSS_DYNAMODB_URL`` points the tests at a table
of your own instead (``dynamodb://TABLE?region=...``; every test works under
its own key namespace there).

boto3 signs every request, so the session gets dummy credentials and a
region unless the environment already has them (dynalite checks neither).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from redis_servers import free_port, serving

from conftest import unavailable

#: Where ``npm ci`` at the repository root puts the executable.
LOCAL = Path(__file__).resolve().parent.parent / "node_modules" / ".bin" / "dynalite"
#: In a store URL the fixture yields, replaced by a fresh table name for each store (see ``conftest``).
TABLE = "{table}"


def dynalite_binary() -> str:
    """The dynalite executable: ``MDSS_DYNALITE``, else ``node_modules/.bin``, else ``PATH``."""
    found = os.environ.get("MDSS_DYNALITE") or (str(LOCAL) if LOCAL.exists() else shutil.which("dynalite"))
    if not found:
        raise FileNotFoundError("dynalite is not installed: run `npm ci` at the repository root (Node.js needed)")
    return found


@contextmanager
def dynalite(*extra: str) -> Iterator[int]:
    """Run dynalite on a free loopback port until the block ends; yields the port.

    ``extra`` are more dynalite arguments (``"--maxItemSizeKb", "10"``).
    """
    binary, port = dynalite_binary(), free_port()
    argv = [binary, "--host", "127.0.0.1", "--port", str(port), "--createTableMs", "0", "--deleteTableMs", "0"]
    with tempfile.TemporaryFile("w+") as log:

        def answers() -> bool:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True

        with serving([*argv, *extra], log, answers, f"dynalite on port {port}", 30):
            yield port


def dummy_credentials() -> None:
    """Credentials and a region for boto3 to sign with, where the environment has none (inherited by workers)."""
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "mdss-test"),
        ("AWS_SECRET_ACCESS_KEY", "mdss-test"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ):
        os.environ.setdefault(name, value)


def url(port: int, table: str = TABLE) -> str:
    """The store URL of ``table`` on the dynalite at ``port``, created when opened."""
    return f"dynamodb://{table}?region=us-east-1&endpoint=http://127.0.0.1:{port}&create_table=true"


@pytest.fixture(scope="session")
def dynamodb_url() -> Iterator[str]:
    """A ``dynamodb://`` URL on a dynalite started for this session, with ``{table}`` for a fresh table per store;
    or ``MDSS_DYNAMODB_URL`` (your own table).
    """
    if os.environ.get("MDSS_DYNAMODB_URL"):
        yield os.environ["MDSS_DYNAMODB_URL"]
        return
    dummy_credentials()
    try:
        with dynalite() as port:
            yield url(port)
    except (FileNotFoundError, RuntimeError) as exc:
        unavailable("dynamodb", str(exc))

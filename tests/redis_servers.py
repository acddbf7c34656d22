"""Placeholder: the Redis servers' fixtures are being written."""

import pytest

from conftest import unavailable


@pytest.fixture(scope="session")
def redis_url() -> str:
    unavailable("redis", "not yet written")


@pytest.fixture(scope="session")
def redis_cluster_url() -> str:
    unavailable("redis-cluster", "not yet written")

"""Redis servers the tests start themselves: one server, and a cluster of three masters.

``MDSS_REDIS_URL`` / ``MDSS_REDIS_CLUSTER_URL`` point the tests at servers of
your own instead (every test works under its own key namespace). Otherwise
each listens on a free 127.0.0.1 port, keeps nothing on disk, lives in a
temporary directory and is stopped at the end of the session. Without the
``redis-server`` binary the Redis stores are unavailable: skipped on a
developer's machine, a failure in CI (see ``conftest.unavailable``).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import IO

import pytest

from conftest import unavailable


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(cluster: bool = False) -> int:
    """A free loopback port; for a cluster node also its bus port (port + 10000), so at most 55535."""
    if not cluster:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    for _ in range(200):
        port = random.randrange(20000, 45000)
        if _free(port) and _free(port + 10000):
            return port
    raise RuntimeError("no free port pair for a Redis cluster node")


@contextmanager
def serving(argv: list[str], log: IO[str], ready: Callable[[], bool], what: str, seconds: float) -> Iterator[None]:
    """Run a test server until the block ends: wait (up to ``seconds``) until ``ready()``, stop it after.

    ``log`` receives its output, shown if it does not start; a connection refused is "not yet".
    """
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + seconds
        while True:
            try:
                if ready():
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"{what} did not start:\n{log.read()}")
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def redis_server(*extra: str, port: int | None = None) -> Iterator[int]:
    """Run ``redis-server`` on a free loopback port until the block ends; yields the port."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise FileNotFoundError("redis-server is not installed (apt-get install redis-server)")
    port = port or free_port()
    with tempfile.TemporaryDirectory(prefix="mdss-redis-") as directory, open(f"{directory}/log", "w+") as log:
        argv = [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            directory,
            "--protected-mode",
            "yes",
            *extra,
        ]

        def answers() -> bool:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")

        with serving(argv, log, answers, f"redis-server on port {port}", 15):
            yield port


@contextmanager
def redis_cluster(masters: int = 3, *extra: str) -> Iterator[list[int]]:
    """A cluster of ``masters`` masters with every slot assigned; yields their ports.

    ``extra`` are more ``redis-server`` arguments for every node (``"--maxmemory-policy", "allkeys-lru"``).
    """
    with ExitStack() as stack:
        ports = [
            stack.enter_context(
                redis_server(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                    *extra,
                    port=free_port(cluster=True),
                )
            )
            for _ in range(masters)
        ]
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *[f"127.0.0.1:{p}" for p in ports],
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        while not all(_cluster_ok(p) for p in ports):
            if time.monotonic() > deadline:
                raise RuntimeError("the Redis cluster did not reach cluster_state:ok")
            time.sleep(0.1)
        yield ports


def limited_user(port: int, name: str = "limited", password: str = "secret") -> str:
    """Add an ACL user to the server at ``port`` who may run every command but CONFIG (as on managed Redis).

    Returns ``name:password@`` for a URL.
    """
    subprocess.run(
        ["redis-cli", "-p", str(port), "ACL", "SETUSER", name, "on", f">{password}", "~*", "+@all", "-config"],
        check=True,
        capture_output=True,
        timeout=10,
    )
    return f"{name}:{password}@"


def _cluster_ok(port: int) -> bool:
    out = subprocess.run(["redis-cli", "-p", str(port), "cluster", "info"], capture_output=True, text=True)
    return "cluster_state:ok" in out.stdout


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """``redis://`` URL of a server started for this test session, or ``MDSS_REDIS_URL`` (your own)."""
    if os.environ.get("MDSS_REDIS_URL"):
        yield os.environ["MDSS_REDIS_URL"]
        return
    try:
        with redis_server() as port:
            yield f"redis://127.0.0.1:{port}/0"
    except (FileNotFoundError, RuntimeError) as exc:
        unavailable("redis", str(exc))


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """``redis+cluster://`` URL of a three-master cluster started for this session, or ``MDSS_REDIS_CLUSTER_URL``."""
    if os.environ.get("MDSS_REDIS_CLUSTER_URL"):
        yield os.environ["MDSS_REDIS_CLUSTER_URL"]
        return
    try:
        with redis_cluster() as ports:
            yield "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)
    except (FileNotFoundError, RuntimeError, subprocess.SubprocessError) as exc:
        unavailable("redis-cluster", str(exc))

"""Fixtures for the testbed tests: root check, built peers, a temporary catalog.

Tests marked ``testbed`` create network namespaces: they skip, with one line,
only where this machine forbids namespaces (not root). Everywhere else (CI
runs as root) they run, and a missing build is a failure, not a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quiclab.testbed.build import Builder
from quiclab.testbed.runner import Paths, Testbed
from quiclab.testbed.stacks import STACKS

NO_NAMESPACES = ("testbed: needs root to create network namespaces "
                 f"(running as uid {os.geteuid()})")


@pytest.fixture(scope="session")
def root() -> None:
    if os.geteuid() != 0:
        pytest.skip(NO_NAMESPACES)


@pytest.fixture(scope="session")
def paths(tmp_path_factory: pytest.TempPathFactory) -> Paths:
    """The real build directory (peers are built once), per-session run logs and state."""
    base = Paths.default()
    runs = tmp_path_factory.mktemp("runs")
    return Paths(build_dir=base.build_dir, runs_dir=runs, peers_dir=base.peers_dir,
                 bpf_dir=base.bpf_dir, state_dir=base.state_dir)


@pytest.fixture(scope="session")
def builder(paths: Paths) -> Builder:
    return Builder(paths.build_dir, paths.peers_dir, paths.bpf_dir, log=lambda line: None)


@pytest.fixture(scope="session")
def quic_go(root: None, builder: Builder) -> None:
    """quic-go's peer and the harness tools, built (cached) — `make test` builds them first."""
    builder.harness()
    result = builder.build(STACKS["quic-go"])
    assert result.ok, f"quic-go peer did not build: {result.error}"
    builder.relay()
    builder.certs()


@pytest.fixture
def testbed(paths: Paths, builder: Builder) -> Testbed:
    return Testbed(paths, builder=builder, startup_s=5.0)


@pytest.fixture
def catalog_path(tmp_path: Path) -> Path:
    return tmp_path / "fresh.duckdb"


def quiclab_namespaces(pid: int | None = None) -> list[str]:
    from quiclab.testbed.topology import PREFIX, list_namespaces

    prefix = PREFIX if pid is None else f"{PREFIX}{pid}-"
    return [ns for ns in list_namespaces() if ns.startswith(prefix)]

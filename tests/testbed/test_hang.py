"""A peer that hangs is killed after the derived timeout; the run is failed; a sweep goes on."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from quiclab.datasets.catalog import Catalog
from quiclab.testbed.config import RunConfig
from quiclab.testbed.runner import Testbed
from quiclab.testbed.session import Session
from quiclab.testbed.stacks import STACKS

pytestmark = pytest.mark.testbed

# A "client" that never transfers anything: it sleeps until killed.
HANG = dataclasses.replace(
    STACKS["quic-go"], name="hang", build="none", source="none",
    command=(sys.executable, "-c", "import time\ntime.sleep(3600)"),
    min_goodput_mbps=1000.0, version="hang 0")


def test_a_hanging_peer_is_killed_and_the_sweep_goes_on(root, quic_go, paths, builder,
                                                        tmp_path):
    stacks = {**STACKS, "hang": HANG}
    testbed = Testbed(paths, stacks=stacks, builder=builder, startup_s=2.0)
    catalog = tmp_path / "fresh.duckdb"
    session = Session(testbed, catalog, log=lambda line: None)
    hung = RunConfig.build("quic-go", "hang", transfer_bytes=1_000_000, experiment="hang")
    fine = RunConfig.build("quic-go", "quic-go", transfer_bytes=1_000_000, experiment="hang")
    [bad] = session.run(hung, 1)
    [good] = session.run(fine, 1)
    assert bad.status == "failed"
    assert bad.failure_reason and bad.failure_reason.startswith("client hang hung: killed after")
    assert bad.client.exit and bad.client.exit.timed_out
    assert bad.timeout_s < 5
    assert good.status == "ok", good.failure_reason
    with Catalog(catalog, read_only=True) as cat:
        rows = dict(cat.con.execute("SELECT status, failure_reason FROM runs "
                                    "ORDER BY status").fetchall())
    assert set(rows) == {"failed", "ok"} and "hung" in rows["failed"]

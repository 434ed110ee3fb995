"""`testbed sweep SPEC`: the YAML of simulated sweeps, measured; resumable."""

from __future__ import annotations

import pytest
import yaml

from quiclab.datasets.catalog import Catalog
from quiclab.testbed.runner import Testbed
from quiclab.testbed.session import Session, sweep

pytestmark = pytest.mark.testbed

SPEC = {
    "name": "sweep-test",
    "base": {"mtu_bytes": 1500},
    "axes": {"implementation": ["quic-go"], "gso": [True, False]},
    "engines": ["analytic"],
    "testbed": {"repeat": 1, "bytes": 2_000_000},
}


def test_sweep_runs_every_point_once_and_resumes(root, quic_go, paths, builder, tmp_path):
    spec = tmp_path / "sweep.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    catalog = tmp_path / "fresh.duckdb"
    lines: list[str] = []
    session = Session(Testbed(paths, builder=builder, startup_s=5.0), catalog,
                      log=lines.append)
    first = sweep(session, spec)
    assert [r.status for r in first] == ["ok", "ok"]
    again = sweep(session, spec)
    assert again == [] and sum("already in the catalog" in line for line in lines) == 2
    with Catalog(catalog, read_only=True) as cat:
        rows = cat.con.execute("SELECT experiment, gso, source FROM runs ORDER BY gso").fetchall()
    assert rows == [("sweep-test", False, "fresh"), ("sweep-test", True, "fresh")]

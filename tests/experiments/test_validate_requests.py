"""``quiclab validate --source fresh`` on request-workload runs: cells of fresh
request and handshake runs compared with each engine on requests/s, completion time and
latency, with the repetitions' noise; bulk cells stay goodput cells."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from quiclab.cli import main
from quiclab.datasets.catalog import Catalog
from quiclab.experiments.validate import _fresh_bulk_cells, request_cells
from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.engine import get_engine
from quiclab.sim.scenario import Scenario

from .conftest import MODELS

REQUESTS = dict(workload="requests", request_bytes=1000, requests=200, connections=2, streams=4)
HANDSHAKES = dict(workload="handshakes", request_bytes=500, requests=40, connections=4,
                  streams=1)


def _run(run_id: str, server: str, status: str = "ok", **fields: object) -> dict:
    row: dict = {"run_id": run_id, "source": "fresh", "experiment": "fresh-requests",
                 "server_impl": server, "client_impl": server, "status": status,
                 "cipher": "aes-ni", "rcvbuf_bytes": 212992, "cpu": "AMD EPYC 7543",
                 "app": "perf", "mtu_bytes": 1500, "rtt_ms": 0.0, "loss_pct": 0.0,
                 "gso": True, "gro": False}
    row.update(fields)
    return row


def _request_run(i: int, server: str, workload: dict, rps: float, status: str = "ok") -> dict:
    setting = f"{server} {workload['workload']}"
    n = int(workload["requests"])
    return _run(f"fresh-{server}-{workload['workload']}-{i}", server, status,
                setting=setting, filesize_bytes=n * int(workload["request_bytes"]),
                requests=n, requests_per_s=rps, runtime_s=n / rps, goodput_mbps=1.0,
                latency_p50_ms=2.0 + i, latency_p90_ms=3.0 + i, latency_p99_ms=4.0 + i,
                **{k: v for k, v in workload.items() if k != "requests"})


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.duckdb"
    rows = [_run(f"fresh-bulk-{i}", "lsquic", setting="bulk", workload="bulk",
                 goodput_mbps=2900.0 + i, filesize_bytes=100_000_000) for i in range(3)]
    rows += [_request_run(i, "lsquic", REQUESTS, rps) for i, rps in enumerate((900, 1000, 1100))]
    rows += [_request_run(i, "quiche", HANDSHAKES, rps) for i, rps in enumerate((300, 340))]
    # Neither a failed run nor a stack without a model is a cell.
    rows += [_request_run(9, "lsquic", REQUESTS, 1.0, status="failed"),
             _request_run(0, "nope", REQUESTS, 500.0)]
    with Catalog(path) as cat:
        cat.upsert("runs", rows)
    return path


def _scenario(server: str, workload: dict) -> Scenario:
    n, size = int(workload["requests"]), int(workload["request_bytes"])
    return Scenario(server=server, client=server, app="perf", cpu="AMD EPYC 7543",
                    cipher="aes-ni", rcvbuf_bytes=212992, mtu_bytes=1500, rtt_ms=0.0,
                    loss_pct=0.0, gso=True, gro=False, transfer_bytes=n * size, **workload)


def test_request_cells_are_the_runs_medians(catalog: Path) -> None:
    with Catalog(catalog, read_only=True) as cat:
        runs = cat.df("SELECT * FROM runs WHERE workload <> 'bulk'")
    cells = {c.scenario.server: c for c in request_cells(runs, ["lsquic", "quiche"], None)}
    assert set(cells) == {"lsquic", "quiche"}  # no failed run, no stack without a model
    lsquic = cells["lsquic"]
    assert lsquic.scenario == _scenario("lsquic", REQUESTS)
    assert lsquic.n == 3 and lsquic.observed["requests_per_s"] == 1000.0
    assert lsquic.cv["requests_per_s"] == pytest.approx(0.1)
    assert lsquic.observed["completion_s"] == pytest.approx(200 / 1000)
    assert cells["quiche"].scenario.workload == "handshakes"
    assert cells["quiche"].observed["latency_p99_ms"] == pytest.approx(4.5)
    assert lsquic.scenario.cc == "cubic"  # the runs recorded none: the Scenario default
    # A cell predicts the congestion controller its runs used.
    runs.loc[runs["server_impl"] == "quiche", "cc"] = "reno"
    cells = {c.scenario.server: c for c in request_cells(runs, ["lsquic", "quiche"], None)}
    assert cells["quiche"].scenario.cc == "reno" and cells["lsquic"].scenario.cc == "cubic"


def test_fresh_bulk_cells_keep_each_stacks_congestion_controller(catalog: Path) -> None:
    with Catalog(catalog, read_only=True) as cat:
        runs = cat.df("SELECT * FROM runs WHERE workload = 'bulk'")
    quiche = runs.assign(server_impl="quiche", client_impl="quiche", cc="reno",
                         run_id=runs["run_id"] + "-q")
    both = pd.concat([runs.assign(cc="cubic"), quiche], ignore_index=True)
    cells = {e.scenario.server: e for e in _fresh_bulk_cells(both, ["lsquic", "quiche"],
                                                              {"base_rtt_us": 90.0})}
    assert cells["quiche"].scenario.cc == "reno" and cells["lsquic"].scenario.cc == "cubic"
    assert cells["quiche"].scenario.base_rtt_us == 90.0
    assert cells["lsquic"].goodput_mbps == 2901.0


def test_fresh_cells_without_gso_have_nothing_for_gro_to_batch(catalog: Path) -> None:
    """veth delivers what the sender wrote: with GSO off the receiver reads single
    datagrams whatever its GRO setting (measured ~1.0 packet per receive), so the cell's
    Scenario turns GRO off; with GSO on, GRO batches the super-packets as recorded."""
    with Catalog(catalog, read_only=True) as cat:
        runs = cat.df("SELECT * FROM runs WHERE workload = 'bulk'")
    off = runs.assign(gso=False, gro=True, setting="lsquic gso off",
                      run_id=runs["run_id"] + "-off")
    on = runs.assign(gso=True, gro=True)
    cells = _fresh_bulk_cells(pd.concat([on, off], ignore_index=True), ["lsquic"], None)
    flags = sorted((e.scenario.gso, e.scenario.gro) for e in cells)
    assert flags == [(False, False), (True, True)]


def test_fresh_rate_cells_get_the_queue_the_testbed_applied(catalog: Path) -> None:
    """A ``tc tbf`` cell predicts with the limit the runs recorded (at least 64 or
    136 KiB on the testbed), not the Scenario's 1 × BDP; cells without one keep it."""
    with Catalog(catalog, read_only=True) as cat:
        runs = cat.df("SELECT * FROM runs WHERE workload = 'bulk'")
    tbf = {"topology": {"applied": {"tbf": {"rate_bps": 10**9, "limit_bytes": 65536}}}}
    rate = runs.assign(link_gbps=1.0, setting="lsquic 1G", run_id=runs["run_id"] + "-1g",
                       extra=json.dumps(tbf))
    cells = _fresh_bulk_cells(pd.concat([runs, rate], ignore_index=True), ["lsquic"], None)
    queues = sorted((e.scenario.link_gbps, e.scenario.queue_bytes) for e in cells)
    assert queues == [(1.0, 65536), (Scenario().link_gbps, 0)]


def test_validate_fresh_compares_request_runs(tmp_path: Path, catalog: Path, models_dir: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "validation"
    assert main(["--models", str(models_dir), "--catalog", str(catalog), "validate",
                 "--source", "fresh", "--engine", "analytic", "--engine", "des", "--quiet",
                 "--out", str(out), "--reproductions", str(tmp_path / "none"),
                 "--fresh-models", str(models_dir)]) == 0
    printed = capsys.readouterr().out
    assert "request workloads (fresh)" in printed
    # Bulk runs stay goodput cells; request runs are not among them.
    goodput = pd.read_csv(out / "validation.csv")
    assert set(goodput["ident"]) == {"fresh-requests|bulk"}
    items = pd.read_csv(out / "requests.csv")
    assert len(items) == 2 * 2 * 4  # engines × cells × quantities
    registry = synthetic_registry(*(synthetic_model(n, **kw) for n, kw in MODELS.items()))
    for engine in ("analytic", "des"):
        expected = get_engine(engine, registry).predict(_scenario("lsquic", REQUESTS))
        rps = items[(items["engine"] == engine) & (items["quantity"] == "requests_per_s")
                    & items["ident"].str.contains("lsquic")].iloc[0]
        assert rps["observed"] == 1000.0 and rps["n"] == 3
        assert rps["predicted"] == pytest.approx(expected.requests_per_s, rel=1e-6)
        assert rps["ape_pct"] == pytest.approx(abs(expected.requests_per_s - 1000) / 10)
        assert rps["noise_cv_pct"] == pytest.approx(10.0)
        done = items[(items["engine"] == engine) & (items["quantity"] == "completion_s")
                     & items["ident"].str.contains("lsquic")].iloc[0]
        assert done["predicted"] == pytest.approx(expected.completion_s, rel=1e-6)
    handshakes = items[items["workload"] == "handshakes"]
    assert len(handshakes) == 8 and handshakes["predicted"].map(math.isfinite).all()
    summary = pd.read_csv(out / "requests-summary.csv")
    assert set(summary["quantity"]) == {"requests_per_s", "completion_s", "latency_p50_ms",
                                        "latency_p99_ms"}
    assert (summary["predicted"] == 2).all()
    md = (out / "validation.md").read_text()
    assert "## Request workloads (fresh)" in md
    assert "Request workloads" in (out / "validation.html").read_text()

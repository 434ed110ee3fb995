"""The committed models against the evidence they were fitted to (regression test).

The thresholds are the calibration's acceptance figures: in-sample median absolute
percentage error of goodput over all implementation pairs of the calibration
subset ≤ 5 %; seed 000 Fig. 9a (MTU 9000, GSO/GRO) within 10 %; no prediction
above the link rate or the single-core crypto ceiling.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from quiclab.calibration.evidence import dataset_cells, published_points
from quiclab.models.registry import Registry
from quiclab.paths import PROJECT_ROOT
from quiclab.sim.analytic import AnalyticEngine

FITTED = PROJECT_ROOT / "models" / "fitted"


@pytest.fixture(scope="module")
def evidence(full_ingest):
    if not any(FITTED.glob("*.json")):
        pytest.skip("no fitted models (run quiclab calibrate)")
    con = duckdb.connect(str(full_ingest.catalog), read_only=True)
    runs = con.execute("SELECT * FROM runs WHERE source = 'qir10g'").df()
    points = con.execute("SELECT * FROM published_points").df()
    con.close()
    registry = Registry.load(FITTED)
    # Published points on the calibrated testbeds (models/fitted/testbeds.json).
    published, _ = published_points(points, registry.testbeds)
    return dataset_cells(runs), published, AnalyticEngine(registry)


def _ape(engine, items):
    preds = engine.predict_batch([e.scenario for e in items])
    return np.array([abs(p.goodput_mbps / e.goodput_mbps - 1) * 100
                     for p, e in zip(preds, items, strict=True)]), preds


def test_in_sample_median_error_over_all_pairs_is_at_most_5_percent(evidence):
    cells, _, engine = evidence
    ape, _ = _ape(engine, cells)
    assert len(cells) >= 90
    assert np.median(ape) <= 5.0, f"median APE {np.median(ape):.1f} %"


FIG9A = ("koenig25-039", "koenig25-040", "koenig25-046",  # quiche: GSO off/on, MTU 9000
         "koenig25-042", "koenig25-031", "koenig25-050",  # ngtcp2: GSO off/on, MTU 9000
         "koenig25-047", "koenig25-048")  # lsquic: MTU 1500/9000


def test_seed000_fig9a_mtu_and_offload_within_10_percent(evidence):
    _, published, engine = evidence
    items = [e for e in published if e.ident in FIG9A]
    assert len(items) == len(FIG9A)
    ape, _ = _ape(engine, items)
    assert ape.max() <= 10.0, dict(zip([e.ident for e in items], ape.round(1), strict=True))


def test_no_prediction_exceeds_the_link_or_the_crypto_ceiling(evidence):
    cells, published, engine = evidence
    _, preds = _ape(engine, cells + published)
    for p in preds:
        assert p.goodput_mbps <= p.rates_mbps["link"] * (1 + 1e-9)
    # Crypto ceiling: one core can encrypt at most P·8 / crypto_ns per packet.
    from quiclab.sim.resolve import resolve

    for p in preds:
        r = resolve(p.scenario, engine.registry)
        ceiling = r.sender.cores * r.sender.stream_bytes * 8 / r.sender.ns_crypto * 1e3
        assert p.goodput_mbps <= ceiling * (1 + 1e-9)
